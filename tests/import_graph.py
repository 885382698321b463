"""The import graph of a package, read from its source, and a cycle in it (for the structure tests).

An edge is a module an ``import`` runs, in a function or not, as written: ``import a.b`` runs ``a.b``; ``from a
import b`` runs ``a.b`` where that is a module, else ``a``; relative imports are resolved. The packages a module
sits in run before it but are not edges of its own (``from a.b import c`` does not make ``a`` import its
importers). Imports under ``if TYPE_CHECKING:`` are for annotations only and do not run.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Mapping
from pathlib import Path


def modules(root: Path, package: str) -> dict[str, Path]:
  """``{dotted name: path}`` of every module of ``package`` (a folder under ``root``)."""
  found = {}
  for path in sorted((root / package).rglob("*.py")):
    parts = path.relative_to(root).with_suffix("").parts
    found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  return found


def _type_checking_only(node: ast.If) -> bool:
  test = node.test
  return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
  )


def imported(tree: ast.AST, known: Collection[str], name: str = "", is_package: bool = False) -> set[str]:
  """The modules of ``known`` that the imports in ``tree`` (the source of module ``name``) run."""
  found: set[str] = set()

  def source(node: ast.ImportFrom) -> str:
    if not node.level:
      return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])

  def visit(node: ast.AST) -> None:
    if isinstance(node, ast.If) and _type_checking_only(node):
      for child in node.orelse:
        visit(child)
      return
    if isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      module = source(node)
      submodules = {f"{module}.{alias.name}" for alias in node.names} & set(known)
      found.update(submodules)
      if len(submodules) < len(node.names):
        found.add(module)
    for child in ast.iter_child_nodes(node):
      visit(child)

  visit(tree)
  return {module for module in found if module in known} - {name}


def graph(found: Mapping[str, Path]) -> dict[str, set[str]]:
  """Each module of ``found`` and the modules of ``found`` it imports."""
  return {
    name: imported(ast.parse(path.read_text()), found, name, path.name == "__init__.py") for name, path in found.items()
  }


def cycle(edges: Mapping[str, Collection[str]]) -> list[str] | None:
  """One import cycle of ``edges`` (its modules in order, the first repeated at the end), or ``None``."""
  state: dict[str, str] = {}
  stack: list[str] = []

  def visit(name: str) -> list[str] | None:
    state[name] = "open"
    stack.append(name)
    for other in sorted(edges[name]):
      if state.get(other) == "open":
        return [*stack[stack.index(other) :], other]
      if other not in state and (found := visit(other)):
        return found
    stack.pop()
    state[name] = "done"
    return None

  for name in sorted(edges):
    if name not in state and (found := visit(name)):
      return found
  return None
