"""Trace + compile time of dmljax and the native JAX forms: what a new shape or static parameter costs.

Every sample is what a new static parameter (a new ``k``, say) costs on the same shapes in a warm process, on
both sides: the function is wrapped afresh (so ``jax.jit`` traces it again and XLA compiles a new program) and
dmljax's own jitted entry points forget what they traced, while JAX's caches of its own helpers stay warm, as
they are in a program that has run before. (``jax.clear_caches()`` would make every sample a cold start of the
process, which costs both sides several times more and is not what a serving loop or test suite pays.) Each
sample is ``jax.jit(fn).trace(*inputs).lower().compile()`` on the workload's shapes; the contenders alternate
within a round and the median of the rounds is reported. Target 5 compares dmljax's median with the native form
that target 1 compares with (the fastest at run time).
"""

from __future__ import annotations

import importlib
import pkgutil
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

TARGET = 2.0


def _jitted_entry_points() -> list[Any]:
  """Every function of dmljax's modules wrapped by ``jax.jit`` (its trace cache is what a new parameter misses)."""
  import dmljax._src as source

  found = []
  for info in pkgutil.walk_packages(source.__path__, f"{source.__name__}."):
    try:
      module = importlib.import_module(info.name)
    except ImportError:  # pragma: no cover - a module needing an optional package
      continue
    found += [f for f in vars(module).values() if callable(getattr(f, "clear_cache", None)) and hasattr(f, "lower")]
  return found


def trace_and_compile_s(fn: Callable[..., Any], inputs: Sequence[Any]) -> tuple[float, float, float]:
  """Seconds to trace, lower and compile ``jax.jit(fn)`` for ``inputs``' shapes, as for a new static parameter."""
  for jitted in _jitted_entry_points():
    jitted.clear_cache()
  start = time.perf_counter()
  traced = jax.jit(lambda *args: fn(*args)).trace(*inputs)
  traced_at = time.perf_counter()
  lowered = traced.lower()
  lowered_at = time.perf_counter()
  lowered.compile()
  return traced_at - start, lowered_at - traced_at, time.perf_counter() - lowered_at


def measure(contenders: dict[str, Callable[..., Any]], inputs: Sequence[Any], rounds: int) -> dict[str, Any]:
  """``{name: {median_s, trace_s, lower_s, compile_s, samples_s}}``: medians over ``rounds`` interleaved rounds."""
  samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in contenders}
  for r in range(rounds):
    order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
    for name in order:
      samples[name].append(trace_and_compile_s(contenders[name], inputs))
  return {
    name: {
      "median_s": statistics.median(sum(s) for s in parts),
      "trace_s": statistics.median(s[0] for s in parts),
      "lower_s": statistics.median(s[1] for s in parts),
      "compile_s": statistics.median(s[2] for s in parts),
      "samples_s": [sum(s) for s in parts],
    }
    for name, parts in samples.items()
  }
