"""Per-node overhead of dmljax.onnx's backend: the ONNX routing graph vs the same dmljax calls written by hand.

The graph is the one of ``examples/onnx_routing.py`` (TopK, ReduceLogSumExp, Sub, Exp, Unsqueeze, GatherND,
Mul, ReduceSum, ArgMax, Constant, OneHot, ReduceSum). Both sides are jitted JAX functions on device arrays;
rounds alternate between them (backend, direct, backend, ...) so that machine noise hits both alike, and
each round times ``--calls`` calls. The report gives each side's median round, the median of the per-round
ratios backend/direct, and whether the two optimized XLA programs are identical.

Run: ``python benchmarks/onnx_overhead.py`` (``--rounds``, ``--calls``, ``--tokens`` to change the workload).
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import re
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dmljax as dml
import dmljax.onnx as donnx

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "onnx_routing.py"


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
  first = dml.argmax(logits, -1, direction="increasing", keepdims=False, index_dtype=index)
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


def _time(function: Any, args: tuple[Any, ...], calls: int) -> float:
  start = time.perf_counter()
  for _ in range(calls):
    out = function(*args)
  jax.block_until_ready(out)
  return (time.perf_counter() - start) / calls


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
  _time(rep.function, (logits, table), 2)
  _time(hand, (logits, table), 2)
  backend_times, direct_times = [], []
  for _ in range(rounds):
    backend_times.append(_time(rep.function, (logits, table), calls))
    direct_times.append(_time(hand, (logits, table), calls))
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


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--tokens", type=int, default=8192)
  parser.add_argument("--experts", type=int, default=64)
  parser.add_argument("--width", type=int, default=128)
  parser.add_argument("--rounds", type=int, default=21)
  parser.add_argument("--calls", type=int, default=20)
  args = parser.parse_args()
  main(args.tokens, args.experts, args.width, args.rounds, args.calls)
