"""Compile a function for a compile-only device and read back what XLA made of it.

:func:`compile_program` lowers ``jax.jit(fn)`` on abstract inputs placed on a compile-only device (or
sharded over a mesh of them, :mod:`benchmarks.compiled.devices`), compiles it with the dumps switched on
into a temporary folder, and keeps the optimized HLO, the GPU thunk sequence, and on TPU XLA's cost and
memory analyses. :func:`summarize` turns that into the report's figures.

On GPU, a program that uses a CUB sort does not finish compiling without a device: XLA asks the CUDA
runtime for CUB's scratch size as its very last step. Every HLO pass has run by then and the final HLO is
dumped, so the program is read from that HLO (``Program.error`` keeps the message) instead of from the
thunk sequence, which only a finished compilation writes.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from benchmarks.compiled import devices, hlo, launches, roofline, thunks
from benchmarks.compiled.launches import Launch, Sort

GPU_OPTIONS: dict[str, Any] = {"xla_gpu_collect_cost_model_stats": True}


@dataclasses.dataclass
class Program:
  """A compiled (or, on GPU with CUB, fully optimized) program for one kind of device."""

  kind: str  # "gpu" or "tpu"
  device_kind: str
  module: hlo.Module
  thunks: list[thunks.Thunk] | None
  error: str | None
  cost: dict[str, float] | None
  memory: Any
  codegen: hlo.Module | None = None  # TPU: the compiler's final HLO, with each operation's estimated cycles

  @property
  def io_bytes(self) -> int:
    """The entry computation's parameters and results: the least any program computing it must move."""
    entry = self.module.entry
    return sum(i.bytes for i in entry.instructions if i.opcode == "parameter") + entry.root.bytes


def _dump(folder: Path, suffix: str) -> str | None:
  found = sorted(p for p in folder.iterdir() if p.name.endswith(suffix))
  return found[-1].read_text() if found else None


def _device(specs: tuple[Any, ...]) -> Any:
  for spec in specs:
    sharding = getattr(spec, "sharding", None)
    if sharding is not None:
      return min(sharding.device_set, key=lambda d: d.id)
  raise ValueError("place at least one input on a compile-only device (devices.place)")


def compile_program(fn: Callable[..., Any], *specs: Any, options: Mapping[str, Any] | None = None) -> Program:
  """``jax.jit(fn)`` compiled for the compile-only device(s) that ``specs`` are placed on."""
  import jax

  device = _device(specs)
  kind = devices.kind_of(device)
  with tempfile.TemporaryDirectory(prefix="dmljax-compiled-") as folder:
    compiler_options = {**(GPU_OPTIONS if kind == "gpu" else {}), **(options or {}), "xla_dump_to": folder}
    error, compiled = None, None
    try:
      compiled = jax.jit(fn).lower(*specs).compile(compiler_options=compiler_options)
    except Exception as failure:  # any failure after the final HLO is dumped is reported, not raised
      if kind != "gpu" or _dump(Path(folder), "gpu_after_optimizations.txt") is None:
        raise
      error = str(failure).splitlines()[0]
    text = _dump(Path(folder), "after_optimizations.txt")
    if text is None:
      raise RuntimeError(f"XLA wrote no optimized HLO into {folder}")
    sequence, metadata = _dump(Path(folder), "thunk_sequence.txt"), _dump(Path(folder), "thunk_metadata.txt")
    codegen = _dump(Path(folder), "after_codegen.txt") if kind == "tpu" else None
  cost = memory = None
  if compiled is not None and kind == "tpu":
    analysis = compiled.cost_analysis()
    cost = dict((analysis[0] if isinstance(analysis, list) else analysis) or {})
    memory = compiled.memory_analysis()
  return Program(
    kind=kind,
    device_kind=device.device_kind,
    module=hlo.parse(text),
    thunks=thunks.parse(sequence, metadata or "") if sequence is not None else None,
    error=error,
    cost=cost,
    memory=memory,
    codegen=hlo.parse(codegen) if codegen is not None else None,
  )


