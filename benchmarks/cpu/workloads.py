"""Every workload of the benchmark, by concern: the large sizes of each operator, gather_nd and one_hot, and the
small sizes where fixed costs show most (LM decoding, MoE routing, per-example code under ``vmap``).

What a workload holds is :mod:`benchmarks.harness.workload`.
"""

from __future__ import annotations

from benchmarks.cpu.workloads_gather import gather_one_hot_workloads
from benchmarks.cpu.workloads_large import arg_workloads, reduce_workloads, top_k_workloads
from benchmarks.cpu.workloads_small import small_workloads
from benchmarks.harness.workload import Workload


def all_workloads(quick: bool) -> list[Workload]:
  return [
    *top_k_workloads(quick),
    *arg_workloads(quick),
    *reduce_workloads(quick),
    *gather_one_hot_workloads(quick),
    *small_workloads(quick),
  ]


__all__ = ["all_workloads"]
