"""Per-platform implementations, and a switch that makes tests run any platform's branch on CPU.

Every place that picks an implementation by platform calls :func:`branch`, a
``lax.platform_dependent`` with a ``cpu`` and a ``default`` (GPU, TPU) branch.
Inside :func:`forced` or after :func:`force` (private, for tests) the chosen branch is traced on its own
whatever the platform, so a CPU-only CI runs the code other platforms compile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Literal

import jax
from jax import lax

Branch = Literal["cpu", "default"]
Implementation = Callable[[jax.Array], jax.Array]

_forced: Branch | None = None


def branch(x: jax.Array, *, cpu: Implementation, default: Implementation) -> jax.Array:
  """``cpu(x)`` on CPU, ``default(x)`` elsewhere (or the branch that :func:`forced` names)."""
  if _forced == "cpu":
    return cpu(x)
  if _forced == "default":
    return default(x)
  return lax.platform_dependent(x, cpu=cpu, default=default)


def force(which: Branch | None) -> None:
  """From now on every :func:`branch` traces ``which`` only (``None``: choose by platform).

  The choice is read at trace time, so JAX's compilation caches are cleared whenever it changes:
  no function traced under one choice is reused under another.
  """
  global _forced
  if which not in (None, "cpu", "default"):
    raise ValueError(f"which must be 'cpu', 'default' or None; got {which!r}")
  if which != _forced:
    _forced = which
    jax.clear_caches()


@contextlib.contextmanager
def forced(which: Branch | None) -> Iterator[None]:
  """:func:`force` within the block, the previous choice after it."""
  previous = _forced
  force(which)
  try:
    yield
  finally:
    force(previous)
