"""Runs the self-check: every check on every type, on the default backend, and prints one table.

``python -m dmljax.selfcheck`` is :func:`main`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import sys
import textwrap
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

import jax
import jaxlib
import numpy as np

import dmljax
from dmljax._src import platform
from dmljax._src.selfcheck import catalog, checks, inputs
from dmljax._src.strategies import dispatch

EXACT, WRONG, NOT_APPLICABLE, ERROR = "exact", "WRONG", "n/a", "ERROR"
SEED = 20260522


@dataclasses.dataclass(frozen=True)
class Cell:
  """The verdict of one check on one type, and the first differing case (or the refusal, or the error)."""

  status: str
  detail: str = ""


@dataclasses.dataclass
class Section:
  """One table: its columns, a cell for every (type, column), each type's own seconds, and the section's."""

  name: str
  columns: list[str]
  rows: dict[str, dict[str, Cell]] = dataclasses.field(default_factory=dict)
  row_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
  seconds: float = 0.0


@dataclasses.dataclass
class Report:
  """The whole run: the environment and the sections (one table each)."""

  header: list[tuple[str, str]]
  sections: list[Section] = dataclasses.field(default_factory=list)
  seconds: float = 0.0

  @property
  def failed(self) -> list[tuple[str, str, Cell]]:
    return [
      (t, c, cell)
      for section in self.sections
      for t, row in section.rows.items()
      for c, cell in row.items()
      if cell.status in (WRONG, ERROR)
    ]

  def counts(self) -> dict[str, int]:
    cells = [cell for section in self.sections for row in section.rows.values() for cell in row.values()]
    return {s: sum(cell.status == s for cell in cells) for s in (EXACT, WRONG, ERROR, NOT_APPLICABLE)}

  def as_json(self) -> dict[str, Any]:
    """Everything the table shows, and every cell's detail, as plain data."""
    return {
      "header": dict(self.header),
      "seconds": self.seconds,
      "counts": self.counts(),
      "sections": [
        {
          "name": section.name,
          "columns": section.columns,
          "seconds": section.seconds,
          "rows": {
            label: {
              "seconds": section.row_seconds.get(label),
              "cells": {c: dataclasses.asdict(cell) for c, cell in row.items()},
            }
            for label, row in section.rows.items()
          },
        }
        for section in self.sections
      ],
    }


def local_branch() -> platform.Branch:
  """The strategy table the default backend runs: ``lax.platform_dependent``'s branch for it."""
  device = jax.devices()[0]
  if device.platform == "cpu":
    return "cpu"
  if device.platform == "tpu":
    return "tpu"
  version = str(getattr(getattr(device, "client", None), "platform_version", "")).lower()
  if device.platform in ("gpu", "cuda") and "rocm" not in version:
    return "cuda"
  return "default"


def _cpu_kernel() -> str:
  """The header's line on the C++ CPU kernel: whether it runs, and why not (:func:`dmljax.cpu_kernel_status`)."""
  status = getattr(dmljax, "cpu_kernel_status", None)
  if status is None:
    return "not in this version"
  try:
    return str(status()).removeprefix("CPU top-k kernel: ")
  except Exception as error:  # a report, not a crash
    return f"unknown ({type(error).__name__}: {error})"


def environment(branch: platform.Branch) -> list[tuple[str, str]]:
  devices = jax.devices()
  return [
    ("platform", f"{jax.default_backend()} (strategy table: {branch})"),
    ("device kind", f"{devices[0].device_kind} x {len(devices)}"),
    ("jax / jaxlib", f"{jax.__version__} / {jaxlib.__version__}"),
    ("dmljax", f"{dmljax.__version__} ({os.path.dirname(dmljax.__file__)})"),
    ("numpy", np.__version__),
    ("C++ CPU kernel", _cpu_kernel()),
  ]


