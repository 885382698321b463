"""dmljax's benchmarks, by purpose (every entry point is listed in ``docs/performance.rst``, "Entry points"):

* ``harness``: how every figure is taken: :mod:`benchmarks.harness.timing` (the one timing module: interleaved
  rounds, medians, trace + compile time), a workload and its contenders (:mod:`~benchmarks.harness.workload`,
  :mod:`~benchmarks.harness.measure`, :mod:`~benchmarks.harness.adapters_jax`), the copy-bandwidth baseline;
* ``cpu``: the CPU workload tables, the benchmark run and its targets, the speed matrix, the CPU kernel study;
* ``peers``: PyTorch and ONNX Runtime as contenders, and the ONNX backend's overhead study;
* ``compiled``: programs compiled for an H100 and TPUs without the hardware, the pod-slice study, and the
  scripts for machines with an accelerator or a mesh;
* ``sampling``: decode-step sampling against the recipes users write;
* ``device``: the one command for a GPU or TPU machine (``benchmarks/device/check.sh``).

Results (summaries only) are written to ``benchmarks/results``.
"""

from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent
