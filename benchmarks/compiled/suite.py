"""Every benchmark workload (``benchmarks.cpu.workloads.all_workloads``, full sizes, forward pass) compiled per target.

Each workload gives its dmljax call and its native JAX forms; each is compiled on inputs of the workload's
shapes placed on the target's compile-only device and summarized (:mod:`benchmarks.compiled.program`).
The *native* figure of a workload is its fastest native form by the estimate.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmarks.compiled import devices, program
from benchmarks.compiled.program import Summary
from benchmarks.harness import timing


@dataclasses.dataclass(frozen=True)
class Case:
  """One workload as the harness compiles it: input shapes and types, row length, and its programs."""

  name: str
  group: str
  inputs: tuple[tuple[tuple[int, ...], np.dtype], ...]
  row: int | None
  programs: dict[str, Callable[..., Any]]  # "dmljax" first, then the native forms


@dataclasses.dataclass
class Row:
  """One compiled program of a workload on a target."""

  workload: str
  program: str
  summary: Summary | None
  error: str | None = None
  ratio: float | None = None  # estimate / the fastest native form's
  fastest_native: bool = False


def row_length(name: str, group: str, shapes: Sequence[tuple[int, ...]]) -> int | None:
  """The length of the axis (or the product of the axes) the workload selects or reduces along.

  top_k rows are the last axis; argmax/argmin and reductions name their axes (``axis 1``, ``axes (1,2)``,
  ``all axes``); gather_nd and one_hot select no axis (``None``: no sort is a whole-row one).
  """
  shape = shapes[0]
  if group in ("gather_nd", "one_hot") or "gather" in name:
    return None
  if "all axes" in name:
    return math.prod(shape)
  found = re.search(r"\baxes? \(?([\d,]+)\)?", name)
  if group in ("argmax", "argmin", "reduce") and found:
    return math.prod(shape[int(a)] for a in found.group(1).split(","))
  return shape[-1]


# The speed matrix's groups this harness compiles (issue 28, point 6), and the row length of each matrix axis.
MATRIX_GROUPS = ("reduce", "one_hot", "gather_nd")


def _matrix_row_length(axis: str, group: str, shape: tuple[int, ...]) -> int | None:
  if group != "reduce":
    return None
  if axis == "all":  # every axis (a rank-0 input: its one element)
    return math.prod(shape)
  return shape[0] if axis == "first" else shape[-1]


def matrix_cases(only: str | None = None) -> list[Case]:
  """The speed matrix's reduce, one_hot and gather_nd rows (full sizes, large and small; float64 rows aside)."""
  from benchmarks.cpu.matrix_rows import all_rows

  found = []
  for r in all_rows(short=False):
    if r.operator not in MATRIX_GROUPS or r.x64 or (only is not None and not re.search(only, r.name)):
      continue
    arrays = r.workload.make(np.random.default_rng(0))
    inputs = tuple((tuple(a.shape), a.dtype) for a in arrays)
    row = _matrix_row_length(r.axis, r.operator, inputs[0][0])
    found.append(Case(r.name, r.operator, inputs, row, {"dmljax": r.workload.dmljax, **r.workload.jax}))
  return found


def cases(only: str | None = None, matrix: bool = False) -> list[Case]:
  """The benchmark's full-size workloads (those whose name matches ``only``), with their input shapes.

  ``matrix``: the speed matrix's rows instead (:func:`matrix_cases`).
  """
  if matrix:
    return matrix_cases(only)
  from benchmarks.cpu.workloads import all_workloads

  found = []
  for workload in all_workloads(quick=False):
    if only is not None and not re.search(only, workload.name):
      continue
    arrays = workload.make(np.random.default_rng(0))
    inputs = tuple((tuple(a.shape), a.dtype) for a in arrays)
    found.append(
      Case(
        name=workload.name,
        group=workload.group,
        inputs=inputs,
        row=row_length(workload.name, workload.group, [shape for shape, _ in inputs]),
        programs={"dmljax": workload.dmljax, **workload.jax},
      )
    )
  return found


def _log(message: str) -> None:
  print(message, file=sys.stderr, flush=True)


def compile_case(case: Case, device: Any) -> list[Row]:
  """Every program of ``case`` compiled for ``device``, with each one's ratio to the fastest native form."""
  rows = []
  for label, fn in case.programs.items():
    specs = [devices.place(shape, dtype, device) for shape, dtype in case.inputs]
    clock = timing.Stopwatch()
    try:
      rows.append(Row(case.name, label, program.compile_and_summarize(fn, *specs, row=case.row)))
    except Exception as failure:  # one program failing to compile is a finding, not a stop
      rows.append(Row(case.name, label, None, error=str(failure).splitlines()[0][:200]))
    _log(f"  {case.name} / {label}: {clock.seconds():.1f} s")
  natives = [r for r in rows[1:] if r.summary is not None and r.summary.estimate_s is not None]
  if natives:
    best = min(natives, key=lambda r: r.summary.estimate_s if r.summary and r.summary.estimate_s else 0.0)
    best.fastest_native = True
    assert best.summary is not None and best.summary.estimate_s is not None
    for row in rows:
      if row.summary is not None and row.summary.estimate_s is not None and best.summary.estimate_s > 0:
        row.ratio = row.summary.estimate_s / best.summary.estimate_s
  return rows


def compile_all(target: str, selected: Sequence[Case]) -> list[Row]:
  """Every program of every case compiled for a report target (``"h100"``, ``"tpu-v5e"``, ``"tpu-v6e"``)."""
  device = devices.devices(target)[0]
  _log(f"{target}: {device.device_kind}, {len(selected)} workloads")
  rows: list[Row] = []
  for case in selected:
    rows += compile_case(case, device)
  return rows