@dataclasses.dataclass(frozen=True)
class Summary:
  """The report's figures for one compiled program.

  ``launches`` counts kernel launches on GPU (a CUB radix sort counts one per pass; memcpy and memset are
  counted apart) and HLO operations on TPU. ``estimate_s`` is the roofline on GPU
  (:mod:`benchmarks.compiled.roofline`) and XLA's ``optimal_seconds`` on TPU (``None`` where XLA gives none,
  as for sorts). ``hbm_bytes`` is the roofline's bytes on GPU and XLA's ``bytes accessed`` on TPU.
  """

  kind: str
  launches: int
  memcpy: int
  memset: int
  custom_calls: dict[str, int]
  sorts: tuple[Sort, ...]
  whole_row_sorts: int
  hbm_bytes: int
  estimate_s: float | None
  xla_estimate_s: float | None = None
  roofline_covered_s: float | None = None
  xla_covered: int = 0
  floor_s: float | None = None
  from_thunks: bool = False
  temp_bytes: int | None = None
  note: str | None = None
  launch_list: tuple[Launch, ...] = ()

  def to_json(self) -> dict[str, Any]:
    """The figures as plain data (the launch list left out)."""
    data = dataclasses.asdict(self)
    data.pop("launch_list")
    data["sorts"] = [dataclasses.asdict(s) for s in self.sorts]
    return data


def summarize(program: Program, row: int | None = None, spec: devices.GpuSpec | None = None) -> Summary:
  """The figures of a compiled program.

  ``row`` is the length of the axis (or axes) the operator selects or reduces along, for the whole-row sort
  check; where it is given the operator reads every input element, and ``floor_s`` is the program's inputs
  and outputs once at full bandwidth (GPU).
  """
  found = launches.sorts(program.module)
  whole = sum(s.whole_row(row) for s in found)
  calls = launches.custom_calls(program.module)
  if program.kind == "tpu":
    ops = launches.from_hlo(program.module)
    cost = program.cost or {}
    seconds = cost.get("optimal_seconds")
    temp = getattr(program.memory, "temp_size_in_bytes", None)
    return Summary(
      kind="tpu",
      launches=len(ops),
      memcpy=sum(o.category == "memcpy" for o in ops),
      memset=0,
      custom_calls=calls,
      sorts=tuple(found),
      whole_row_sorts=whole,
      hbm_bytes=int(cost.get("bytes accessed", 0)),
      estimate_s=seconds if seconds is not None and seconds >= 0 else None,
      temp_bytes=temp,
      note=None if seconds is None or seconds >= 0 else "XLA gives no optimal_seconds for this program",
      launch_list=tuple(ops),
    )
  spec = spec or devices.gpu_spec()
  if program.thunks is not None:
    runs = launches.from_thunks(program.module, program.thunks)
  else:
    runs = launches.from_hlo(program.module)
  kernels = [r for r in runs if r.category not in ("memcpy", "memset")]
  estimate = roofline.estimate(runs, spec)
  return Summary(
    kind="gpu",
    launches=sum(r.kernels for r in kernels),
    memcpy=sum(r.category == "memcpy" for r in runs),
    memset=sum(r.category == "memset" for r in runs),
    custom_calls=calls,
    sorts=tuple(found),
    whole_row_sorts=whole,
    hbm_bytes=estimate.bytes,
    estimate_s=estimate.seconds,
    xla_estimate_s=estimate.xla_seconds,
    roofline_covered_s=estimate.roofline_covered_seconds,
    xla_covered=estimate.xla_covered,
    floor_s=None if row is None else roofline.floor_seconds(program.io_bytes, spec),
    from_thunks=program.thunks is not None,
    note=None if program.error is None else f"read from the final HLO: compilation stopped at '{program.error}'",
    launch_list=tuple(runs),
  )


def compile_and_summarize(fn: Callable[..., Any], *specs: Any, row: int | None = None) -> Summary:
  """:func:`summarize` of :func:`compile_program`: the one call for a function on placed inputs."""
  return summarize(compile_program(fn, *specs), row)
