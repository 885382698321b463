"""Times dml.top_k under each top-k strategy against jax.lax.top_k and torch.topk; for a machine with a GPU.

For every input type and ``k``, prints the median milliseconds of ``jax.lax.top_k`` on the raw values,
of ``dml.top_k`` with the strategy its table picks (``table``) and with each strategy of
``dmljax._src.strategies.dispatch`` forced by name where it handles the case,
and of ``torch.topk`` when a CUDA build of PyTorch is present. Every strategy's values and indices are
compared bit for bit with the table's pick; a difference prints ``MISMATCH``. On CPU the numbers only
show that the script runs.

Run: ``python -m benchmarks.compiled.gpu_selection [--shape 64x131072] [--k 1 8 50 256 1024] [--reps 50]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import dmljax as dml
from benchmarks.harness import timing
from dmljax._src import platform
from dmljax._src.strategies import dispatch
from dmljax._src.strategies.case import Case


def median_ms(f: Callable[..., Any], *args: Any, reps: int) -> float:
  return 1e3 * timing.medians({"f": lambda: f(*args)}, rounds=reps, inner=1)["f"]


def torch_ms(x: jax.Array, k: int, reps: int) -> float | None:
  try:
    import torch
  except ImportError:
    return None
  if not torch.cuda.is_available():
    return None
  dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32}
  t = torch.from_numpy(np.asarray(jax.device_get(x.astype(jnp.float32)))).cuda().to(dtype[str(x.dtype)])
  call = {"torch.topk": lambda: torch.topk(t, k)}
  return 1e3 * timing.medians(call, rounds=reps, inner=1, wait=lambda _: torch.cuda.synchronize())["torch.topk"]


def same_bits(a: Any, b: Any) -> bool:
  return all(
    np.array_equal(np.asarray(u).view(np.uint8), np.asarray(v).view(np.uint8)) for u, v in zip(a, b, strict=True)
  )


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--shape", default="64x131072")
  parser.add_argument("--k", type=int, nargs="*", default=[1, 8, 50, 256, 1024])
  parser.add_argument("--reps", type=int, default=50)
  args = parser.parse_args(argv)
  rows, n = (int(s) for s in args.shape.split("x"))
  base = jax.random.normal(jax.random.key(0), (rows, n), jnp.float32)
  inputs = {
    "float32": base,
    "float16": base.astype(jnp.float16),
    "bfloat16": base.astype(jnp.bfloat16),
    "int32": (base * 1e6).astype(jnp.int32),
  }
  print(f"device: {jax.devices()[0].device_kind}; float32 input: {base.nbytes / 2**20:.1f} MiB")
  choices = [("table", None)] + [(name, name) for name in sorted(dispatch.BY_NAME)]
  for name, x in inputs.items():
    for k in args.k:
      row = [f"{name} {args.shape} k={k}"]
      row.append(f"lax.top_k {median_ms(jax.jit(lambda x, k=k: jax.lax.top_k(x, k)), x, reps=args.reps):.3f}")
      first = None
      for label, strategy in choices:
        case = Case.of(x, k, True)
        if strategy is not None and not dispatch.BY_NAME[strategy].handles(case):
          continue
        with platform.choosing(top_k=strategy):
          f = jax.jit(lambda x, k=k: dml.top_k(x, k))  # a function of its own per choice: traced under it
          out = jax.device_get(f(x))
          first = out if first is None else first
          exact = "" if same_bits(out, first) else " MISMATCH"
          row.append(f"{label} {median_ms(f, x, reps=args.reps):.3f}{exact}")
      torch_time = torch_ms(x, k, args.reps)
      if torch_time is not None:
        row.append(f"torch.topk {torch_time:.3f}")
      print(" | ".join(row), flush=True)


if __name__ == "__main__":
  main()
