"""How a contender is timed: warm-up, interleaved rounds, cache eviction, statistics.

Every contender of a workload is timed ``repeats`` times, the contenders interleaved in a new seeded
random order every round, each sample cycling through a pool of distinct inputs. Short calls are
repeated within one sample so that a sample lasts at least ``min_sample`` seconds.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

Runner = tuple[str, Callable[[int], None]]


@dataclasses.dataclass
class Contender:
  """One way to compute a workload; ``forward(i)``/``fwd_bwd(i)`` run on input set ``i`` and synchronise."""

  name: str
  family: str
  forward: Callable[[int], None]
  fwd_bwd: Callable[[int], None] | None = None
  compile_s: float | None = None
  fwd_bwd_compile_s: float | None = None
  program: str | None = None
  fwd_bwd_program: str | None = None
  approx_reason: str | None = None
  temp_bytes: int | None = None
  fwd_bwd_temp_bytes: int | None = None


class Progress:
  """One status line on a terminal, one line per step otherwise."""

  def __init__(self, total: int, quiet: bool) -> None:
    self.total, self.done, self.quiet = total, 0, quiet
    self.tty = sys.stderr.isatty()
    self.start = time.perf_counter()

  def show(self, text: str, *, step: bool = False) -> None:
    if step:
      self.done += 1
    if self.quiet:
      return
    elapsed = time.perf_counter() - self.start
    line = f"[{self.done:2d}/{self.total}] {elapsed:6.1f}s {text}"
    if self.tty:
      sys.stderr.write("\r\033[K" + line[:150])
    elif step:
      sys.stderr.write(line + "\n")
    sys.stderr.flush()

  def finish(self) -> None:
    if self.tty and not self.quiet:
      sys.stderr.write("\n")


def error_text(e: BaseException) -> str:
  """``Type: first line of the message`` (at most 200 characters), as the report shows it."""
  first = str(e).splitlines()[0][:200] if str(e) else ""
  return f"{type(e).__name__}: {first}"


def on_gpu() -> bool:
  return jax.devices()[0].platform not in ("cpu",)


_SCRATCH: dict[str, np.ndarray] = {}


def evict_caches() -> None:
  """Writes 128 MiB of host memory, so that no contender finds the previous one's data in the CPU caches.

  Contenders run on the same inputs; without this, whichever runs right after another one on the
  same array would read it partly from cache. Skipped in ``--quick`` runs (``min_sample`` 0), which
  smoke-test rather than measure.
  """
  if on_gpu():
    return
  scratch = _SCRATCH.setdefault("buffer", np.ones(1 << 25, np.float32))
  np.add(scratch, np.float32(1), out=scratch)


def stats(samples: list[float], inner: int) -> dict[str, Any]:
  q1, median, q3 = (float(v) for v in np.percentile(samples, [25, 50, 75]))
  return {
    "median_s": median,
    "q1_s": q1,
    "q3_s": q3,
    "min_s": float(min(samples)),
    "max_s": float(max(samples)),
    "runs": len(samples),
    "calls_per_run": inner,
    "samples_s": [float(v) for v in samples],
  }


def time_interleaved(
  runners: list[Runner],
  *,
  pool: int,
  warmup: int,
  repeats: int,
  min_sample: float,
  progress: Progress,
  label: str,
  evict: bool = True,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
  """Statistics of ``repeats`` interleaved samples per runner, and the error of each runner that failed.

  ``evict=False`` skips the cache eviction before each sample (for inputs a real program would find in cache,
  such as one decoding step's logits; :mod:`benchmarks.matrix` chooses it per run).
  """
  errors: dict[str, str] = {}
  alive: list[Runner] = []
  single: dict[str, float] = {}
  for name, run in runners:
    try:
      for w in range(warmup):
        start = time.perf_counter()
        run(w % pool)
        single[name] = min(single.get(name, math.inf), time.perf_counter() - start)
      alive.append((name, run))
    except Exception as e:  # reported in the results (and so in the report), not fatal to the run
      errors[name] = error_text(e)
  inner = {name: max(1, min(200, math.ceil(min_sample / max(single[name], 1e-9)))) for name, _ in alive}
  samples: dict[str, list[float]] = {name: [] for name, _ in alive}
  order = np.random.default_rng(len(alive))
  for r in range(repeats):
    progress.show(f"{label}: round {r + 1}/{repeats}")
    for position in order.permutation(len(alive)):
      name, run = alive[position]
      n = inner[name]
      if evict and min_sample > 0:
        evict_caches()
      start = time.perf_counter()
      for j in range(n):
        run((r * n + j) % pool)
      samples[name].append((time.perf_counter() - start) / n)
  return {name: stats(samples[name], inner[name]) for name, _ in alive}, errors
