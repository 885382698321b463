"""Small-size workloads: where a library's fixed costs (extra passes, wrappers, dispatch) show most.

* LM decoding: top-k of one step's logits, batch 1 to 16 over a 32k to 256k vocabulary, k 1 to 64;
* MoE routing: top-k of router logits, 256 or 4096 tokens over 8 to 256 experts, k 1 to 8;
* per-example code under ``jax.vmap``: top_k of short rows, gather_nd of a few rows per example;
* the same top-k inside a step that does other work (temperature scaling of logits, a router softmax).

Each is timed forward and forward+backward against the native JAX forms (and PyTorch, ONNX Runtime).
Why the in-step workloads: XLA's CPU client runs a program whose estimated work is under 1000 floating-point
operations on the calling thread and hands any other program to a worker thread (a thread hop of tens of
microseconds on a busy 2-core machine). ``jax.lax.top_k`` alone counts as no work, so it always runs
inline; an exact top-k needs at least one elementwise pass over the input (±0 and NaN made canonical), so
from about 200 elements its program is handed off. Inside any real step both programs are handed off, and
the in-step workloads show what remains.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import dmljax as dml
from benchmarks.harness.workload import FLOAT_TOP_K, Fn, OnnxNode, Workload, normal, torch_mod

# (batch, vocabulary, k), a sample that keeps the full run within about 8 minutes on 2 cores; the quick
# run's sizes follow.
DECODE = ((1, 32000, 1), (4, 32000, 64), (16, 128000, 8), (4, 256000, 1))
DECODE_QUICK = ((1, 4096, 8), (4, 4096, 1))
# (tokens, experts, k)
MOE = ((256, 8, 2), (4096, 256, 1))
MOE_QUICK = ((256, 8, 2),)


def _top_k_onnx(k: int) -> dict[str, OnnxNode]:
  return {"TopK": OnnxNode("TopK", {"axis": -1, "largest": 1, "sorted": 1}, (("k", np.array([k], np.int64)),), 2)}


def _top_k_workload(name: str, group: str, shape: tuple[int, int], k: int) -> Workload:
  forms: dict[str, Fn] = {"jax.lax.top_k": lambda x: lax.top_k(x, k)}
  if k == 1:
    forms["jnp.argmax+take_along_axis"] = lambda x: (
      jnp.take_along_axis(x, i := jnp.argmax(x, axis=-1, keepdims=True), axis=-1),
      i,
    )
  return Workload(
    name=name,
    group=group,
    make=normal(shape),
    dmljax=lambda x: dml.top_k(x, k, index_dtype=jnp.int32),
    jax=forms,
    approx_reasons={"jax.lax.top_k": FLOAT_TOP_K},
    torch={"torch.topk": lambda x: torch_mod().topk(x, k, dim=-1)},
    onnx=_top_k_onnx(k),
    grad=True,
    value_output=0,
  )


def _vmap_top_k(rows: int, n: int, k: int) -> Workload:
  def per_row_dml(r: jax.Array) -> Any:
    return dml.top_k(r, k, index_dtype=jnp.int32)

  return Workload(
    name=f"vmap top_k f32 {rows} rows of {n}, k={k}",
    group="vmap",
    make=normal((rows, n)),
    dmljax=jax.vmap(per_row_dml),
    jax={"vmap(jax.lax.top_k)": jax.vmap(lambda r: lax.top_k(r, k))},
    approx_reasons={"vmap(jax.lax.top_k)": FLOAT_TOP_K},
    torch={"torch.topk (batched)": lambda x: torch_mod().topk(x, k, dim=-1)},
    onnx=_top_k_onnx(k),
    grad=True,
    value_output=0,
  )


def _vmap_gather(batch: int, table: tuple[int, int], count: int) -> Workload:
  def make(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = normal((batch, *table))(rng)[0]
    return x, rng.integers(0, table[0], (batch, count, 1), dtype=np.int32)

  def torch_batched(x: Any, i: Any) -> Any:
    return x[torch_mod().arange(batch)[:, None], i[..., 0].long()]

  return Workload(
    name=f"vmap gather_nd {batch} examples of {table[0]}x{table[1]}, {count} indices each",
    group="vmap",
    make=make,
    dmljax=jax.vmap(lambda t, i: dml.gather_nd(t, i)),
    jax={"vmap(t[i])": jax.vmap(lambda t, i: t[i[:, 0]])},
    torch={"x[b, i] (batched)": torch_batched},
    onnx={"GatherND": OnnxNode("GatherND", {"batch_dims": 1}, prepare=lambda a: (a[0], a[1].astype(np.int64)))},
    grad=True,
  )


def _in_step(name: str, group: str, shape: tuple[int, int], k: int, step: str) -> Workload:
  """top_k after ``x / 0.7`` (sampling temperature) or ``softmax(x)`` (router probabilities)."""
  temperature = np.float32(0.7)

  def prepare(x: Any) -> Any:
    return x / temperature if step == "temperature" else jax.nn.softmax(x, axis=-1)

  def torch_prepare(x: Any) -> Any:
    return x / float(temperature) if step == "temperature" else torch_mod().softmax(x, dim=-1)

  return Workload(
    name=name,
    group=group,
    make=normal(shape),
    dmljax=lambda x: dml.top_k(prepare(x), k, index_dtype=jnp.int32),
    jax={"jax.lax.top_k": lambda x: lax.top_k(prepare(x), k)},
    approx_reasons={"jax.lax.top_k": FLOAT_TOP_K},
    torch={"torch.topk": lambda x: torch_mod().topk(torch_prepare(x), k, dim=-1)},
    grad=True,
    value_output=0,
  )


def small_workloads(quick: bool) -> list[Workload]:
  out = [
    _top_k_workload(f"decode top_k f32 {b}x{v} k={k}", "decode", (b, v), k)
    for b, v, k in (DECODE_QUICK if quick else DECODE)
  ]
  for t, e, k in MOE_QUICK if quick else MOE:
    out.append(_top_k_workload(f"MoE routing top_k f32 {t}x{e} k={k}", "moe", (t, e), k))
  out.append(_vmap_top_k(*((64, 64, 4) if quick else (512, 64, 4))))
  out.append(_vmap_gather(*((16, (32, 8), 4) if quick else (256, (64, 16), 8))))
  if not quick:
    out.append(_in_step("decode step top_k(logits / T) f32 1x32000 k=8", "decode", (1, 32000), 8, "temperature"))
    out.append(_in_step("MoE step top_k(softmax(router)) f32 256x8 k=2", "moe", (256, 8), 2, "softmax"))
  return out
