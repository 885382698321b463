"""An ONNX top-2 routing graph run through ``dmljax.onnx``: jit, grad, and agreement with ONNX Runtime.

The graph, built with ``onnx.helper``, is the routing half of a mixture-of-experts block:

* ``TopK(logits, K=2)`` picks each token's two experts;
* ``ReduceLogSumExp`` over the two kept scores normalises them, ``gates = Exp(top - lse)``;
* ``GatherND(expert_table, Unsqueeze(indices))`` picks the two experts' embeddings, which the gates mix
  (``Mul``, then ``ReduceSum`` over the two);
* ``ArgMax``, ``OneHot`` and ``ReduceSum`` count the tokens whose first choice is each expert (the load).

``dmljax.onnx.Backend.prepare`` turns it into one jitted JAX function (``rep.function``). The program checks
its outputs against ONNX Runtime (when installed) and against the same computation written with
``jax.lax.top_k``, ``jax.nn.one_hot`` and indexing, then takes ``jax.grad`` of a loss through the ONNX graph
with respect to the logits and the expert table and compares it with the gradient of that rewrite.

Run: ``python examples/onnx_routing.py`` (``--fast`` for the reduced settings the test suite uses).
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from onnx import TensorProto, helper

import dmljax.onnx as donnx

TOP = 2
FULL = {"tokens": 4096, "experts": 16, "width": 64}
FAST = {"tokens": 256, "experts": 8, "width": 16}
OPSET = 18


def build_model(tokens: int, experts: int, width: int) -> Any:
  """The routing graph: inputs ``logits`` (tokens, experts) and ``table`` (experts, width)."""
  f32, i64 = TensorProto.FLOAT, TensorProto.INT64
  nodes = [
    helper.make_node("TopK", ["logits", "k"], ["top", "indices"], name="route", axis=-1),
    helper.make_node("ReduceLogSumExp", ["top", "last_axis"], ["lse"], name="normalise", keepdims=1),
    helper.make_node("Sub", ["top", "lse"], ["log_gates"], name="log_gates"),
    helper.make_node("Exp", ["log_gates"], ["gates"], name="gates"),
    helper.make_node("Unsqueeze", ["indices", "last_axis"], ["index_tuples"], name="index_tuples"),
    helper.make_node("GatherND", ["table", "index_tuples"], ["picked"], name="pick_experts"),
    helper.make_node("Unsqueeze", ["gates", "last_axis"], ["gate_columns"], name="gate_columns"),
    helper.make_node("Mul", ["gate_columns", "picked"], ["weighted"], name="weigh"),
    helper.make_node("ReduceSum", ["weighted", "choice_axis"], ["mixed"], name="mix", keepdims=0),
    helper.make_node("ArgMax", ["logits"], ["first_choice"], name="first_choice", axis=-1, keepdims=0),
    helper.make_node("Constant", [], ["depth"], name="depth", value=helper.make_tensor("d", i64, [], [experts])),
    helper.make_node("OneHot", ["first_choice", "depth", "on_off"], ["dispatch"], name="dispatch", axis=-1),
    helper.make_node("ReduceSum", ["dispatch", "token_axis"], ["load"], name="load", keepdims=0),
  ]
  initializers = [
    helper.make_tensor("k", i64, [1], [TOP]),
    helper.make_tensor("last_axis", i64, [1], [-1]),
    helper.make_tensor("choice_axis", i64, [1], [1]),
    helper.make_tensor("token_axis", i64, [1], [0]),
    helper.make_tensor("on_off", f32, [2], [0.0, 1.0]),
  ]
  graph = helper.make_graph(
    nodes,
    "top2_routing",
    [
      helper.make_tensor_value_info("logits", f32, [tokens, experts]),
      helper.make_tensor_value_info("table", f32, [experts, width]),
    ],
    [
      helper.make_tensor_value_info("mixed", f32, [tokens, width]),
      helper.make_tensor_value_info("load", f32, [experts]),
      helper.make_tensor_value_info("indices", i64, [tokens, TOP]),
    ],
    initializer=initializers,
  )
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=9)


def rewrite(logits: jax.Array, table: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The same computation in plain JAX (lax.top_k, softmax, indexing, jax.nn.one_hot)."""
  top, indices = jax.lax.top_k(logits, TOP)
  gates = jax.nn.softmax(top, axis=-1)
  mixed = jnp.sum(gates[..., None] * table[indices], axis=1)
  load = jnp.sum(jax.nn.one_hot(jnp.argmax(logits, axis=-1), table.shape[0], dtype=jnp.float32), axis=0)
  return mixed, load, indices


