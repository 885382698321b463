"""The benchmark package reads by concern: no module imports, directly or through others, one that imports it.

The import graph is read from the source (every ``import``/``from`` naming a ``benchmarks`` module, in a
function or not; imports under ``if TYPE_CHECKING:`` are for annotations only and do not run), and every
module is imported once, in a fresh process, so a module that no longer imports is caught here too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "benchmarks"


def _module_name(path: Path) -> str:
  parts = path.relative_to(ROOT).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
  test = node.test
  return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
  )


def _imported(tree: ast.AST) -> set[str]:
  """The ``benchmarks`` modules an import in ``tree`` runs (``from pkg import name``: ``pkg.name`` too, if a module)."""
  found: set[str] = set()

  def visit(node: ast.AST) -> None:
    if isinstance(node, ast.If) and _type_checking_only(node):
      for child in node.orelse:
        visit(child)
      return
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      found.add(node.module)
      found.update(f"{node.module}.{alias.name}" for alias in node.names)
    for child in ast.iter_child_nodes(node):
      visit(child)

  visit(tree)
  return {name for name in found if name in MODULES}


def _graph() -> dict[str, set[str]]:
  return {name: _imported(ast.parse(path.read_text())) - {name} for name, path in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One import cycle of ``graph`` (its modules in order, the first repeated at the end), or ``None``."""
  state: dict[str, str] = {}
  stack: list[str] = []

  def visit(name: str) -> list[str] | None:
    state[name] = "open"
    stack.append(name)
    for other in sorted(graph[name]):
      if state.get(other) == "open":
        return [*stack[stack.index(other) :], other]
      if other not in state and (found := visit(other)):
        return found
    stack.pop()
    state[name] = "done"
    return None

  for name in sorted(graph):
    if name not in state and (found := visit(name)):
      return found
  return None


def test_the_cycle_finder_finds_a_cycle() -> None:
  assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
  assert _cycle({"a": {"b"}, "b": set()}) is None
  lines = ["from typing import TYPE_CHECKING", "if TYPE_CHECKING:", "  import benchmarks.run", "def f():"]
  source = "\n".join([*lines, "  import benchmarks.timing", ""])
  assert _imported(ast.parse(source)) == {"benchmarks.timing"}


def test_the_benchmark_package_has_no_import_cycle() -> None:
  graph = _graph()
  assert graph["benchmarks.workloads"] >= {"benchmarks.workloads_small", "benchmarks.workloads_gather"}
  cycle = _cycle(graph)
  assert cycle is None, f"import cycle in the benchmark package: {' -> '.join(cycle or [])}"


def test_every_benchmark_module_imports() -> None:
  # One fresh process: some modules set JAX's platform or libtpu's environment before importing jax.
  names = sorted(MODULES)
  script = "import importlib, sys\nfor name in sys.argv[1:]:\n  importlib.import_module(name)\n"
  result = subprocess.run(
    [sys.executable, "-c", script, *names], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
  )
  assert result.returncode == 0, result.stderr[-3000:]
