"""``python -m benchmarks.compiled [--only REGEX] [--target h100|tpu-v5e|tpu-v6e|all] [--out DIR] [--matrix]``.

Compiles every benchmark workload (dmljax and its native JAX forms, full sizes, forward pass) for an H100
and for TPU v5e and v6e without the hardware, and writes ``h100-compiled.md`` and ``tpu-compiled.md`` (with a
JSON beside each) into ``benchmarks/results``. Everything runs in this one process (a TPU compiler start
costs seconds); a full run takes about 11 minutes on two cores. ``--matrix`` compiles the speed matrix's reduce,
one_hot and gather_nd rows instead (``benchmarks/cpu/matrix_rows.py``) into ``matrix-h100-compiled.md`` and
``matrix-tpu-compiled.md``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.compiled import availability

TARGETS = ("h100", "tpu-v5e", "tpu-v6e")


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.compiled", description=__doc__.split("\n")[0])
  parser.add_argument("--only", help="compile only the workloads whose name matches this regular expression")
  parser.add_argument("--target", choices=(*TARGETS, "all"), default="all")
  parser.add_argument("--out", type=Path, help="folder for the reports (default: benchmarks/results)")
  parser.add_argument("--matrix", action="store_true", help="the speed matrix's reduce, one_hot and gather_nd rows")
  args = parser.parse_args(argv)
  targets = TARGETS if args.target == "all" else (args.target,)
  for kind in sorted({"gpu" if t == "h100" else "tpu" for t in targets}):
    reason = availability.problem(kind)
    if reason is not None:
      print(f"cannot compile for {kind.upper()}: {reason}", file=sys.stderr)
      return 2

  from benchmarks.compiled import report, suite
  from benchmarks.harness import timing

  clock = timing.Stopwatch()
  selected = suite.cases(args.only, matrix=args.matrix)
  results = {target: suite.compile_all(target, selected) for target in targets}
  prefix = "matrix-" if args.matrix else ""
  for path in report.write(results, args.out or report.RESULTS, args.only, prefix=prefix):
    print(path)
  print(f"{sum(len(r) for r in results.values())} programs in {clock.seconds():.0f} s", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
