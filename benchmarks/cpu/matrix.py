"""The speed matrix: every operator, REDUCE function, type, axis and size against the native JAX call it replaces.

Usage (from the repository root)::

    python -m benchmarks.cpu.matrix                   # the full matrix, about 20 minutes on 2 cores
    python -m benchmarks.cpu.matrix --short           # a few tiny rows, 2 rounds: seconds (the test suite runs it)
    python -m benchmarks.cpu.matrix --only reduce     # rows whose name matches a regular expression
    python -m benchmarks.cpu.matrix --only sampling --rounds 15
    python -m benchmarks.cpu.matrix --render benchmarks/results/matrix-cpu.json  # rewrite its .md and the docs' section

The rows (:mod:`benchmarks.cpu.matrix_rows`) are benchmark workloads, each timed by
:func:`benchmarks.harness.measure.run_workload` (the benchmark's one way of timing: compiled ahead, warmed up,
contenders interleaved in a new order every round, samples of at least ``--min-sample`` seconds): dmljax against one
native JAX form, forward and, where the output is differentiable, the value and input gradient (grad). Each row reports
the median of same-round ratios (with its interquartile range), both programs' compiled temporary bytes, and (forward)
the trace + compile time of both (:mod:`benchmarks.harness.timing`). A/A rows time a native call against a copy of
itself: their spread is the noise of the machine. Two whole programs (:mod:`benchmarks.cpu.matrix_models`) add
model-level trace + compile figures.

Caches are not flushed between samples unless ``--evict`` (4 MiB inputs, like one layer's activations, sit in the
caches of a running model; flushing 128 MiB before each of the matrix's samples would double its time).

Writes ``benchmarks/results/matrix-<device>.{md,json}`` (``-short`` for ``--short``; ``-partial`` for ``--only``;
``--label`` names another suffix), with the machine, the ``uptime`` load, versions, commit and the exact command:
the JSON is the summary (rows, compile and model figures), the per-workload records with every sample go to
``benchmarks/results/raw/`` (not committed), and the tables are written from the summary. A full run also rewrites
the speed-matrix section of ``docs/performance.rst`` (``--no-docs``: not; ``--docs PATH``: another page), and
``--render`` rewrites both from a summary without running anything. A run that starts with a 1-minute load of 1.5
or more is labelled "under load: decides nothing".
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import ml_dtypes
import numpy as np

from benchmarks import RESULTS, ROOT
from benchmarks.cpu import matrix_models, matrix_report, targets
from benchmarks.cpu.matrix_rows import Row, all_rows
from benchmarks.cpu.report import device_name, environment
from benchmarks.harness import results, timing
from benchmarks.harness.measure import run_workload
from benchmarks.harness.timing import Progress

SCHEMA = "dmljax-speed-matrix/1"
DOCS = ROOT / "docs" / "performance.rst"
LARGE_TARGET, SMALL_TARGET, MODEL_TARGET = 1.10, 1.05, 1.2
QUIET_LOAD = 1.5


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
  parser.add_argument("--short", action="store_true", help="a few tiny rows, 2 rounds: a smoke run of seconds")
  parser.add_argument("--only", default=None, help="regular expression on row names (e.g. 'reduce', 'sampling')")
  parser.add_argument("--rounds", type=int, default=None, help="interleaved timed rounds per row (default 11)")
  parser.add_argument("--compile-rounds", type=int, default=None, help="trace+compile rounds per program (default 3)")
  parser.add_argument("--model-rounds", type=int, default=None, help="trace+compile rounds per whole program (2)")
  parser.add_argument("--min-sample", type=float, default=None, help="seconds a timed sample lasts at least")
  parser.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (as benchmarks.cpu.run)")
  parser.add_argument("--pool", type=int, default=3, help="distinct seeded input sets cycled through")
  parser.add_argument("--evict", action="store_true", help="flush the CPU caches before each sample")
  parser.add_argument("--out", type=Path, default=None, help="output folder (default benchmarks/results)")
  parser.add_argument("--label", default=None, help="suffix of the result files: matrix-<device>-<label>.*")
  parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/performance.rst")
  parser.add_argument("--docs", type=Path, default=DOCS, help="the page whose speed-matrix section is rewritten")
  parser.add_argument(
    "--render", type=Path, default=None, help="run nothing: rewrite this JSON's .md and the docs' section from it"
  )
  parser.add_argument(
    "--cpus",
    default=None,
    help="CPUs to pin the process to, e.g. '0,1' (default: every CPU it may use when it starts, pinned: the "
    "scheduler cannot move it onto others mid-run)",
  )
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--quiet", action="store_true")
  args = parser.parse_args(argv)
  args.rounds = args.rounds if args.rounds is not None else (2 if args.short else 11)
  args.compile_rounds = args.compile_rounds if args.compile_rounds is not None else (1 if args.short else 3)
  args.model_rounds = args.model_rounds if args.model_rounds is not None else (1 if args.short else 2)
  args.min_sample = args.min_sample if args.min_sample is not None else (0.0 if args.short else 0.02)
  if args.rounds < 1:
    parser.error("--rounds must be at least 1")
  try:
    args.cpus = sorted({int(c) for c in args.cpus.split(",")}) if args.cpus else None
  except ValueError:
    parser.error(f"--cpus takes CPU numbers separated by commas, e.g. 0,1; got {args.cpus!r}")
  # What benchmarks.harness.measure reads: the dmljax and native JAX contenders only.
  args.repeats, args.no_eager, args.no_torch, args.no_onnx = args.rounds, True, True, True
  return args


def _git(*command: str) -> str:
  try:
    return subprocess.run(["git", *command], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return ""


def _commit() -> str:
  head = _git("rev-parse", "--short=12", "HEAD") or "unknown"
  dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!benchmarks/results", ":!docs")
  return head + (" (with uncommitted changes)" if dirty else "")


def _uptime() -> str:
  try:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "load average: " + ", ".join(f"{v:.2f}" for v in os.getloadavg())


def _input_bytes(w: dict[str, Any]) -> int:
  shape, dtype = w["shapes"][0], w["dtypes"][0]
  return int(np.prod(shape, dtype=np.int64)) * np.dtype(getattr(ml_dtypes, dtype, dtype)).itemsize


def phase_rows(row: Row, w: dict[str, Any]) -> list[dict[str, Any]]:
  """The matrix rows of one timed workload: forward, and grad where it has one."""
  out = []
  native = row.native
  target = LARGE_TARGET if row.size == "large" else SMALL_TARGET
  size = _input_bytes(w)
  for phase, key, temps in (("forward", "forward", "temp_bytes"), ("grad", "fwd_bwd", "fwd_bwd_temp_bytes")):
    if phase == "grad" and not w["has_gradient"]:
      continue
    timed = w[key]
    compile_times = w.get("trace_compile" if phase == "forward" else "trace_compile_fwd_bwd", {})
    compile_mine = compile_times.get("dmljax", {}).get("median_s")
    compile_native = compile_times.get(native, {}).get("median_s")
    ratio = w["ratios"].get(key, {}).get("jax")
    mine_temp = w["contenders"].get("dmljax", {}).get(temps)
    native_temp = w["contenders"].get(native, {}).get(temps)
    full_size = mine_temp is not None and native_temp is not None and mine_temp >= size // 2 and native_temp < size // 2
    other = "(fwd_bwd)" if phase == "forward" else "(forward)"
    errors = {k: v for k, v in w["errors"].items() if not k.endswith(other)}
    out.append(
      {
        "name": row.name,
        "operator": row.operator,
        "function": row.function,
        "dtype": row.dtype,
        "axis": row.axis,
        "size": row.size,
        "x64": row.x64,
        "shapes": w["shapes"],
        "input_bytes": size,
        "phase": phase,
        "native_form": native,
        "dmljax_s": timed.get("dmljax", {}).get("median_s"),
        "native_s": timed.get(native, {}).get("median_s"),
        "ratio": None if ratio is None else ratio["ratio"],
        "paired_ratio": None if ratio is None else ratio["paired_ratio"],
        "paired_q1": None if ratio is None else ratio["paired_q1"],
        "paired_q3": None if ratio is None else ratio["paired_q3"],
        "dmljax_temp_bytes": mine_temp,
        "native_temp_bytes": native_temp,
        "full_size_temps": full_size,
        "compile_dmljax_s": compile_mine,
        "compile_native_s": compile_native,
        "compile_ratio": None if compile_mine is None or not compile_native else compile_mine / compile_native,
        "target": target,
        "errors": errors,
      }
    )
  return out


def compile_row(row: Row, w: dict[str, Any]) -> dict[str, Any]:
  times = w.get("trace_compile", {})
  mine, native = times.get("dmljax", {}).get("median_s"), times.get(row.native, {}).get("median_s")
  return {
    "name": row.name,
    "operator": row.operator,
    "dmljax_s": mine,
    "native_s": native,
    "ratio": None if mine is None or not native else mine / native,
  }


def measure_models(args: argparse.Namespace, progress: Progress) -> list[dict[str, Any]]:
  out = []
  for name, (fns, shapes) in matrix_models.models(args.short).items():
    progress.show(f"{name}: trace + compile")
    times = timing.compile_times(fns, shapes, args.model_rounds)
    mine, native = times["dmljax"]["median_s"], times["native"]["median_s"]
    out.append({"name": name, "dmljax_s": mine, "native_s": native, "ratio": mine / native, "samples": times})
    progress.show(f"{name}: done", step=True)
  return out


def _stem(args: argparse.Namespace) -> str:
  stem = f"matrix-{device_name()}"
  if args.short:
    stem += "-short"
  if args.label:
    stem += f"-{args.label}"
  elif args.only:
    stem += "-partial"
  return stem


def pin(cpus: Sequence[int] | None) -> list[int]:
  """Pins this process (XLA's threads with it) to ``cpus``, by default every CPU it may use now; returns them.

  A fixed set: every sample runs on the same CPUs (where the OS offers no affinity, nothing is pinned).
  """
  if not hasattr(os, "sched_setaffinity"):
    return []
  chosen = set(cpus) if cpus else os.sched_getaffinity(0)
  os.sched_setaffinity(0, chosen)
  return sorted(os.sched_getaffinity(0))


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
  cpus = pin(args.cpus)
  clock = timing.Stopwatch()
  uptime_start = _uptime()
  load_start = os.getloadavg()[0]
  commit = _commit()  # the code that measures: taken before the run, which may outlast edits of the tree
  rows = [r for r in all_rows(args.short) if args.only is None or r.operator == "A/A" or re.search(args.only, r.name)]
  with_models = args.only is None or re.search(args.only, "model") is not None
  progress = Progress(len(rows) + (2 if with_models else 0), args.quiet)
  records, matrix, compiled = [], [], []
  for n, row in enumerate(rows):
    with jax.enable_x64(True) if row.x64 else contextlib.nullcontext():
      w = run_workload(row.workload, args, progress, seed=args.seed + n)
    records.append(w)
    matrix += phase_rows(row, w)
    if args.compile_rounds:
      compiled.append(compile_row(row, w))
    progress.show(f"{row.name}: done", step=True)
  models = measure_models(args, progress) if with_models else []
  progress.finish()
  env = environment(peers=False)
  env.pop("thread_settings", None)
  report: dict[str, Any] = {
    "schema": SCHEMA,
    "device": device_name(),
    "conditions": {
      "command": "python -m benchmarks.cpu.matrix" + ("" if not argv else " " + shlex.join(argv)),
      "commit": commit,
      "timestamp": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
      "uptime_start": uptime_start,
      "uptime_end": _uptime(),
      "load_start": load_start,
      "under_load": load_start >= QUIET_LOAD,
      "wall_s": clock.seconds(),
      "environment": env,
    },
    "settings": {
      "short": args.short,
      "only": args.only,
      "rounds": args.rounds,
      "compile_rounds": args.compile_rounds,
      "model_rounds": args.model_rounds,
      "min_sample_s": args.min_sample,
      "cpus": cpus,
      "warmup": args.warmup,
      "pool": args.pool,
      "evict": args.evict,
      "seed": args.seed,
      "large_target": LARGE_TARGET,
      "small_target": SMALL_TARGET,
      "compile_target": targets.COMPILE_TARGET,
      "model_target": MODEL_TARGET,
    },
    "rows": matrix,
    "compile": compiled,
    "models": models,
    "workloads": records,
  }
  report["summary"] = matrix_report.summary(report)
  return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parse_args(argv)
  if args.render is not None:
    return render(args.render, None if args.no_docs else args.docs)
  report = run(args, argv)
  out = args.out or RESULTS
  stem = _stem(args)
  # The summary (rows, compile and model figures: no per-sample workload records) is what the tables come from.
  results.write(report, out, stem, omit=("workloads",))
  full = not (args.short or args.only or args.label or args.no_docs)
  summary = render(out / f"{stem}.json", args.docs if full and args.out is None else None)
  if not args.quiet:
    print(matrix_report.markdown(summary))
  return summary


def render(path: Path, docs: Path | None) -> dict[str, Any]:
  """Rewrites the Markdown beside the summary at ``path`` (and the section of ``docs``) from the summary alone."""
  report = results.load(path)
  report["settings"].setdefault("model_target", MODEL_TARGET)  # older JSON files did not record it
  report["summary"] = matrix_report.summary(report)
  path.with_suffix(".md").write_text(matrix_report.markdown(report))
  if docs is not None:
    matrix_report.rewrite_docs(report, docs, _relative(path))
  return report


def _relative(path: Path) -> str:
  try:
    return str(path.resolve().relative_to(ROOT))
  except ValueError:
    return str(path)


if __name__ == "__main__":
  main()