@contextlib.contextmanager
def _x64(on: bool) -> Iterator[None]:
  previous = bool(jax.config.read("jax_enable_x64"))
  jax.config.update("jax_enable_x64", on)
  try:
    yield
  finally:
    jax.config.update("jax_enable_x64", previous)


def _failure(error: BaseException) -> Cell:
  """A refusal (n/a) or a crash (ERROR, with the line that raised)."""
  if isinstance(error, checks.NotApplicable | dmljax.DescriptorError) or "top-k strategy" in str(error):
    return Cell(NOT_APPLICABLE, str(error))
  where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
  text = str(error).strip()
  first_line = text.splitlines()[0] if text else ""
  at = f" ({where.filename.replace(chr(92), '/').split('/')[-1]}:{where.lineno})" if where else ""
  return Cell(ERROR, f"{type(error).__name__}: {first_line}{at}")


def _computed(plans: Sequence[checks.Plan]) -> Any:
  """The outputs of ``plans``, traced and compiled together as one program."""
  program = jax.jit(lambda arguments: [plan.compute(*a) for plan, a in zip(plans, arguments, strict=True)])
  return jax.device_get(program([plan.arguments for plan in plans]))


def _judged(plan: checks.Plan, outputs: Any) -> Cell:
  try:
    problem = plan.judge(outputs)
  except Exception as error:  # a result the judge cannot read is a failed cell
    return _failure(error)
  return Cell(EXACT) if problem is None else Cell(WRONG, problem)


def _alone(plan: checks.Plan) -> Cell:
  try:
    (outputs,) = _computed([plan])
  except Exception as error:  # every crash is a failed cell, shown with where it happened
    return _failure(error)
  return _judged(plan, outputs)


@dataclasses.dataclass
class _Row:
  """One type's plans, traced together (or the failure that stopped the tracing), and the cells known already."""

  dtype: np.dtype
  x64: bool
  plans: dict[str, checks.Plan]
  cells: dict[str, Cell]
  lowered: Any = None
  seconds: float = 0.0  # this type's own tracing, compiling and running


def _prepare(columns: Sequence[catalog.Column], dtype: np.dtype, x64: bool) -> _Row:
  """Plans every column and traces the plans that take host arrays as one program (compiled later)."""
  start = time.perf_counter()
  row = _Row(dtype, x64, {}, {})
  try:
    _plan_and_lower(row, columns)
  finally:
    row.seconds += time.perf_counter() - start
  return row


def _plan_and_lower(row: _Row, columns: Sequence[catalog.Column]) -> None:
  dtype, x64 = row.dtype, row.x64
  with _x64(x64):
    for column in columns:
      try:
        row.plans[column.name] = column.check(dtype, SEED)
      except Exception as error:  # a check that cannot even be planned is a failed cell
        row.cells[column.name] = _failure(error)
    together = [plan for plan in row.plans.values() if not plan.placed]
    if together:
      program = jax.jit(lambda arguments: [plan.compute(*a) for plan, a in zip(together, arguments, strict=True)])
      try:
        row.lowered = program.lower([plan.arguments for plan in together])
      except Exception:  # one of them failed: _finish finds which
        row.lowered = None


def _compile(row: _Row) -> Any:
  """XLA's compilation of a row's program (run in worker threads), or ``None`` where it fails."""
  if row.lowered is None:
    return None
  start = time.perf_counter()
  try:
    return row.lowered.compile()
  except Exception:  # one of them failed: _finish finds which
    return None
  finally:
    row.seconds += time.perf_counter() - start


def _finish(row: _Row, compiled: Any, columns: Sequence[catalog.Column]) -> dict[str, Cell]:
  """Runs and judges a row's program; where it failed, runs each plan on its own to find the failing cells."""
  start = time.perf_counter()
  try:
    return _run_and_judge(row, compiled, columns)
  finally:
    row.seconds += time.perf_counter() - start


