"""The project's GPU estimate: every launch at the spec's memory bandwidth, plus a fixed cost per launch.

``time = sum over launches of (LAUNCH_LATENCY_S + bytes / bandwidth)`` where

* ``bytes`` is what the launch reads and writes (:mod:`benchmarks.compiled.launches`); a custom kernel that
  reads its operands several times (a Pallas kernel named in a ``KERNEL_READ_PASSES`` table of
  ``dmljax._src``, :func:`kernel_read_passes`) counts its operands that many times;
* ``bandwidth`` is the target's HBM bandwidth (3.35 TB/s for the H100 SXM), capped for a launch with few
  blocks at ``blocks * clock * 32 B``: XLA's GPU performance model (``AdjustBandwidth`` in
  ``xla/service/gpu/model/gpu_performance_model_base.cc``) lets each block issue one 32-byte memory
  transaction per clock (``DeviceDescription::memory_transactions_per_clock``);
* ``LAUNCH_LATENCY_S`` is 1 µs, XLA's ``GpuPerformanceModelBase::kKernelLaunchOverhead``
  (``gpu_performance_model_base.h``), the per-kernel cost its fusion decisions use.

Compute time is left out: every operator here moves far more bytes than it does arithmetic per byte.
CUB radix sorts are modelled by their passes (:mod:`benchmarks.compiled.cub_sort`). The estimate ignores caches (a
launch whose data sits in the 50 MB L2 runs faster), overlap between launches, and the real efficiency
of each kernel; it is a way to compare programs compiled for the same GPU, not a measurement. Collectives of a
program sharded over several GPUs are priced like any launch, at HBM bandwidth: the interconnect is not modelled.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from benchmarks.compiled.launches import Launch

if TYPE_CHECKING:
  from benchmarks.compiled.devices import GpuSpec

LAUNCH_LATENCY_S = 1e-6
TRANSACTION_BYTES_PER_CLOCK = 32


def kernel_read_passes() -> dict[str, float]:
  """``{kernel name: times it reads its operands}`` from every ``KERNEL_READ_PASSES`` table in ``dmljax._src``."""
  import dmljax._src as source

  table: dict[str, float] = {}
  for info in pkgutil.iter_modules(source.__path__):
    try:
      module = importlib.import_module(f"dmljax._src.{info.name}")
    except ImportError:  # pragma: no cover - a module needing an optional package
      continue
    table.update(getattr(module, "KERNEL_READ_PASSES", None) or {})
  return table


def bandwidth(spec: GpuSpec, blocks: int | None) -> float:
  """The bandwidth a launch of ``blocks`` blocks can use (all of it when the grid is unknown)."""
  if blocks is None:
    return spec.memory_bandwidth
  return min(spec.memory_bandwidth, blocks * spec.clock_hz * TRANSACTION_BYTES_PER_CLOCK)


def launch_seconds(launch: Launch, spec: GpuSpec, read_passes: Mapping[str, float]) -> float:
  """One launch's estimate: its kernels' fixed cost plus its bytes at the bandwidth it can use."""
  read = launch.read_bytes * read_passes.get(launch.target, 1.0)
  return launch.kernels * LAUNCH_LATENCY_S + (read + launch.write_bytes) / bandwidth(spec, launch.blocks)


@dataclasses.dataclass(frozen=True)
class Estimate:
  """The roofline of a program, and XLA's own model on the launches it has a figure for."""

  seconds: float
  bytes: int
  xla_seconds: float | None  # XLA's model (plus its 1 µs per kernel) over the launches it covers
  roofline_covered_seconds: float  # this roofline over those same launches
  xla_covered: int
  launches: int


def estimate(launches: Sequence[Launch], spec: GpuSpec, read_passes: Mapping[str, float] | None = None) -> Estimate:
  """The roofline of a program's launches on ``spec``, with XLA's per-fusion estimates beside it."""
  passes = kernel_read_passes() if read_passes is None else read_passes
  times = [launch_seconds(launch, spec, passes) for launch in launches]
  covered = [(launch, t) for launch, t in zip(launches, times, strict=True) if launch.xla_us is not None]
  xla = sum(launch.xla_us * 1e-6 + LAUNCH_LATENCY_S for launch, _ in covered if launch.xla_us is not None)
  return Estimate(
    seconds=sum(times),
    bytes=int(sum(launch.read_bytes * passes.get(launch.target, 1.0) + launch.write_bytes for launch in launches)),
    xla_seconds=xla if covered else None,
    roofline_covered_seconds=sum(t for _, t in covered),
    xla_covered=len(covered),
    launches=sum(launch.kernels for launch in launches),
  )


def floor_seconds(bytes_: int, spec: GpuSpec) -> float:
  """The read roofline: ``bytes_`` (a program's inputs and outputs) once at full bandwidth, no launch cost."""
  return bytes_ / spec.memory_bandwidth
