"""The copy-bandwidth baseline of the reductions: in-place ``x += 1`` of float32 arrays.

Each call reads and writes ``x`` once. Call ``i`` updates the ``i``-th of ``--pool`` distinct arrays,
as the reductions read the ``i``-th of their inputs: an array that fits in the last-level cache
would otherwise be updated in cache from the second call of a sample on, while the reductions read
theirs from memory.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness.timing import Progress, Runner, on_gpu, time_interleaved
from benchmarks.peers import adapters_torch


def copy_runners(args: argparse.Namespace, shape: tuple[int, ...]) -> list[Runner]:
  """In-place updates by JAX (a donated jitted ``x + 1``), NumPy and PyTorch where installed."""
  rng = np.random.default_rng(1)
  hosts = [rng.standard_normal(shape, dtype=np.float32) + 2.0 for _ in range(args.pool)]
  arrays = [jnp.asarray(h) for h in hosts]
  bump = jax.jit(lambda a: a + np.float32(1), donate_argnums=0)

  def jax_update(i: int) -> None:
    arrays[i] = jax.block_until_ready(bump(arrays[i]))

  runners: list[Runner] = [("copy: jax x+1 (donated)", jax_update)]
  if not on_gpu():
    buffers = [h.copy() for h in hosts]
    runners.append(("copy: numpy np.add(out=x)", lambda i: np.add(buffers[i], np.float32(1), out=buffers[i])))
  torch = None if args.no_torch else adapters_torch.load()
  if torch is not None:
    where = adapters_torch.device(torch)
    tensors = [torch.from_numpy(h.copy()).to(where) for h in hosts]
    sync = torch.cuda.synchronize if where == "cuda" else (lambda: None)

    def torch_update(i: int) -> None:
      tensors[i].add_(1.0)
      sync()

    runners.append(("copy: torch x.add_(1)", torch_update))
  return runners


def copy_bandwidth(args: argparse.Namespace, progress: Progress, shape: tuple[int, ...]) -> dict[str, Any]:
  """Bytes read+written per second by the fastest in-place update of a float32 array, timed on its own."""
  nbytes = 4 * math.prod(shape)
  runners = copy_runners(args, shape)
  timings, errors = time_interleaved(
    runners,
    pool=args.pool,
    warmup=args.warmup,
    repeats=args.repeats,
    min_sample=args.min_sample,
    progress=progress,
    label="copy bandwidth",
  )
  per = {name: 2 * nbytes / s["median_s"] for name, s in timings.items()}
  best = max(per, key=per.__getitem__)
  return {
    "bytes_per_s": per[best],
    "method": best,
    "array_bytes": nbytes,
    "per_method_bytes_per_s": per,
    "timings": timings,
    "errors": errors,
  }
