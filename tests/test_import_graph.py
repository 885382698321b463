"""dmljax has no import circle: no module imports, directly or through others, one that imports it.

The graph is read from the source (tests/import_graph.py: every import, in a function or not, as it runs), so a
circle hidden in a function-level import (``checks`` importing ``sampling`` that imports ``checks``) fails here too.
"""

import ast
from pathlib import Path

import import_graph

ROOT = Path(__file__).resolve().parents[1]


def test_the_reader_resolves_imports_and_finds_a_cycle() -> None:
  known = {"p", "p.a", "p.b", "p.c"}
  source = "from . import b\nfrom .c import thing\ndef f():\n  import p.a\nif TYPE_CHECKING:\n  import p\n"
  assert import_graph.imported(ast.parse(source), known, "p.a") == {"p.b", "p.c"}
  assert import_graph.imported(ast.parse("from . import a\n"), known, "p", is_package=True) == {"p.a"}
  assert import_graph.cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
  assert import_graph.cycle({"a": {"b"}, "b": set()}) is None


def test_dmljax_has_no_import_circle() -> None:
  modules = import_graph.modules(ROOT, "dmljax")
  edges = import_graph.graph(modules)
  assert edges["dmljax._src.selfcheck.runner"] >= {"dmljax._src.selfcheck.checks", "dmljax._src.selfcheck.catalog"}
  found = import_graph.cycle(edges)
  assert found is None, f"import circle in dmljax: {' -> '.join(found or [])}"
