"""The compiled CPU top-k kernel side by side with dmljax's XLA selection, native JAX, PyTorch and ONNX Runtime.

Usage (from the repository root, on a machine where the package's build compiled the kernel)::

    python -m benchmarks.cpu.kernel                  # every top_k workload, on 1 core and on every core
    python -m benchmarks.cpu.kernel --quick          # tiny sizes, a smoke run
    python -m benchmarks.cpu.kernel --cores 1,2,4 --only MoE --repeats 30

For each core count ``c`` the script runs itself again under ``taskset -c 0-(c-1)`` (a process of its own:
XLA, PyTorch and ONNX Runtime size their thread pools when they start) and times every top_k workload of
the benchmark (``benchmarks/cpu/workloads.py`` and ``workloads_small.py``: large inputs, decoding, MoE routing,
kNN, per-row code under ``vmap``) with the method of ``benchmarks.cpu.run``: contenders interleaved, medians of
``--repeats`` samples. Contenders: ``dmljax`` (the CPU table's pick: the kernel), ``dmljax (XLA)`` (the same
call with the kernel left out, what a build without a C++ compiler runs), the native JAX forms, PyTorch and
ONNX Runtime at their defaults. Trace + compile time of both dmljax forms is the median of three compiles of
a fresh trace. Writes ``benchmarks/results/cpu-kernel.{json,md}`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import RESULTS

_GROUPS = ("top_k", "decode", "moe", "vmap")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
  parser.add_argument("--quick", action="store_true", help="tiny sizes and few runs: a smoke run")
  parser.add_argument("--only", default=None, help="regular expression on workload names")
  parser.add_argument("--repeats", type=int, default=None, help="timed runs per contender (default 21, quick 10)")
  parser.add_argument("--cores", default=None, help="comma-separated core counts (default: 1 and every core)")
  parser.add_argument("--out", type=Path, default=RESULTS)
  parser.add_argument("--no-torch", action="store_true")
  parser.add_argument("--no-onnx", action="store_true")
  parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  args.repeats = args.repeats or (10 if args.quick else 21)
  return args


def _selected(quick: bool, only: str | None) -> list[Any]:
  from benchmarks.cpu.workloads import all_workloads

  chosen = []
  for w in all_workloads(quick):
    top_k = w.group in _GROUPS and "gather" not in w.name
    if top_k and (only is None or re.search(only, w.name)):
      chosen.append(w)
  return chosen


def _compile_s(fn: Any, example: tuple[Any, ...], *, kernel: bool) -> float:
  """Median seconds of three traces and compiles of ``fn`` (the benchmarks' one compile-time method)."""
  from benchmarks.harness import timing
  from dmljax._src import platform

  with platform.choosing(cpu_kernel=kernel):
    return float(timing.compile_times({"fn": fn}, example, 3)["fn"]["median_s"])


def _worker(args: argparse.Namespace) -> None:
  """One core count: every workload's contenders timed in this process, the results written to ``--worker``."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from benchmarks.harness.measure import build_contenders
  from benchmarks.harness.timing import Contender, Progress, time_interleaved
  from dmljax._src import cpu_kernel_library, platform

  settings = argparse.Namespace(pool=3, no_eager=True, no_torch=args.no_torch, no_onnx=args.no_onnx)
  progress = Progress(1, quiet=True)
  records = []
  for n, w in enumerate(_selected(args.quick, args.only)):
    contenders, errors, _, np_inputs = build_contenders(w, settings, progress, np.random.default_rng(n))
    inputs = [tuple(jnp.asarray(a) for a in xs) for xs in np_inputs]
    with platform.choosing(cpu_kernel=False):
      xla = jax.jit(w.dmljax).lower(*inputs[0]).compile()

    def forward(i: int, xla: Any = xla, inputs: Any = inputs) -> None:
      jax.block_until_ready(xla(*inputs[i]))

    contenders.append(Contender("dmljax (XLA)", "dmljax-xla", forward))
    runners = [(c.name, c.forward) for c in contenders]
    timings, run_errors = time_interleaved(
      runners,
      pool=len(inputs),
      warmup=2 if args.quick else 3,
      repeats=args.repeats,
      min_sample=0.0 if args.quick else 0.02,
      progress=progress,
      label=w.name,
    )
    records.append(
      {
        "workload": w.name,
        "input_bytes": int(sum(a.nbytes for a in np_inputs[0])),
        "median_ms": {name: t["median_s"] * 1e3 for name, t in timings.items()},
        "families": {c.name: c.family for c in contenders},
        "compile_s": {
          "dmljax": _compile_s(w.dmljax, inputs[0], kernel=True),
          "dmljax (XLA)": _compile_s(w.dmljax, inputs[0], kernel=False),
        },
        "errors": {**errors, **run_errors},
      }
    )
  report = {
    "cores": len(os.sched_getaffinity(0)),
    "kernel": cpu_kernel_library.status(),
    "workloads": records,
  }
  args.worker.write_text(json.dumps(report, indent=1))


def _fastest(record: dict[str, Any], family: str) -> tuple[str | None, float | None]:
  times = {n: t for n, t in record["median_ms"].items() if record["families"].get(n) == family}
  if not times:
    return None, None
  name = min(times, key=times.__getitem__)
  return name, times[name]


def _cell(value: float | None) -> str:
  return "–" if value is None else f"{value:.3g}"


def markdown(runs: dict[int, dict[str, Any]]) -> str:
  counts = sorted(runs)
  lines = ["# dmljax's compiled CPU top-k kernel", ""]
  lines.append(next(iter(runs.values()))["kernel"] + ". Medians in ms; every framework at its defaults.")
  lines.append("")
  for cores in counts:
    lines += [f"## {cores} core{'s' if cores > 1 else ''} (taskset)", ""]
    lines.append(
      "| workload | MB | dmljax (kernel) | dmljax (XLA) | JAX | PyTorch | ONNX Runtime | kernel/JAX | kernel/best peer "
      "| compile kernel / XLA (s) |"
    )
    lines.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for record in runs[cores]["workloads"]:
      times = record["median_ms"]
      kernel, xla = times.get("dmljax"), times.get("dmljax (XLA)")
      _, native = min((_fastest(record, f) for f in ("jax", "jax-approx")), key=lambda p: p[1] or float("inf"))
      _, torch = _fastest(record, "torch")
      _, ort = _fastest(record, "onnxruntime")
      peers = [t for t in (torch, ort) if t is not None]
      compile_s = record["compile_s"]
      lines.append(
        f"| {record['workload']} | {record['input_bytes'] / 1e6:.2g} | {_cell(kernel)} | {_cell(xla)} | "
        f"{_cell(native)} | {_cell(torch)} | {_cell(ort)} | "
        f"{_cell(kernel / native if kernel and native else None)} | "
        f"{_cell(kernel / min(peers) if kernel and peers else None)} | "
        f"{compile_s['dmljax']:.3f} / {compile_s['dmljax (XLA)']:.3f} |"
      )
    lines.append("")
  if len(counts) > 1:
    low, high = counts[0], counts[-1]
    lines += [f"## Scaling: {low} core(s) / {high} cores (kernel)", "", "| workload | speed-up |", "|---|--:|"]
    by_name = {r["workload"]: r for r in runs[high]["workloads"]}
    for record in runs[low]["workloads"]:
      other = by_name.get(record["workload"])
      one, many = record["median_ms"].get("dmljax"), other and other["median_ms"].get("dmljax")
      lines.append(f"| {record['workload']} | {_cell(one / many if one and many else None)} |")
    lines.append("")
  return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[int, dict[str, Any]]:
  args = parse_args(argv)
  if args.worker is not None:
    _worker(args)
    return {}
  available = sorted(os.sched_getaffinity(0))
  counts = [int(c) for c in args.cores.split(",")] if args.cores else sorted({1, len(available)})
  runs: dict[int, dict[str, Any]] = {}
  with tempfile.TemporaryDirectory() as folder:
    for cores in counts:
      out = Path(folder) / f"{cores}.json"
      cpus = ",".join(str(c) for c in available[:cores])
      command = ["taskset", "-c", cpus, sys.executable, "-m", "benchmarks.cpu.kernel", "--worker", str(out)]
      command += ["--repeats", str(args.repeats), *(["--quick"] if args.quick else [])]
      command += [*(["--only", args.only] if args.only else []), *(["--no-torch"] if args.no_torch else [])]
      command += ["--no-onnx"] if args.no_onnx else []
      print(f"{cores} core(s): {' '.join(command)}", file=sys.stderr)
      subprocess.run(command, check=True)
      runs[cores] = json.loads(out.read_text())
  from benchmarks.harness import results

  stem = "cpu-kernel" + ("-quick" if args.quick else "")
  summary = results.write({str(c): r for c, r in runs.items()}, args.out, stem)  # samples under raw/
  text = markdown({int(c): r for c, r in summary.items()})
  (args.out / f"{stem}.md").write_text(text + "\n")
  print(text)
  return runs


if __name__ == "__main__":
  main()
