"""Per-call overhead of dmljax.onnx's backend, in two measurements.

1. The routing graph of ``examples/onnx_routing.py`` (TopK, ReduceLogSumExp, Sub, Exp, Unsqueeze, GatherND, Mul,
   ReduceSum, ArgMax, Constant, OneHot, ReduceSum): ``rep.function`` vs the same dmljax calls jitted by hand,
   both on device arrays, and whether the two optimized XLA programs are identical.
2. The 4-node graph ReduceMean -> ArgMax -> OneHot -> ReduceSum, small enough that dispatch dominates: the
   same dmljax calls jitted by hand, ``rep.function`` (device arrays in, the result waited for),
   ``rep.run`` (NumPy in and out, every feed check included), the hand-jitted function on NumPy in and out
   (what ``rep.run`` costs without its checks), and ONNX Runtime's ``InferenceSession.run`` where installed.
   The targets: ``rep.function`` within 1.1x of the hand-jitted calls, ``rep.run`` within 1.5x of
   ``rep.function``.

Contenders alternate round by round, so that machine noise hits all alike; each round times ``--calls``
calls, and the report gives each contender's median round and the medians of the per-round ratios.

Run: ``python -m benchmarks.peers.onnx_overhead`` (``--rounds``, ``--calls``, ``--tokens`` to change the workload).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dmljax as dml
import dmljax.onnx as donnx
from benchmarks import ROOT
from benchmarks.harness import timing

EXAMPLE = ROOT / "examples" / "onnx_routing.py"


def _example() -> Any:
  spec = importlib.util.spec_from_file_location("onnx_routing_example", EXAMPLE)
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def direct(logits: jax.Array, table: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The graph's computation as dmljax calls, with the options the backend passes."""
  index = jnp.int64 if jax.config.read("jax_enable_x64") else jnp.int32
  top, indices = dml.top_k(logits, 2, axis=-1, direction="decreasing", index_dtype=index)
  lse = dml.reduce(top, dml.ReduceFunction.LOG_SUM_EXP, (-1,), keepdims=True, index_dtype=jnp.int32)
  gates = jnp.exp(top - lse)
  picked = dml.gather_nd(table, jnp.expand_dims(indices, -1), batch_dims=0)
  mixed = dml.reduce(gates[..., None] * picked, dml.ReduceFunction.SUM, (1,), keepdims=False, index_dtype=jnp.int32)
  first = dml.argmax(logits, -1, ties="first", keepdims=False, index_dtype=index)
  on_off = jnp.array([0.0, 1.0], jnp.float32)
  dispatch = dml.one_hot(first, table.shape[0], axis=1, on_value=on_off[1], off_value=on_off[0])
  load = dml.reduce(dispatch, dml.ReduceFunction.SUM, (0,), keepdims=False, index_dtype=jnp.int32)
  return mixed, load, indices


def _normalized(text: str) -> str:
  text = text.split("\nFileNames")[0]
  text = re.sub(r", metadata=\{[^}]*\}", "", text)
  text = re.sub(r"HloModule \S+", "HloModule m", text)
  names: dict[str, str] = {}
  return re.sub(r"%[\w.\-]+", lambda m: names.setdefault(m.group(0), f"%v{len(names)}"), text)


def main(tokens: int = 8192, experts: int = 64, width: int = 128, rounds: int = 21, calls: int = 20) -> dict[str, Any]:
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(tokens, experts)).astype(np.float32))
  table = jnp.asarray(rng.normal(size=(experts, width)).astype(np.float32))
  rep = donnx.Backend.prepare(_example().build_model(tokens, experts, width))
  hand = jax.jit(direct)
  same_program = _normalized(rep.lower(logits, table).compile().as_text()) == _normalized(
    hand.lower(logits, table).compile().as_text()
  )
  for got, want in zip(rep.function(logits, table), hand(logits, table), strict=True):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
  times = timing.round_samples(
    {"backend": lambda: rep.function(logits, table), "direct": lambda: hand(logits, table)},
    rounds=rounds,
    inner=calls,
    warmup=2,
  )
  backend_times, direct_times = times["backend"], times["direct"]
  ratios = np.array(backend_times) / np.array(direct_times)
  result = {
    "shape": (tokens, experts, width),
    "backend_ms": 1e3 * float(np.median(backend_times)),
    "direct_ms": 1e3 * float(np.median(direct_times)),
    "ratio": float(np.median(ratios)),
    "same_program": same_program,
    "device": str(jax.devices()[0]),
  }
  print(
    f"{result['device']} {result['shape']}: backend {result['backend_ms']:.3f} ms, direct {result['direct_ms']:.3f} ms "
    f"(median of {rounds} interleaved rounds of {calls} calls); median ratio {result['ratio']:.3f}; "
    f"identical optimized HLO: {same_program}"
  )
  return result


