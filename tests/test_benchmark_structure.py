"""The benchmark package reads by purpose: subpackages by what they measure, one timing module, no import cycle.

* no module imports, directly or through others, one that imports it;
* every speed and compile-time figure is taken by ``benchmarks/harness/timing.py``: no other module reads a clock
  for one (``time.monotonic`` for a run's deadline is not a figure);
* neither the library nor the tests reach into a report writer (a ``report``/``*_report``/``chart`` module):
  tests run an entry point and read what it writes, or use the harness and the workload tables;
* every documented entry point answers ``--help``.

The import graph is read from the source (tests/import_graph.py: every import, in a function or not, as it runs),
and every module is imported once, in a fresh process, so a module that no longer imports is caught here too.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

import import_graph
import pytest

ROOT = Path(__file__).resolve().parents[1]


MODULES = import_graph.modules(ROOT, "benchmarks")


def _imported(tree: ast.AST, modules: Collection[str] = MODULES) -> set[str]:
  return import_graph.imported(tree, modules)


def test_the_reader_skips_annotation_only_imports() -> None:
  lines = ["from typing import TYPE_CHECKING", "if TYPE_CHECKING:", "  import benchmarks.cpu.run", "def f():"]
  source = "\n".join([*lines, "  import benchmarks.harness.timing", ""])
  assert _imported(ast.parse(source)) == {"benchmarks.harness.timing"}


def test_the_benchmark_package_has_no_import_cycle() -> None:
  graph = import_graph.graph(MODULES)
  assert graph["benchmarks.cpu.workloads"] >= {"benchmarks.cpu.workloads_small", "benchmarks.cpu.workloads_gather"}
  cycle = import_graph.cycle(graph)
  assert cycle is None, f"import cycle in the benchmark package: {' -> '.join(cycle or [])}"


def test_every_benchmark_module_imports() -> None:
  # One fresh process: some modules set JAX's platform or libtpu's environment before importing jax.
  names = sorted(MODULES)
  script = "import importlib, sys\nfor name in sys.argv[1:]:\n  importlib.import_module(name)\n"
  result = subprocess.run(
    [sys.executable, "-c", script, *names], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
  )
  assert result.returncode == 0, result.stderr[-3000:]


REPORT_WRITERS = {
  name for name in MODULES if name.rsplit(".", 1)[-1] in ("report", "chart") or name.endswith("_report")
}


def test_the_report_writers_are_found() -> None:
  assert {"benchmarks.cpu.report", "benchmarks.cpu.chart", "benchmarks.cpu.matrix_report"} <= REPORT_WRITERS
  assert "benchmarks.compiled.report" in REPORT_WRITERS


@pytest.mark.parametrize("folder", ["tests", "dmljax"])
def test_no_test_or_library_module_imports_a_report_writer(folder: str) -> None:
  found = {}
  for path in sorted((ROOT / folder).rglob("*.py")):
    reached = _imported(ast.parse(path.read_text()), REPORT_WRITERS)
    if reached:
      found[str(path.relative_to(ROOT))] = sorted(reached)
  assert not found, f"report writers imported outside the benchmarks: {found}"


def test_the_library_imports_nothing_of_the_benchmarks() -> None:
  for path in sorted((ROOT / "dmljax").rglob("*.py")):
    assert not _imported(ast.parse(path.read_text())), path


def test_every_figure_comes_from_the_one_timing_module() -> None:
  timing = "benchmarks.harness.timing"
  clocks = ("perf_counter", "process_time", "thread_time", "timeit")
  readers = {}
  for name, path in MODULES.items():
    tree = ast.parse(path.read_text())
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in clocks}
    used |= {
      a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for a in node.names if a.name in clocks
    }
    used |= {"time.time" for node in ast.walk(tree) if _is_time_time(node)}
    if used and name != timing:
      readers[name] = sorted(used)
  assert not readers, f"modules that time something themselves (use {timing}): {readers}"


def _is_time_time(node: ast.AST) -> bool:
  return (
    isinstance(node, ast.Attribute)
    and node.attr == "time"
    and isinstance(node.value, ast.Name)
    and node.value.id == "time"
  )


ENTRY_POINTS = (
  "benchmarks.cpu.run",
  "benchmarks.cpu.matrix",
  "benchmarks.cpu.compile",
  "benchmarks.cpu.kernel",
  "benchmarks.peers.onnx_overhead",
  "benchmarks.compiled",
  "benchmarks.compiled.pod",
  "benchmarks.compiled.tpu_automatic_mesh",
  "benchmarks.compiled.gpu_selection",
  "benchmarks.compiled.sharded_top_k",
  "benchmarks.sampling.bench",
  "benchmarks.sampling.surface",
  "benchmarks.sampling.compiled",
  "benchmarks.device.check",
  "benchmarks.device.bench",
)


def test_the_docs_list_every_entry_point_and_each_answers_help() -> None:
  docs = (ROOT / "docs" / "performance.rst").read_text()
  table = docs.split(".. entry-points-begin", 1)[1].split(".. entry-points-end", 1)[0]
  listed = set(re.findall(r"``python -m (benchmarks[\w.]*)", table))
  assert listed == set(ENTRY_POINTS), listed ^ set(ENTRY_POINTS)
  mains = {name for name, path in MODULES.items() if "__main__" in path.read_text() and "__name__" in path.read_text()}
  mains = {name.removesuffix(".__main__") for name in mains}
  assert mains == set(ENTRY_POINTS), mains ^ set(ENTRY_POINTS)
  script = (
    "import runpy, sys, contextlib, io\n"
    "for name in sys.argv[1:]:\n"
    "  sys.argv = [name, '--help']\n"
    "  try:\n"
    "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
    "      runpy.run_module(name, run_name='__main__', alter_sys=True)\n"
    "  except SystemExit as e:\n"
    "    assert e.code == 0 and 'usage' in out.getvalue(), (name, e.code)\n"
    "  else:\n"
    "    raise AssertionError(f'{name} --help ran without printing its usage')\n"
  )
  result = subprocess.run(
    [sys.executable, "-c", script, *ENTRY_POINTS], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
  )
  assert result.returncode == 0, result.stderr[-3000:]
