"""Per-platform implementations, and the trace-time choices that tests and benchmarks make on CPU.

Every place that picks an implementation by platform calls :func:`branch`, a
``lax.platform_dependent`` with a ``cpu``, ``cuda``, ``tpu`` and a ``default``
branch (ROCm and any other platform take ``default``). ``jax.export`` for several
platforms lowers every branch.

A :class:`Choice` changes what is traced (private, for tests and benchmarks): a
forced branch traces that branch alone whatever the platform, so a CPU-only CI runs
the code GPUs and TPUs compile; a forced top-k strategy replaces the strategy table's
pick; ``interpret`` runs Pallas kernels in interpret mode. The choice is read while
tracing. The library's own jitted entry points take :func:`current` as a static
argument, so they trace again under a new choice instead of reusing a program traced
under another one (no cache is cleared); functions a caller jitted before the change
keep the program they traced, as with any trace-time setting.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Literal

import jax
from jax import lax

Branch = Literal["cpu", "cuda", "tpu", "default"]
BRANCHES: tuple[Branch, ...] = ("cpu", "cuda", "tpu", "default")
Implementation = Callable[[jax.Array], Any]


@dataclasses.dataclass(frozen=True)
class Choice:
  """What the library traces: a forced platform branch, a forced top-k strategy, Pallas interpret mode.

  ``cpu_kernel=False`` keeps the compiled CPU top-k kernel out of the CPU table's picks: the table a build
  without a C++ compiler runs.
  """

  branch: Branch | None = None
  top_k: str | None = None
  interpret: bool = False
  cpu_kernel: bool = True


_choice = Choice()


def current() -> Choice:
  """The choice in force (pass it as a static argument of a jitted entry point)."""
  return _choice


@contextlib.contextmanager
def choosing(**changes: Any) -> Iterator[Choice]:
  """The current choice with ``changes`` (fields of :class:`Choice`) within the block."""
  global _choice
  previous = _choice
  _choice = dataclasses.replace(previous, **changes)
  if _choice.branch not in (None, *BRANCHES):
    _choice = previous
    raise ValueError(f"branch must be one of {BRANCHES} or None; got {changes['branch']!r}")
  try:
    yield _choice
  finally:
    _choice = previous


def force(which: Branch | None) -> None:
  """From now on every :func:`branch` traces ``which`` only (``None``: choose by platform)."""
  global _choice
  if which not in (None, *BRANCHES):
    raise ValueError(f"which must be one of {BRANCHES} or None; got {which!r}")
  _choice = dataclasses.replace(_choice, branch=which)


def forced(which: Branch | None) -> contextlib.AbstractContextManager[Choice]:
  """:func:`force` within the block, the previous choice after it."""
  return choosing(branch=which)


def branch(
  x: jax.Array,
  *,
  cpu: Implementation,
  default: Implementation,
  cuda: Implementation | None = None,
  tpu: Implementation | None = None,
) -> Any:
  """``cpu(x)`` on CPU, ``cuda(x)`` on CUDA GPUs, ``tpu(x)`` on TPUs, ``default(x)`` elsewhere.

  A missing ``cuda`` or ``tpu`` implementation is ``default``. Under a forced branch only that
  branch is traced.
  """
  implementations: dict[str, Implementation] = {"cpu": cpu, "default": default}
  if cuda is not None:
    implementations["cuda"] = cuda
  if tpu is not None:
    implementations["tpu"] = tpu
  if _choice.branch is not None:
    return implementations.get(_choice.branch, default)(x)
  return lax.platform_dependent(x, **implementations)
