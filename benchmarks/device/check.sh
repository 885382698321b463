#!/usr/bin/env bash
# One command for a GPU or TPU machine: installs dmljax from this checkout (nothing fetched), runs the self-check and
# the accelerator benchmarks, and writes report.md, results.json and log.txt under OUTDIR.
#
#   benchmarks/device/check.sh OUTDIR [--short] [--full] [--no-install] [--install-only] [--budget SECONDS]
#
# Under 8 minutes on one H100 (--budget 450 s by default); a short run (small sizes, float32) on a CPU. Exit status 0
# when every step ran and every checked result is exact (a missing CPU kernel is reported, not fatal), 1 on any wrong
# result, 2 when a step failed or stopped. PYTHON names the interpreter (default python3). See
# benchmarks/device/check.py.
set -u
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: $0 OUTDIR [--short] [--full] [--no-install] [--install-only] [--budget SECONDS]" >&2
  exit 64
fi
out="$1"
shift
mkdir -p "$out" && out="$(cd "$out" && pwd)" || exit 64
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
cd "$root" && exec "${PYTHON:-python3}" -m benchmarks.device.check "$out" "$@"