def _run_and_judge(row: _Row, compiled: Any, columns: Sequence[catalog.Column]) -> dict[str, Cell]:
  together = {name: plan for name, plan in row.plans.items() if not plan.placed}
  with _x64(row.x64):
    outputs = None
    if compiled is not None:
      try:
        outputs = jax.device_get(compiled([plan.arguments for plan in together.values()]))
      except Exception:  # find which
        outputs = None
    for index, (name, plan) in enumerate(together.items()):
      row.cells[name] = _alone(plan) if outputs is None else _judged(plan, outputs[index])
    for name, plan in row.plans.items():
      if plan.placed:
        row.cells[name] = _alone(plan)
  return {column.name: row.cells[column.name] for column in columns}


def run_row(columns: Sequence[catalog.Column], dtype: np.dtype, x64: bool) -> dict[str, Cell]:
  """Every column's cell for one type: the plans run as one program; where that fails, each on its own."""
  row = _prepare(columns, dtype, x64)
  return _finish(row, _compile(row), columns)


def _rows(selected: Sequence[str] | None) -> list[tuple[str, np.dtype, bool]]:
  """(label, type, x64) for each row: 64-bit types with x64 on, the others with x64 off and a few with it on."""
  found = []
  for dtype in inputs.types():
    found.append((dtype.name, dtype, inputs.needs_x64(dtype)))
    if dtype.name in ("float32", "bfloat16", "int32"):
      found.append((f"{dtype.name} x64", dtype, True))
  if selected:
    unknown = set(selected) - {label for label, _, _ in found}
    if unknown:
      raise SystemExit(f"unknown type(s) {sorted(unknown)}; choose from {[label for label, _, _ in found]}")
    found = [row for row in found if row[0] in selected]
  return found


def run(
  types: Sequence[str] | None = None,
  only: Sequence[str] | None = None,
  progress: TextIO | None = None,
  sections: Sequence[str] | None = None,
  on_row: Callable[[Report], None] | None = None,
) -> Report:
  """Every check (or the columns named in ``only``, of the sections named in ``sections``) on every type (or those
  named in ``types``), one section after another; ``on_row`` sees the report so far after every type."""
  start = time.perf_counter()
  branch = local_branch()
  columns = catalog.columns(dispatch.TABLES[branch], len(jax.devices()))
  if only:
    unknown = set(only) - {c.name for c in columns}
    if unknown:
      raise SystemExit(f"unknown check(s) {sorted(unknown)}; choose from {[c.name for c in columns]}")
    columns = [c for c in columns if c.name in only]
  if sections:
    unknown = set(sections) - set(catalog.SECTIONS)
    if unknown:
      raise SystemExit(f"unknown section(s) {sorted(unknown)}; choose from {list(catalog.SECTIONS)}")
    columns = [c for c in columns if c.section in sections]
  rows = _rows(types)
  report = Report(environment(branch))
  for name in catalog.SECTIONS:
    chosen = [c for c in columns if c.section == name]
    if chosen:
      section = Section(name, [c.name for c in chosen])
      report.sections.append(section)
      _run_section(section, chosen, rows, progress, lambda: on_row(report) if on_row else None)
    report.seconds = time.perf_counter() - start
  return report


def _run_section(
  section: Section,
  columns: Sequence[catalog.Column],
  rows: Sequence[tuple[str, np.dtype, bool]],
  progress: TextIO | None,
  on_row: Callable[[], None],
) -> None:
  start = time.perf_counter()
  name = section.name
  # Tracing reads global choices (the forced strategy, x64), so it runs here, one type after another; XLA compiles
  # the traced programs in worker threads meanwhile, one per core.
  with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
    pending = []
    for label, dtype, x64 in rows:
      row = _prepare(columns, dtype, x64)
      pending.append((label, row, pool.submit(_compile, row)))
    for label, row, compiled in pending:
      cells = _finish(row, compiled.result(), columns)
      if all(cell.status == NOT_APPLICABLE for cell in cells.values()) and len(rows) > 1:
        continue  # a type the whole section does not take (sampling's integers): left out of its table
      section.rows[label] = cells
      section.row_seconds[label] = row.seconds
      section.seconds = time.perf_counter() - start
      if progress is not None:
        print(f"  {name} / {label}: {row.seconds:.1f} s", file=progress, flush=True)
      on_row()
  section.seconds = time.perf_counter() - start
  if progress is not None:
    print(f"{name}: {section.seconds:.1f} s", file=progress, flush=True)


