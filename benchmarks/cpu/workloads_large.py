"""The large-size workloads of the benchmark: top_k, argmin/argmax and the reductions.

What their fields mean: :mod:`benchmarks.harness.workload`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

import dmljax as dml
from benchmarks.harness.workload import FLOAT_TOP_K, NEGATED_TOP_K, Fn, OnnxNode, Workload, integers, normal, torch_mod


def top_k_workloads(quick: bool) -> list[Workload]:
  rows, n = (4, 2048) if quick else (64, 32768)
  moe = (64, 64) if quick else (8192, 64)
  knn = (16, 512) if quick else (1024, 4096)
  out: list[Workload] = []

  def top_k_case(name: str, shape: tuple[int, ...], k: int, dtype: Any, make: Any) -> Workload:
    is_f32 = np.dtype(dtype) == np.float32
    torch_forms: dict[str, Fn] = {"torch.topk": lambda x: torch_mod().topk(x, k, dim=-1)}
    is_int = np.dtype(dtype) == np.int32
    jax_forms: dict[str, Fn] = {"jax.lax.top_k": lambda x: lax.top_k(x, k)}
    if k == 1:
      jax_forms["jnp.argmax+take_along_axis"] = lambda x: (
        jnp.take_along_axis(x, i := jnp.argmax(x, axis=-1, keepdims=True), axis=-1),
        i,
      )
    return Workload(
      name=name,
      group="top_k",
      make=make,
      dmljax=lambda x: dml.top_k(x, k, index_dtype=jnp.int32),
      jax=jax_forms,
      approx_reasons={} if is_int else {"jax.lax.top_k": FLOAT_TOP_K},
      baseline={} if is_f32 else {"jax.lax.top_k float32": lambda x: lax.top_k(x, k)},
      baseline_make=None if is_f32 else normal(shape),
      torch=torch_forms,
      onnx={"TopK": OnnxNode("TopK", {"axis": -1, "largest": 1, "sorted": 1}, (("k", np.array([k], np.int64)),), 2)},
      grad=dtype != np.int32,
      value_output=0,
      slow_native=not is_f32,
    )

  out.append(top_k_case(f"top_k f32 {rows}x{n} k=50", (rows, n), 50, np.float32, normal((rows, n))))
  out.append(top_k_case(f"top_k f32 {rows}x{n} k=1", (rows, n), 1, np.float32, normal((rows, n))))
  out.append(top_k_case(f"top_k f32 {moe[0]}x{moe[1]} k=2 (MoE)", moe, 2, np.float32, normal(moe)))

  def distances(rng: np.random.Generator) -> tuple[np.ndarray]:
    return (rng.uniform(0.01, 100.0, knn).astype(np.float32),)

  out.append(
    Workload(
      name=f"top_k INCREASING f32 {knn[0]}x{knn[1]} k=16 (kNN)",
      group="top_k",
      make=distances,
      dmljax=lambda x: dml.top_k(x, 16, direction="increasing", index_dtype=jnp.int32),
      jax={"-jax.lax.top_k(-x)": lambda x: (lambda v, i: (-v, i))(*lax.top_k(-x, 16))},
      approx_reasons={"-jax.lax.top_k(-x)": NEGATED_TOP_K},
      baseline={"jax.lax.top_k float32 DECREASING": lambda x: lax.top_k(x, 16)},
      baseline_make=distances,
      torch={"torch.topk(largest=False)": lambda x: torch_mod().topk(x, 16, dim=-1, largest=False)},
      onnx={"TopK": OnnxNode("TopK", {"axis": -1, "largest": 0, "sorted": 1}, (("k", np.array([16], np.int64)),), 2)},
      grad=True,
      value_output=0,
    )
  )
  for label, dtype, make in (
    ("int32", np.int32, integers((rows, n))),
    ("f16", np.float16, normal((rows, n), np.float16)),
    ("bf16", ml_dtypes.bfloat16, normal((rows, n), ml_dtypes.bfloat16)),
  ):
    out.append(top_k_case(f"top_k {label} {rows}x{n} k=50", (rows, n), 50, dtype, make))
  return out


def arg_workloads(quick: bool) -> list[Workload]:
  am = (16, 2048) if quick else (256, 32768)
  a3 = (8, 32, 64) if quick else (64, 128, 256)
  flat = (a3[0], a3[1] * a3[2])
  out = [
    Workload(
      name=f"argmax {am[0]}x{am[1]} axis 1",
      group="argmax",
      make=normal(am),
      dmljax=lambda x: dml.argmax(x, 1, keepdims=True),
      jax={"jnp.argmax": lambda x: jnp.argmax(x, axis=1, keepdims=True)},
      torch={"torch.argmax": lambda x: torch_mod().argmax(x, dim=1, keepdim=True)},
      onnx={"ArgMax": OnnxNode("ArgMax", {"axis": 1, "keepdims": 1})},
    )
  ]

  def single_axis(x: jax.Array) -> jax.Array:
    return jnp.argmin(x.reshape(flat), axis=1)

  def last_by_flip(x: jax.Array) -> jax.Array:
    return flat[1] - 1 - jnp.argmin(jnp.flip(x.reshape(flat), axis=1), axis=1)

  def torch_last(x: Any) -> Any:
    torch = torch_mod()
    return flat[1] - 1 - torch.argmin(torch.flip(x.reshape(flat), dims=(1,)), dim=1)

  for direction in ("increasing", "decreasing"):
    last = direction == "decreasing"
    out.append(
      Workload(
        name=f"argmin {a3[0]}x{a3[1]}x{a3[2]} axes (1,2) {direction.upper()}",
        group="argmin",
        make=normal(a3),
        dmljax=lambda x, t="last" if last else "first": dml.argmin(x, (1, 2), ties=t),
        jax={"n-1-jnp.argmin(flip(reshape))": last_by_flip} if last else {"jnp.argmin(reshape)": single_axis},
        baseline={"jnp.argmin single axis": single_axis},
        baseline_make=normal(a3),
        slow_native=True,
        torch={
          "torch.argmin(flip(reshape))" if last else "torch.argmin(reshape)": torch_last
          if last
          else (lambda x: torch_mod().argmin(x.reshape(flat), dim=1))
        },
        onnx={
          "Reshape+ArgMin": OnnxNode(
            "ArgMin",
            {"axis": 1, "keepdims": 1, "select_last_index": int(last)},
            prepare=lambda args: (args[0].reshape(flat),),
          )
        },
      )
    )
  return out


def reduce_workloads(quick: bool) -> list[Workload]:
  sq = (256, 512) if quick else (4096, 4096)
  avg = (4, 8, 14, 14) if quick else (32, 64, 56, 56)
  size = sq[0] * sq[1] * 4
  torch = torch_mod

  def near_one(rng: np.random.Generator) -> tuple[np.ndarray]:
    return ((1.0 + 0.002 * rng.standard_normal(sq, dtype=np.float32)).astype(np.float32),)

  def reduce_node(op: str, axes: tuple[int, ...] | None) -> OnnxNode:
    consts = () if axes is None else (("axes", np.array(axes, np.int64)),)
    return OnnxNode(op, {"keepdims": 1}, consts)

  return [
    Workload(
      name=f"reduce SUM {sq[0]}x{sq[1]} axis 1",
      group="reduce",
      make=normal(sq),
      dmljax=lambda x: dml.reduce(x, "sum", 1, keepdims=True),
      jax={"jnp.sum": lambda x: jnp.sum(x, axis=1, keepdims=True)},
      torch={"torch.sum": lambda x: torch().sum(x, dim=1, keepdim=True)},
      onnx={"ReduceSum": reduce_node("ReduceSum", (1,))},
      grad=True,
      reduction_bytes=size,
    ),
    Workload(
      name=f"reduce SUM {sq[0]}x{sq[1]} axis 0",
      group="reduce",
      make=normal(sq),
      dmljax=lambda x: dml.reduce(x, "sum", 0, keepdims=True),
      jax={"jnp.sum": lambda x: jnp.sum(x, axis=0, keepdims=True)},
      torch={"torch.sum": lambda x: torch().sum(x, dim=0, keepdim=True)},
      onnx={"ReduceSum": reduce_node("ReduceSum", (0,))},
      grad=True,
      reduction_bytes=size,
    ),
    Workload(
      name=f"reduce SUM {sq[0]}x{sq[1]} all axes",
      group="reduce",
      make=normal(sq),
      dmljax=lambda x: dml.reduce(x, "sum", keepdims=True),
      jax={"jnp.sum": lambda x: jnp.sum(x, keepdims=True)},
      torch={"torch.sum": lambda x: torch().sum(x).reshape(1, 1)},
      onnx={"ReduceSum": reduce_node("ReduceSum", None)},
      grad=True,
      reduction_bytes=size,
    ),
    Workload(
      name=f"reduce LOG_SUM_EXP {sq[0]}x{sq[1]} axis 1",
      group="reduce",
      make=normal(sq),
      dmljax=lambda x: dml.reduce(x, "log_sum_exp", 1, keepdims=True),
      jax={"jax.nn.logsumexp": lambda x: jax.nn.logsumexp(x, axis=1, keepdims=True)},
      torch={"torch.logsumexp": lambda x: torch().logsumexp(x, dim=1, keepdim=True)},
      onnx={"ReduceLogSumExp": reduce_node("ReduceLogSumExp", (1,))},
      grad=True,
      reduction_bytes=size,
    ),
    Workload(
      name=f"reduce L2 {sq[0]}x{sq[1]} axis 1",
      group="reduce",
      make=normal(sq),
      dmljax=lambda x: dml.reduce(x, "l2", 1, keepdims=True),
      jax={
        "jnp.linalg.norm": lambda x: jnp.linalg.norm(x, axis=1, keepdims=True),
        "jnp.sqrt(jnp.sum(x*x))": lambda x: jnp.sqrt(jnp.sum(x * x, axis=1, keepdims=True)),
      },
      torch={"torch.linalg.vector_norm": lambda x: torch().linalg.vector_norm(x, dim=1, keepdim=True)},
      onnx={"ReduceL2": reduce_node("ReduceL2", (1,))},
      grad=True,
      reduction_bytes=size,
    ),
    Workload(
      name=f"reduce MULTIPLY {sq[0]}x{sq[1]} axis 1",
      group="reduce",
      make=near_one,
      dmljax=lambda x: dml.reduce(x, "multiply", 1, keepdims=True),
      jax={"jnp.prod": lambda x: jnp.prod(x, axis=1, keepdims=True)},
      torch={"torch.prod": lambda x: torch().prod(x, dim=1, keepdim=True)},
      onnx={"ReduceProd": reduce_node("ReduceProd", (1,))},
      grad=True,
      reduction_bytes=size,
    ),
    Workload(
      name=f"reduce AVERAGE {'x'.join(map(str, avg))} axes (2,3)",
      group="reduce",
      make=normal(avg),
      dmljax=lambda x: dml.reduce(x, "average", (2, 3), keepdims=True),
      jax={"jnp.mean": lambda x: jnp.mean(x, axis=(2, 3), keepdims=True)},
      torch={"torch.mean": lambda x: torch().mean(x, dim=(2, 3), keepdim=True)},
      onnx={"ReduceMean": reduce_node("ReduceMean", (2, 3))},
      grad=True,
      reduction_bytes=int(np.prod(avg)) * 4,
    ),
  ]
