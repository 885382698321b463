"""The gather_nd and one_hot workloads of the benchmark (see :mod:`benchmarks.harness.workload` for the fields)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dmljax as dml
from benchmarks.harness.workload import FILL_MODE, OnnxNode, Workload, normal, torch_mod


def gather_one_hot_workloads(quick: bool) -> list[Workload]:
  emb, count = ((1000, 64), 256) if quick else ((50000, 512), 8192)
  bx, bi = ((4, 128, 16), (4, 64, 1)) if quick else ((32, 1024, 64), (32, 512, 1))
  oh, depth = (256, 100) if quick else (8192, 1000)
  torch = torch_mod

  def embedding(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return normal(emb)(rng)[0], rng.integers(0, emb[0], (count, 1), dtype=np.int32)

  def batched(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return normal(bx)(rng)[0], rng.integers(0, bx[1], bi, dtype=np.int32)

  def hot(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return rng.integers(0, depth, (oh, 1), dtype=np.int32), np.array([0.0, 1.0], np.float32)

  batch = np.arange(bx[0])[:, None]

  def torch_batched_index(x: Any, i: Any) -> Any:
    return x[torch().arange(bx[0])[:, None], i[..., 0].long()]

  def torch_one_hot_scatter(i: Any, v: Any) -> Any:
    t = torch()
    return t.zeros((oh, depth), dtype=v.dtype).scatter_(1, i.long(), v[1].expand(oh, 1))

  return [
    Workload(
      name=f"gather_nd embedding {emb[0]}x{emb[1]}, {count} indices",
      group="gather_nd",
      make=embedding,
      dmljax=lambda x, i: dml.gather_nd(x, i),
      jax={"x[i]": lambda x, i: x[i[:, 0]], "jnp.take": lambda x, i: jnp.take(x, i[:, 0], axis=0)},
      approx_reasons={"jnp.take": FILL_MODE},
      torch={
        "x[i]": lambda x, i: x[i[:, 0].long()],
        "torch.index_select": lambda x, i: torch().index_select(x, 0, i[:, 0]),
      },
      onnx={
        "GatherND": OnnxNode("GatherND", {"batch_dims": 0}, prepare=lambda a: (a[0], a[1].astype(np.int64))),
        "Gather": OnnxNode("Gather", {"axis": 0}, prepare=lambda a: (a[0], a[1][:, 0].copy())),
      },
      grad=True,
    ),
    Workload(
      name=f"gather_nd batched {'x'.join(map(str, bx))}, {'x'.join(map(str, bi))} indices, batch_dims=1",
      group="gather_nd",
      make=batched,
      dmljax=lambda x, i: dml.gather_nd(x, i, batch_dims=1),
      jax={
        "x[b, i]": lambda x, i: x[batch, i[..., 0]],
        "jnp.take_along_axis": lambda x, i: jnp.take_along_axis(x, i, axis=1),
      },
      approx_reasons={"jnp.take_along_axis": FILL_MODE},
      torch={
        "x[b, i]": torch_batched_index,
        "torch.gather": lambda x, i: torch().gather(x, 1, i.long().expand(-1, -1, bx[2])),
      },
      onnx={
        "GatherND": OnnxNode("GatherND", {"batch_dims": 1}, prepare=lambda a: (a[0], a[1].astype(np.int64))),
      },
      grad=True,
    ),
    Workload(
      name=f"one_hot {oh}x1 indices, depth {depth}",
      group="one_hot",
      make=hot,
      dmljax=lambda i, v: dml.one_hot(i[:, 0], depth, on_value=v[1], off_value=v[0]),
      jax={"jax.nn.one_hot": lambda i, v: jax.nn.one_hot(i[:, 0], depth, dtype=v.dtype)},
      torch={
        "F.one_hot().to(float32)": lambda i, v: torch().nn.functional.one_hot(i[:, 0].long(), depth).to(v.dtype),
        "zeros().scatter_()": torch_one_hot_scatter,
      },
      onnx={
        "OneHot": OnnxNode(
          "OneHot",
          {"axis": -1},
          (("depth", np.array(depth, np.int64)),),
          inputs=("in0", "depth", "in1"),
          prepare=lambda a: (a[0][:, 0].astype(np.int64), a[1]),
        )
      },
    ),
  ]