def _section_lines(section: Section) -> list[str]:
  first = max([len("type"), *(len(t) for t in section.rows)])
  widths = [max(len(c), len(EXACT)) for c in section.columns]
  lines = [
    "  ".join([f"{'type':<{first}}", *(f"{c:<{w}}" for c, w in zip(section.columns, widths, strict=True))]).rstrip()
  ]
  for label, row in section.rows.items():
    cells = [f"{row[c].status:<{w}}" for c, w in zip(section.columns, widths, strict=True)]
    lines.append("  ".join([f"{label:<{first}}", *cells]).rstrip())
  return lines


def table(report: Report) -> str:
  """The report as text: the environment, one table per section (one line per type, each section's own time),
  then the first differing case of each failed cell."""
  lines = ["dmljax self-check: bit-exact results on this machine's default backend", ""]
  width = max(len(name) for name, _ in report.header)
  lines += [f"{name:<{width}}  {value}" for name, value in report.header]
  for section in report.sections:
    lines += ["", f"{section.name}: {catalog.SECTIONS[section.name]} ({section.seconds:.0f} s)"]
    if section.rows:
      lines += _section_lines(section)
    else:
      lines.append("(no type this section takes was chosen)")
    if section.name in catalog.NOTES:
      lines += textwrap.wrap(catalog.NOTES[section.name], 116, initial_indent="  ", subsequent_indent="  ")
  failed = report.failed
  lines += ["", ", ".join(f"{n} {s}" for s, n in report.counts().items()) + f"; {report.seconds:.0f} s"]
  if failed:
    lines += ["", "First differing case of each failed cell (type / check):"]
    lines += [f"  {t} / {c}: {cell.status}: {cell.detail}" for t, c, cell in failed]
    lines += ["", "Please attach this whole output to a bug report."]
  else:
    lines.append("Every result is exact.")
  return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
  """``python -m dmljax.selfcheck``: prints the table; exit status 1 on any wrong or failed cell, else 0."""
  parser = argparse.ArgumentParser(
    prog="python -m dmljax.selfcheck",
    description="Checks dmljax's results bit for bit on this machine's default backend (GPU, TPU or CPU).",
  )
  parser.add_argument("--type", action="append", dest="types", help="only this type (a row label); repeatable")
  parser.add_argument("--check", action="append", dest="only", help="only this check (a column); repeatable")
  parser.add_argument(
    "--section", action="append", dest="sections", choices=list(catalog.SECTIONS), help="only this table; repeatable"
  )
  parser.add_argument("--json", metavar="PATH", help="also write every cell, its detail and the times as JSON")
  parser.add_argument("--notes", action="store_true", help="also list why each n/a cell is n/a")
  parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
  options = parser.parse_args(argv)
  path = options.json

  def write(report: Report) -> None:  # after every type too: a run stopped half-way leaves what it found
    if path:
      with open(path, "w", encoding="utf-8") as out:
        json.dump(report.as_json(), out, indent=1)

  report = run(options.types, options.only, None if options.quiet else sys.stderr, options.sections, write)
  write(report)
  print(table(report))
  if options.notes:
    print("\nn/a cells:")
    for section in report.sections:
      for label, row in section.rows.items():
        for column, cell in row.items():
          if cell.status == NOT_APPLICABLE:
            print(f"  {label} / {column}: {cell.detail}")
  return 1 if report.failed else 0
