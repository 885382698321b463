"""Trace + compile time of every benchmark workload, dmljax against native JAX, without timing the runs.

``python -m benchmarks.cpu.compile`` measures what :mod:`benchmarks.harness.timing` measures inside
``python -m benchmarks.cpu.run`` (target 5), in a minute or two instead of the full run: each workload's dmljax call
and the native form that target 1 compares with in the latest run-time report (``--against``; the first native
form where the report lacks the workload), as for a new static parameter, medians of interleaved rounds. It writes
``benchmarks/results/<device>-compile.md`` with the trace, lowering and XLA compile parts of each.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from benchmarks import RESULTS
from benchmarks.cpu import targets
from benchmarks.cpu.workloads import all_workloads
from benchmarks.harness import results, timing


def native_forms(report: Path) -> dict[str, str]:
  """``{workload: native form of target 1}`` from a run-time report, or ``{}`` without one."""
  if not report.is_file():
    return {}
  data = results.load(report)
  return {
    w["name"]: w["ratios"]["forward"]["jax"]["form"] for w in data["workloads"] if "jax" in w["ratios"]["forward"]
  }


def measure(only: str | None, rounds: int, against: Path, quick: bool = False) -> list[dict[str, Any]]:
  forms = native_forms(against)
  rows = []
  for w in all_workloads(quick):
    if only is not None and not re.search(only, w.name):
      continue
    form = forms.get(w.name, next(iter(w.jax)))
    inputs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in w.make(np.random.default_rng(0))]
    times = timing.compile_times({"dmljax": w.dmljax, form: w.jax[form]}, inputs, rounds)
    mine, native = times["dmljax"], times[form]
    rows.append({"workload": w.name, "form": form, "dmljax": mine, "native": native})
    print(f"{w.name}: {mine['median_s'] * 1e3:.1f} ms / {native['median_s'] * 1e3:.1f} ms", flush=True)
  return rows


def markdown(rows: Sequence[dict[str, Any]], rounds: int, note: str = "") -> str:
  def ms(s: float) -> str:
    return f"{s * 1e3:.1f}"

  held = sum(r["dmljax"]["median_s"] <= targets.COMPILE_TARGET * r["native"]["median_s"] for r in rows)
  lines = [
    f"# Trace + compile time: {jax.devices()[0].device_kind}, jax {jax.__version__}",
    "",
    f"Medians of {rounds} interleaved rounds, each sample as for a new static parameter "
    "(`benchmarks/harness/timing.py`), milliseconds; "
    "trace / lower / compile are `jax.jit(f).trace(...)`, `.lower()` and `.compile()`. Native: the form target 1 "
    "compares with." + (f" {note}" if note else ""),
    "",
    f"Target 5, dmljax within {targets.COMPILE_TARGET:g}× of native: {held}/{len(rows)}.",
    "",
    "| workload | dmljax | trace / lower / compile | native (form) | trace / lower / compile | ratio |",
    "|---|--:|--:|--:|--:|--:|",
  ]
  for r in rows:
    d, n = r["dmljax"], r["native"]
    lines.append(
      f"| {r['workload']} | {ms(d['median_s'])} | {ms(d['trace_s'])} / {ms(d['lower_s'])} / {ms(d['compile_s'])} "
      f"| {ms(n['median_s'])} ({r['form']}) | {ms(n['trace_s'])} / {ms(n['lower_s'])} / {ms(n['compile_s'])} "
      f"| {d['median_s'] / n['median_s']:.1f} |"
    )
  return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--only", default=None, help="regular expression on workload names")
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--against", type=Path, default=RESULTS / "cpu.json", help="run-time report naming the forms")
  parser.add_argument("--out", type=Path, default=None, help="markdown file (default results/<device>-compile.md)")
  parser.add_argument("--quick", action="store_true", help="the benchmark's tiny sizes")
  parser.add_argument("--note", default="", help="conditions of the run, printed under the title")
  args = parser.parse_args(argv)
  rows = measure(args.only, args.rounds, args.against, args.quick)
  out = args.out or RESULTS / f"{jax.default_backend()}-compile.md"
  out.write_text(markdown(rows, args.rounds, args.note))
  print(f"wrote {out}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