def four_node_model(batch: int = 64, experts: int = 16, width: int = 8) -> Any:
  """ReduceMean over the last axis, ArgMax, OneHot(experts), ReduceSum over the batch; x is (batch, experts, width)."""
  from onnx import TensorProto, helper

  f32, i64 = TensorProto.FLOAT, TensorProto.INT64
  nodes = [
    helper.make_node("ReduceMean", ["x", "last"], ["mean"], keepdims=0),
    helper.make_node("ArgMax", ["mean"], ["choice"], axis=-1, keepdims=0),
    helper.make_node("OneHot", ["choice", "depth", "on_off"], ["hot"], axis=-1),
    helper.make_node("ReduceSum", ["hot", "first"], ["load"], keepdims=0),
  ]
  initializers = [
    helper.make_tensor("last", i64, [1], [-1]),
    helper.make_tensor("first", i64, [1], [0]),
    helper.make_tensor("depth", i64, [], [experts]),
    helper.make_tensor("on_off", f32, [2], [0.0, 1.0]),
  ]
  graph = helper.make_graph(
    nodes,
    "four_nodes",
    [helper.make_tensor_value_info("x", f32, [batch, experts, width])],
    [helper.make_tensor_value_info("load", f32, [experts])],
    initializer=initializers,
  )
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def four_node_direct(x: jax.Array) -> tuple[jax.Array]:
  """The 4-node graph as dmljax calls, with the options the backend passes."""
  index = jnp.int64 if jax.config.read("jax_enable_x64") else jnp.int32
  mean = dml.reduce(x, dml.ReduceFunction.AVERAGE, (-1,), keepdims=False, index_dtype=jnp.int32)
  choice = dml.argmax(mean, -1, ties="first", keepdims=False, index_dtype=index)
  on_off = jnp.array([0.0, 1.0], jnp.float32)
  hot = dml.one_hot(choice, x.shape[1], axis=-1, on_value=on_off[1], off_value=on_off[0], dtype=jnp.float32)
  return (dml.reduce(hot, dml.ReduceFunction.SUM, (0,), keepdims=False, index_dtype=jnp.int32),)


def four_node(batch: int = 64, experts: int = 16, width: int = 8, rounds: int = 31, calls: int = 200) -> dict[str, Any]:
  """Times the 4-node graph's contenders in interleaved rounds; returns median microseconds and ratios."""
  model = four_node_model(batch, experts, width)
  x = np.random.default_rng(0).normal(size=(batch, experts, width)).astype(np.float32)
  on_device = jnp.asarray(x)
  rep = donnx.Backend.prepare(model)
  hand = jax.jit(four_node_direct)
  same_program = _normalized(rep.lower(on_device).compile().as_text()) == _normalized(
    hand.lower(on_device).compile().as_text()
  )
  np.testing.assert_array_equal(rep.run([x])[0], np.asarray(hand(on_device)[0]))
  contenders = {
    "hand-jitted dmljax": lambda: jax.block_until_ready(hand(on_device)),
    "rep.function": lambda: jax.block_until_ready(rep.function(on_device)),
    "rep.run (NumPy in/out, checked)": lambda: rep.run([x]),
    "hand-jitted, NumPy in/out": lambda: [np.asarray(o) for o in hand(x)],
  }
  try:
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], rep.run([x])[0])
    contenders["ONNX Runtime (NumPy in/out)"] = lambda: session.run(None, {"x": x})
  except ImportError:
    pass
  # Each contender waits for its own result (NumPy out, or block_until_ready inside).
  times = timing.round_samples(contenders, rounds=rounds, inner=calls, warmup=5, wait=lambda out: out)
  columns = {name: np.array(t) for name, t in times.items()}
  result: dict[str, Any] = {
    "shape": (batch, experts, width),
    "us": {name: 1e6 * float(np.median(t)) for name, t in columns.items()},
    "function_over_hand": float(np.median(columns["rep.function"] / columns["hand-jitted dmljax"])),
    "run_over_function": float(np.median(columns["rep.run (NumPy in/out, checked)"] / columns["rep.function"])),
    "run_over_numpy_hand": float(
      np.median(columns["rep.run (NumPy in/out, checked)"] / columns["hand-jitted, NumPy in/out"])
    ),
    "same_program": same_program,
    "device": str(jax.devices()[0]),
  }
  figures = ", ".join(f"{name} {us:.1f} us" for name, us in result["us"].items())
  print(
    f"{result['device']} 4-node graph {result['shape']} (median of {rounds} interleaved rounds of {calls} calls): "
    f"{figures}; rep.function / hand-jitted {result['function_over_hand']:.3f}, rep.run / rep.function "
    f"{result['run_over_function']:.3f}, rep.run / hand-jitted NumPy in/out {result['run_over_numpy_hand']:.3f}; "
    f"identical optimized HLO: {same_program}"
  )
  return result


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--tokens", type=int, default=8192)
  parser.add_argument("--experts", type=int, default=64)
  parser.add_argument("--width", type=int, default=128)
  parser.add_argument("--rounds", type=int, default=21)
  parser.add_argument("--calls", type=int, default=20)
  parser.add_argument("--only", choices=["routing", "four-node"], help="one of the two measurements")
  parser.add_argument("--four-node-calls", type=int, default=200)
  args = parser.parse_args()
  if args.only != "four-node":
    main(args.tokens, args.experts, args.width, args.rounds, args.calls)
  if args.only != "routing":
    four_node(rounds=args.rounds, calls=args.four_node_calls)
