"""PyTorch contenders, run as PyTorch's users run them: default thread pools, eager mode.

Nothing here changes PyTorch's threading (no ``torch.set_num_threads``, no ``OMP_*`` variables);
:func:`settings` records what was in force, for the report.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmarks.harness.adapters_jax import value
from benchmarks.harness.timing import Contender, on_gpu

_THREAD_ENV = ("OMP_", "MKL_", "KMP_", "OPENBLAS_", "GOMP_")


def load() -> Any | None:
  """The ``torch`` module, or ``None`` where it is not installed (the bench extra installs it)."""
  try:
    import torch
  except ImportError:
    return None
  return torch


def device(torch: Any) -> str:
  return "cuda" if on_gpu() and torch.cuda.is_available() else "cpu"


def to_torch(torch: Any, a: np.ndarray, where: str) -> Any:
  if a.dtype.name == "bfloat16":
    return torch.from_numpy(a.astype(np.float32)).to(device=where, dtype=torch.bfloat16)
  return torch.from_numpy(np.ascontiguousarray(a)).to(where)


def settings(torch: Any | None) -> dict[str, Any]:
  """The thread settings PyTorch runs with in this process (its defaults unless the caller set any)."""
  env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(_THREAD_ENV)}
  if torch is None:
    return {"installed": False, "env": env}
  return {
    "installed": True,
    "intra_op_threads": torch.get_num_threads(),
    "inter_op_threads": torch.get_num_interop_threads(),
    "env": env,
    "omp_wait_policy": env.get("OMP_WAIT_POLICY", "default (ACTIVE spin-then-sleep in GNU OpenMP)"),
  }


def contender(
  torch: Any,
  name: str,
  fn: Callable[..., Any],
  np_inputs: Sequence[tuple[np.ndarray, ...]],
  np_cotangents: Sequence[np.ndarray] | None,
  index: int | None,
) -> Contender:
  """``fn`` on torch tensors (``no_grad`` forward; ``autograd.grad`` for forward+backward), synchronised."""
  where = device(torch)
  inputs = [tuple(to_torch(torch, a, where) for a in args) for args in np_inputs]
  sync = torch.cuda.synchronize if where == "cuda" else (lambda: None)

  def forward(i: int) -> None:
    with torch.no_grad():
      fn(*inputs[i])
    sync()

  c = Contender(name, "torch", forward)
  if np_cotangents is not None:
    cts = [to_torch(torch, ct, where) for ct in np_cotangents]

    def fwd_bwd(i: int) -> None:
      x = inputs[i][0].detach().requires_grad_(True)
      out = value(fn(x, *inputs[i][1:]), index)
      torch.autograd.grad(out, x, cts[i])
      sync()

    c.fwd_bwd = fwd_bwd
  return c
