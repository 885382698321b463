"""Times every workload of ``benchmarks/cpu/workloads.py`` for dmljax, native JAX, PyTorch and ONNX Runtime.

Usage (from the repository root)::

    python -m benchmarks.cpu.run            # full sizes: benchmarks/results/<device>.{json,md,png} (and raw/)
    python -m benchmarks.cpu.run --quick    # tiny sizes, a smoke run (well under a minute)
    python -m benchmarks.cpu.run --only top_k --repeats 20

Method: every contender is compiled (trace+compile time recorded for the JAX ones), warmed up, then
timed ``--repeats`` times (at least 10) with the contenders of a workload interleaved (in a new
seeded random order every round, the CPU caches flushed before each sample), each call
synchronised (``block_until_ready``, CUDA synchronisation), cycling through a pool of distinct
seeded random inputs (never zeros). Short calls are repeated within one sample so that a sample
lasts at least ``--min-sample`` seconds. Reported: median, quartiles, min and max per contender;
ratios of medians, and the median of same-round (paired) ratios. dmljax and native JAX both run
under an outer ``jax.jit`` (compiled work against compiled work); ``dmljax (eager)`` adds the
per-call validation and dispatch of calling the library outside ``jit``. PyTorch and ONNX Runtime
run at their defaults (thread pools, spinning), as their users run them; the report records the
settings in force.

PyTorch, ONNX Runtime and matplotlib are optional (``pip install -e ".[peers]"``); what is not installed
is skipped. On a GPU machine the same command runs unchanged: JAX uses its default device, PyTorch
CUDA when JAX is on a GPU and CUDA is available, ONNX Runtime its CUDA provider where installed.

The code, by concern: :mod:`benchmarks.cpu.workloads` (what is timed), :mod:`benchmarks.harness` (how: ``timing``,
``measure`` for one workload, ``adapters_jax``, ``bandwidth`` for the copy baseline), :mod:`benchmarks.peers` (the
PyTorch and ONNX Runtime contenders), ``targets`` (scoring), ``report`` (environment and Markdown), ``chart``, and
this entry point.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import RESULTS
from benchmarks.cpu.chart import chart
from benchmarks.cpu.report import device_name, environment, markdown
from benchmarks.cpu.targets import summarize
from benchmarks.cpu.workloads import all_workloads
from benchmarks.harness import results
from benchmarks.harness.bandwidth import copy_bandwidth
from benchmarks.harness.measure import run_workload
from benchmarks.harness.timing import Progress

SCHEMA_VERSION = 3  # 3: a summary beside its raw samples (benchmarks/harness/results.py)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
  parser.add_argument("--quick", action="store_true", help="tiny sizes and few runs: a CI smoke run")
  parser.add_argument("--only", default=None, help="regular expression on workload names")
  parser.add_argument("--repeats", type=int, default=None, help="timed runs per contender (>= 10; default 21)")
  parser.add_argument("--warmup", type=int, default=None, help="untimed calls before timing (default 3)")
  parser.add_argument("--pool", type=int, default=3, help="distinct random input sets cycled through")
  parser.add_argument("--min-sample", type=float, default=None, help="seconds one timed sample lasts at least")
  parser.add_argument("--out", type=Path, default=None, help="output folder (default benchmarks/results)")
  parser.add_argument("--no-torch", action="store_true")
  parser.add_argument("--no-onnx", action="store_true")
  parser.add_argument("--no-eager", action="store_true", help="skip the eager (un-jitted) dmljax contender")
  parser.add_argument("--no-chart", action="store_true")
  parser.add_argument(
    "--compile-rounds",
    type=int,
    default=None,
    help="trace+compile samples per contender, each as for a new static parameter (default 5; 0: none)",
  )
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--label", default=None, help="suffix of the result files' names: <device>-<label>.json …")
  parser.add_argument("--quiet", action="store_true")
  parser.add_argument(
    "--render", type=Path, default=None, help="run nothing: redraw this summary's chart and rewrite its .md from it"
  )
  args = parser.parse_args(argv)
  args.repeats = args.repeats or (10 if args.quick else 21)
  args.warmup = args.warmup or (2 if args.quick else 3)
  args.compile_rounds = args.compile_rounds if args.compile_rounds is not None else (2 if args.quick else 5)
  args.min_sample = args.min_sample if args.min_sample is not None else (0.0 if args.quick else 0.02)
  if args.repeats < 10:
    parser.error("--repeats must be at least 10")
  return args


def _settings(args: argparse.Namespace) -> dict[str, Any]:
  return {
    "quick": args.quick,
    "repeats": args.repeats,
    "compile_rounds": args.compile_rounds,
    "warmup": args.warmup,
    "pool": args.pool,
    "min_sample_s": args.min_sample,
    "seed": args.seed,
    "only": args.only,
    "label": args.label,
  }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  args = parse_args(argv)
  if args.render is not None:
    return render(args.render, chart_too=not args.no_chart)
  workloads = [w for w in all_workloads(args.quick) if args.only is None or re.search(args.only, w.name)]
  progress = Progress(len(workloads) + 1, args.quiet)
  copy_shape = (256, 512) if args.quick else (4096, 4096)
  records = []
  copy = None
  for n, w in enumerate(workloads):
    if copy is None and w.reduction_bytes:
      copy = copy_bandwidth(args, progress, copy_shape)
    records.append(run_workload(w, args, progress, seed=args.seed + n))
    progress.show(f"{w.name}: done", step=True)
  if copy is None:
    copy = copy_bandwidth(args, progress, copy_shape)
  progress.show("copy bandwidth: done", step=True)
  progress.finish()
  report = {
    "schema_version": SCHEMA_VERSION,
    "device_name": device_name(),
    "timestamp": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "environment": environment(),
    "settings": _settings(args),
    "copy_bandwidth": copy,
    "workloads": records,
  }
  report["summary"] = summarize(records, copy)
  out = args.out or RESULTS
  stem = report["device_name"] + ("-quick" if args.quick else "") + (f"-{args.label}" if args.label else "")
  results.write(report, out, stem)  # the summary, and the samples under out/raw
  summary = render(out / f"{stem}.json", chart_too=not args.no_chart)
  if not args.quiet:
    print(markdown(summary))
  return summary


def render(path: Path, *, chart_too: bool = True) -> dict[str, Any]:
  """The chart (``.png``) and the Markdown (``.md``) beside the summary at ``path``, drawn from the summary alone.

  A summary of an older schema keeps its Markdown (written by the writer of its day, whose columns the current one
  no longer has): only its chart is drawn.
  """
  summary = results.load(path)
  if chart_too:
    try:
      chart(summary, path.with_suffix(".png"))
    except ImportError:
      summary["chart_error"] = "matplotlib is not installed: no chart"
      print(summary["chart_error"], file=sys.stderr)
  if summary.get("schema_version") == SCHEMA_VERSION:
    path.with_suffix(".md").write_text(markdown(summary))
  else:
    print(
      f"{path}: schema {summary.get('schema_version')}, not {SCHEMA_VERSION}: its Markdown is kept", file=sys.stderr
    )
  return summary


if __name__ == "__main__":
  main()
