"""Compile-only devices: an H100 from the project's own target description, and TPU slices of any size.

Nothing here needs the hardware. The GPU devices come from
``jax.experimental.topologies.get_topology_desc(platform="cuda", target_config=<h100_sxm.txtpb>, ...)``,
the TPU ones from libtpu's topology descriptions (``"v5e:1x1"``, ``"v6e:1x1"``, and slices such as
``"v5e:4x4"``, ``"v5p:4x4x4"`` or ``"v5e:16x16"``). A function lowered with inputs placed on these devices
(:func:`place`, or a ``NamedSharding`` over :func:`mesh`) compiles exactly as it would for the hardware.
Call :func:`availability.configure` before JAX first touches a device (importing this module does).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.compiled import availability

availability.configure()

import jax  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, SingleDeviceSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

H100_TARGET = Path(__file__).with_name("h100_sxm.txtpb")
# The report targets: name -> (kind, topology). GPU topologies read "slices x hosts x GPUs per host".
TARGETS = {"h100": ("gpu", "1x1x1"), "tpu-v5e": ("tpu", "v5e:1x1"), "tpu-v6e": ("tpu", "v6e:1x1")}


@dataclasses.dataclass(frozen=True)
class GpuSpec:
  """The figures of a GPU target description that the roofline uses."""

  name: str
  memory_bandwidth: float  # bytes/s
  clock_hz: float
  core_count: int
  l2_cache_size: int


def _field(text: str, name: str) -> str:
  found = re.search(rf"^\s*{name}:\s*\"?([^\"\n]+)\"?\s*$", text, re.MULTILINE)
  if found is None:
    raise ValueError(f"the GPU target description has no {name}")
  return found.group(1)


@functools.cache
def gpu_spec(target: Path = H100_TARGET) -> GpuSpec:
  """The bandwidth, clock and SM count of a GPU target description (the same file the compiler gets)."""
  text = target.read_text()
  return GpuSpec(
    name=_field(text, "device_description_str"),
    memory_bandwidth=float(_field(text, "memory_bandwidth")),
    clock_hz=float(_field(text, "clock_rate_ghz")) * 1e9,
    core_count=int(_field(text, "core_count")),
    l2_cache_size=int(_field(text, "l2_cache_size")),
  )


@functools.cache
def gpu_topology(topology: str = "1x1x1", target: Path = H100_TARGET) -> Any:
  """A compile-only CUDA topology of ``target`` GPUs (``"1x1x8"``: one host with 8; slices x hosts x GPUs)."""
  availability.require("gpu")
  from jax.experimental import topologies

  return topologies.get_topology_desc(
    platform="cuda", topology_name=target.stem, target_config=target.read_text(), topology=topology
  )


def _tpu_bounds(name: str) -> tuple[int, int, int]:
  found = re.fullmatch(r"v\d+[a-z]*:(\d+)x(\d+)(?:x(\d+))?", name)
  if found is None:
    raise ValueError(f"a TPU topology reads like 'v5e:2x2' or 'v5p:4x4x4'; got {name!r}")
  x, y, z = found.groups()
  return int(x), int(y), int(z or 1)


@functools.cache
def tpu_topology(name: str) -> Any:
  """A compile-only TPU topology (``"v5e:1x1"``, ``"v6e:1x1"``, ``"v5e:4x4"``, ``"v5p:4x4x4"``...).

  libtpu lays a slice out over hosts of 2x2 chips (v5e, v6e) by default; a slice smaller than a host
  gets a host of its own size.
  """
  availability.require("tpu")
  from jax.experimental import topologies

  bounds = _tpu_bounds(name)
  kwargs = {"chips_per_host_bounds": bounds} if math.prod(bounds) < 4 else {}
  return topologies.get_topology_desc(name, platform="tpu", **kwargs)


def devices(target: str) -> list[Any]:
  """The compile-only devices of a report target (``"h100"``, ``"tpu-v5e"``, ``"tpu-v6e"``) or a topology.

  A topology is ``"gpu:1x1x8"`` (H100s) or a TPU name such as ``"v5e:4x4"``.
  """
  if target in TARGETS:
    kind, topology = TARGETS[target]
  elif target.startswith("gpu:"):
    kind, topology = "gpu", target[4:]
  else:
    kind, topology = "tpu", target
  return list((gpu_topology(topology) if kind == "gpu" else tpu_topology(topology)).devices)


def kind_of(device: Any) -> str:
  """``"gpu"`` or ``"tpu"``: the kind of a compile-only device."""
  return "tpu" if "TPU" in device.device_kind else "gpu"


def mesh(devices: Sequence[Any], shape: Sequence[int], axis_names: Sequence[str], *, explicit: bool = False) -> Mesh:
  """A mesh over compile-only ``devices`` (in their given order), e.g. ``mesh(devices("v5e:4x4"), (4, 4), "xy")``.

  Its axes are automatic (``AxisType.Auto``: XLA's partitioner decides the split), or with ``explicit``
  explicit ones (``AxisType.Explicit``: the split is part of every array's type).
  """
  grid = np.asarray(devices, dtype=object).reshape(tuple(shape))
  kind = AxisType.Explicit if explicit else AxisType.Auto
  return Mesh(grid, tuple(axis_names), axis_types=(kind,) * len(grid.shape))


def place(shape: Sequence[int], dtype: Any, on: Any, spec: P | None = None) -> jax.ShapeDtypeStruct:
  """An abstract input on a compile-only device, or sharded over a mesh (``on`` a ``Mesh``, ``spec`` its layout)."""
  if isinstance(on, Mesh):
    sharding: Any = NamedSharding(on, spec if spec is not None else P())
  else:
    sharding = SingleDeviceSharding(on)
  return jax.ShapeDtypeStruct(tuple(shape), jax.numpy.dtype(dtype), sharding=sharding)