def onnx_runtime_outputs(model: Any, logits: np.ndarray, table: np.ndarray) -> list[np.ndarray] | None:
  """The graph's outputs from ONNX Runtime, or None when it is not installed."""
  if importlib.util.find_spec("onnxruntime") is None:
    return None
  import onnxruntime

  session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  return session.run(None, {"logits": logits, "table": table})


def main(fast: bool = False, seed: int = 0) -> dict[str, Any]:
  settings = FAST if fast else FULL
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(settings["tokens"], settings["experts"])).astype(np.float32)
  table = rng.normal(size=(settings["experts"], settings["width"])).astype(np.float32)
  target = jnp.asarray(rng.normal(size=(settings["tokens"], settings["width"])).astype(np.float32))
  model = build_model(**settings)

  start = time.perf_counter()
  rep = donnx.Backend.prepare(model)
  mixed, load, indices = rep.run([logits, table])
  seconds = time.perf_counter() - start
  print(
    f"{settings}: prepared, compiled and ran in {seconds:.2f} s; "
    f"outputs {[o.dtype.name for o in (mixed, load, indices)]}"
  )

  expected = rewrite(jnp.asarray(logits), jnp.asarray(table))
  np.testing.assert_array_equal(indices, np.asarray(expected[2]))
  np.testing.assert_array_equal(load, np.asarray(expected[1]))
  mixed_error = float(np.max(np.abs(mixed - np.asarray(expected[0]))))
  np.testing.assert_allclose(mixed, np.asarray(expected[0]), rtol=1e-5, atol=1e-5)

  ort = onnx_runtime_outputs(model, logits, table)
  ort_error = None
  if ort is not None:
    np.testing.assert_array_equal(indices, ort[2])
    np.testing.assert_array_equal(load, ort[1])
    ort_error = float(np.max(np.abs(mixed - ort[0])))
    np.testing.assert_allclose(mixed, ort[0], rtol=1e-5, atol=1e-5)
    print(f"ONNX Runtime: same indices and load, mixed within {ort_error:.1e}")

  def loss(function: Any, logits: jax.Array, table: jax.Array) -> jax.Array:
    return jnp.mean((function(logits, table)[0] - target) ** 2)

  gradient = jax.jit(jax.grad(lambda lg, tb: loss(rep.function, lg, tb), argnums=(0, 1)))
  reference = jax.jit(jax.grad(lambda lg, tb: loss(rewrite, lg, tb), argnums=(0, 1)))
  got, want = gradient(logits, table), reference(logits, table)
  gradient_error = max(float(jnp.max(jnp.abs(g - w))) for g, w in zip(got, want, strict=True))
  print(f"jax.grad through the ONNX graph: max difference {gradient_error:.1e} from the plain-JAX rewrite's")
  for g, w in zip(got, want, strict=True):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)
  assert float(jnp.linalg.norm(got[0])) > 0 and float(jnp.linalg.norm(got[1])) > 0
  return {"mixed_error": mixed_error, "ort_error": ort_error, "gradient_error": gradient_error}


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--fast", action="store_true", help="reduced settings (as in the test suite)")
  main(fast=parser.parse_args().fast)
