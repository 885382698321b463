"""The one timing module: every speed and compile-time figure of the benchmarks is taken here.

Run time (:func:`time_interleaved`): every contender of a workload is timed ``repeats`` times, the contenders
interleaved in a new seeded random order every round, each sample cycling through a pool of distinct inputs. Short
calls are repeated within one sample so that a sample lasts at least ``min_sample`` seconds. :func:`medians` is the
same method for callers that time whole calls rather than a workload's pool of inputs (:func:`round_samples`, the
scripts for machines with an accelerator, the ONNX overhead study, sampling); :func:`timed` and :class:`Stopwatch`
take the figures measured once (a compile, a whole run). No other module of the benchmarks reads a clock for a
figure (``tests/test_benchmark_structure.py`` checks it).

Trace + compile time (:func:`compile_times`; :func:`traced_and_compiled` where the compiled program is run after):
one method, *warm*, gives every compile figure of the benchmarks: what a new shape or static parameter costs.
Every sample is what a new static parameter (a new ``k``, say) costs on the same shapes in
a warm process, on both sides: the function is wrapped afresh (so ``jax.jit`` traces it again and XLA compiles a new
program) and dmljax's own jitted entry points forget what they traced, while JAX's caches of its own helpers stay
warm, as they are in a program that has run before. (``jax.clear_caches()`` would make every sample a cold start of
the process, which costs both sides several times more and is not what a serving loop or test suite pays.) Each
sample is ``jax.jit(fn).trace(*inputs).lower().compile()`` on the workload's shapes; the contenders alternate
within a round and the median of the rounds is reported.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import jax
import numpy as np

Runner = tuple[str, Callable[[int], None]]
T = TypeVar("T")


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
  such as one decoding step's logits; :mod:`benchmarks.cpu.matrix` chooses it per run).
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


def timed(fn: Callable[[], T]) -> tuple[T, float]:
  """``fn()`` and the seconds it took (a compile, a whole step: figures taken once, not sampled)."""
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


class Stopwatch:
  """Seconds since it was made: how long a run or a step took, for its log and its report."""

  def __init__(self) -> None:
    self.start = time.perf_counter()

  def seconds(self) -> float:
    return time.perf_counter() - self.start


def round_samples(
  calls: dict[str, Callable[[], Any]],
  *,
  rounds: int,
  inner: int | None = None,
  min_sample: float = 0.0,
  warmup: int = 1,
  wait: Callable[[Any], Any] = jax.block_until_ready,
  waits: dict[str, Callable[[Any], Any]] | None = None,
) -> dict[str, list[float]]:
  """Seconds per call of each contender in each of ``rounds`` rounds, the contenders in turn within a round.

  Each sample runs a contender ``inner`` times (or as often as makes ``min_sample`` seconds, at most 200, from the
  fastest of ``warmup`` untimed calls) and waits for the last result with ``wait`` (``jax.block_until_ready``; pass one
  that synchronises a peer's device; ``waits`` names one per contender). Same-round samples of two contenders ran back
  to back: their ratio cancels slow drifts of the machine's load.
  """
  wait_for = {name: (waits or {}).get(name, wait) for name in calls}
  counts: dict[str, int] = {}
  for name, call in calls.items():
    single = math.inf
    for _ in range(warmup):
      start = time.perf_counter()
      wait_for[name](call())
      single = min(single, time.perf_counter() - start)
    if inner is None:
      assert warmup > 0, "a sample sized by min_sample needs a warm-up call to time"
      counts[name] = max(1, min(200, math.ceil(min_sample / max(single, 1e-7))))
    else:
      counts[name] = inner
  samples: dict[str, list[float]] = {name: [] for name in calls}
  for _ in range(rounds):
    for name, call in calls.items():
      n = counts[name]
      start = time.perf_counter()
      for _ in range(n):
        out = call()
      wait_for[name](out)
      samples[name].append((time.perf_counter() - start) / n)
  return samples


def medians(calls: dict[str, Callable[[], Any]], **options: Any) -> dict[str, float]:
  """The median of each contender's :func:`round_samples` (same options), in seconds per call."""
  return {name: statistics.median(s) for name, s in round_samples(calls, **options).items()}


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


def traced_and_compiled(fn: Callable[..., Any], inputs: Sequence[Any]) -> tuple[Any, tuple[float, float, float]]:
  """``jax.jit(fn)`` compiled for ``inputs``' shapes as for a new static parameter, with the seconds it took to trace,
  lower and compile (the one compile-time method: see the module's docstring)."""
  for jitted in _jitted_entry_points():
    jitted.clear_cache()
  start = time.perf_counter()
  traced = jax.jit(lambda *args: fn(*args)).trace(*inputs)
  traced_at = time.perf_counter()
  lowered = traced.lower()
  lowered_at = time.perf_counter()
  compiled = lowered.compile()
  return compiled, (traced_at - start, lowered_at - traced_at, time.perf_counter() - lowered_at)


def trace_and_compile_s(fn: Callable[..., Any], inputs: Sequence[Any]) -> tuple[float, float, float]:
  """Seconds to trace, lower and compile ``jax.jit(fn)`` for ``inputs``' shapes, as for a new static parameter."""
  return traced_and_compiled(fn, inputs)[1]


def compile_times(
  contenders: dict[str, Callable[..., Any]], inputs: Sequence[Any] | dict[str, Sequence[Any]], rounds: int
) -> dict[str, Any]:
  """``{name: {median_s, trace_s, lower_s, compile_s, samples_s}}``: medians over ``rounds`` interleaved rounds.

  ``inputs``: the inputs (arrays or ``jax.ShapeDtypeStruct``) every contender takes, or ``{name: inputs}`` where
  they take different ones (a recipe's arguments). ``samples_s[r]`` is round ``r``'s sample, for paired ratios.
  """
  samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in contenders}
  for r in range(rounds):
    order = list(contenders) if r % 2 == 0 else list(reversed(contenders))
    for name in order:
      args = inputs[name] if isinstance(inputs, dict) else inputs
      samples[name].append(trace_and_compile_s(contenders[name], args))
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
