"""The speed matrix (``python -m benchmarks.cpu.matrix``) keeps working: its short mode runs, and its JSON, Markdown and
documentation section have the documented shape, every row with both timings and both temporary-byte figures.
The full matrix's rows are checked for breadth without timing them. Timings are never asserted (they belong to the
benchmark: a run on a shared machine decides nothing).
"""

import itertools
import json
import re
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cpu import matrix, matrix_rows
from benchmarks.harness import results

BEGIN, END = ".. speed-matrix-begin", ".. speed-matrix-end"  # the markers of the generated section

PHASE_FIELDS = {
  "name",
  "operator",
  "function",
  "dtype",
  "axis",
  "size",
  "x64",
  "shapes",
  "input_bytes",
  "phase",
  "native_form",
  "dmljax_s",
  "native_s",
  "ratio",
  "paired_ratio",
  "paired_q1",
  "paired_q3",
  "dmljax_temp_bytes",
  "native_temp_bytes",
  "full_size_temps",
  "compile_dmljax_s",
  "compile_native_s",
  "compile_ratio",
  "target",
  "errors",
}


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
  out = tmp_path_factory.mktemp("matrix")
  summary = matrix.main(["--short", "--quiet", "--out", str(out)])
  report = json.loads((out / "raw" / "matrix-cpu-short.json").read_text())  # with every workload's samples
  assert results.load(out / "matrix-cpu-short.json") == results.summary(report, omit=("workloads",))
  assert summary["summary"] == report["summary"]
  return report, out


def test_short_run_writes_json_and_markdown_with_its_conditions(short: tuple[dict, Path]) -> None:
  _, out = short
  data = results.load(out / "matrix-cpu-short.json")
  assert data["schema"] == matrix.SCHEMA and data["settings"]["short"] is True
  conditions = data["conditions"]
  assert conditions["command"] == f"python -m benchmarks.cpu.matrix --short --quiet --out {out}"
  assert re.match(r"[0-9a-f]{12}|unknown", conditions["commit"])
  assert "load average" in conditions["uptime_start"] and "load average" in conditions["uptime_end"]
  assert isinstance(conditions["under_load"], bool) and conditions["wall_s"] > 0
  assert conditions["environment"]["versions"]["jax"] == jax.__version__
  markdown = (out / "matrix-cpu-short.md").read_text()
  assert conditions["command"] in markdown and conditions["uptime_start"] in markdown
  for heading in ("## Summary", "## Rows", "## Trace + compile (each", "## Trace + compile of whole programs"):
    assert heading in markdown
  for row in data["rows"]:
    assert f"| {row['name']} | {row['phase']} |" in markdown


def test_every_row_has_both_timings_and_both_memory_figures(short: tuple[dict, Path]) -> None:
  report, _ = short
  rows = report["rows"]
  assert {r["operator"] for r in rows} == {"A/A", "reduce", "top_k", "argmax", "gather_nd", "one_hot", "sampling"}
  assert {r["phase"] for r in rows} == {"forward", "grad"} and {r["size"] for r in rows} == {"large", "small"}
  for r in rows:
    assert set(r) == PHASE_FIELDS, r["name"]
    assert r["errors"] == {}, (r["name"], r["errors"])
    assert r["dmljax_s"] > 0 and r["native_s"] > 0, r["name"]
    assert 0 < r["paired_q1"] <= r["paired_ratio"] <= r["paired_q3"], r["name"]
    assert isinstance(r["dmljax_temp_bytes"], int) and isinstance(r["native_temp_bytes"], int), r["name"]
    assert r["target"] == (matrix.LARGE_TARGET if r["size"] == "large" else matrix.SMALL_TARGET)
    # The compile column beside every speed row: the program that row times, dmljax's and native's.
    assert r["compile_dmljax_s"] > 0 and r["compile_native_s"] > 0, r["name"]
    assert r["compile_ratio"] == pytest.approx(r["compile_dmljax_s"] / r["compile_native_s"]), r["name"]
  # A workload with a gradient has a grad row; one without has none.
  for w in report["workloads"]:
    phases = {r["phase"] for r in rows if r["name"] == w["name"]}
    assert phases == ({"forward", "grad"} if w["has_gradient"] else {"forward"}), w["name"]
  assert len(report["workloads"]) == len(matrix_rows.all_rows(short=True))


def test_compile_section_and_whole_programs(short: tuple[dict, Path]) -> None:
  report, _ = short
  assert [c["name"] for c in report["compile"]] == [w["name"] for w in report["workloads"]]
  for c in report["compile"]:
    assert c["dmljax_s"] > 0 and c["native_s"] > 0 and c["ratio"] > 0, c["name"]
  assert len(report["models"]) == 2
  assert any("MoE" in m["name"] for m in report["models"]) and any("decode" in m["name"] for m in report["models"])
  for m in report["models"]:
    assert m["dmljax_s"] > 0 and m["native_s"] > 0 and m["ratio"] > 0


def test_summary_counts_and_flags(short: tuple[dict, Path]) -> None:
  report, _ = short
  s = report["summary"]
  scored = [r for r in report["rows"] if r["operator"] != "A/A"]
  assert s["rows"] == len(scored) and 0 <= s["within"] <= s["rows"]
  assert sum(g["rows"] for g in s["groups"]) == len(scored)
  assert len(s["controls"]) == 4  # large and small A/A, forward and grad
  assert s["over_speed"] == [f"{r['name']} ({r['phase']})" for r in scored if r["paired_ratio"] > r["target"]]


def test_docs_section_is_valid_rst_and_replaces_only_the_marked_block(short: tuple[dict, Path], tmp_path: Path) -> None:
  docutils_core = pytest.importorskip("docutils.core")
  report, _ = short
  real = (Path(__file__).resolve().parents[1] / "docs" / "performance.rst").read_text()
  assert real.count(BEGIN) == 1 and real.count(END) == 1
  rst = tmp_path / "performance.rst"
  rst.write_text(real)
  saved = tmp_path / "matrix-cpu-short.json"
  saved.write_text(json.dumps(report))
  matrix.main(["--render", str(saved), "--docs", str(rst)])  # through the entry point, as a user rewrites it
  text = rst.read_text()
  before, after = real.split(BEGIN), text.split(BEGIN)
  assert before[0] == after[0] and before[1].split(END)[1] == after[1].split(END)[1]
  block = after[1].split(END)[0].split("\n", 1)[1]  # the generated lines between the markers' lines
  assert report["conditions"]["command"] in " ".join(block.split())  # paragraphs are wrapped
  assert saved.name in " ".join(block.split())
  overrides = {"halt_level": 2, "report_level": 2}  # warnings are errors, as sphinx-build -W
  docutils_core.publish_doctree(block, settings_overrides=overrides)


def test_the_full_matrix_is_as_wide_as_the_issue_asks() -> None:
  rows = matrix_rows.all_rows(short=False)
  by_key = {(r.operator, r.function, r.dtype, r.axis, r.size) for r in rows}
  for function, dtype, axis in itertools.product(matrix_rows.REDUCE_FUNCTIONS, matrix_rows.FLOATS, matrix_rows.AXES):
    assert ("reduce", function, dtype, axis, "large") in by_key, (function, dtype, axis)
  for function, axis in itertools.product(matrix_rows.REDUCE_FUNCTIONS, matrix_rows.AXES):
    if function not in matrix_rows.FLOAT_ONLY:
      assert ("reduce", function, "int32", axis, "large") in by_key
  for function, size in itertools.product(matrix_rows.REDUCE_FUNCTIONS, ("last", "per-row")):
    assert ("reduce", function, "f32", size, "small") in by_key
  for op, dtype in itertools.product(("top_k", "argmax", "argmin"), (*matrix_rows.FLOATS, "int32")):
    axes = ("last", "first") if op == "top_k" else tuple(matrix_rows.AXES)
    assert all((op, None, dtype, axis, "large") in by_key for axis in axes), (op, dtype)
  for dtype in (*matrix_rows.FLOATS, "int32"):
    assert {("gather_nd", None, dtype, a, "large") for a in matrix_rows.AXES} <= by_key
    assert {("one_hot", None, dtype, a, "large") for a in ("last", "first")} <= by_key
  names = [r.name for r in rows]
  for pattern in (
    r"^top_k f32 8x1000 k=40 \(decode\)$",
    r"^top_k f32 256x8 k=2 \(MoE\)$",
    r"^top_k f32 64x100 k=5 per",
  ):
    assert any(re.search(pattern, n) for n in names), pattern
  assert any(n.startswith("sampling sample f32 8x128256") for n in names)
  assert any(n.startswith("sampling top_p_mask f32 64x32000") for n in names)
  # JAX's input kinds the functional path takes as jnp does (widened sums, bool, complex, rank 0, size 0).
  for kind in ("SUM int8", "SUM bool", "AVERAGE int32", "MAX bool", "SUM c64", "MAX c64", "LOG_SUM_EXP c64"):
    assert any(n.startswith(f"reduce {kind} ") and n.endswith("(jnp's types)") for n in names), kind
  for kind in ("(rank 0)", "(size 0)"):
    assert sum(n.endswith(kind) for n in names) >= 2, kind
  for r in rows:
    assert r.native in r.workload.jax, r.name
    if r.size == "large" and r.operator not in ("one_hot", "sampling"):
      shape = matrix_rows.large_shape(r.dtype, short=False)
      assert (
        f" {shape[0]}x{shape[1]} " in r.name
        and np.dtype(matrix_rows.DTYPES[r.dtype]).itemsize * np.prod(shape) >= 4 << 20
      )
    # Only the integer, bool, complex and index outputs have no gradient row.
    floating = r.dtype in (*matrix_rows.FLOATS, "f64")
    differentiable = floating and r.operator in ("reduce", "top_k", "gather_nd", "A/A")
    differentiable = differentiable and not (r.function or "").startswith("ARG")
    assert r.workload.grad == differentiable or r.operator == "one_hot", r.name


def test_cli_options_parse() -> None:
  args = matrix.parse_args(["--only", "reduce", "--rounds", "3", "--out", "/tmp/x"])
  assert (args.only, args.rounds, args.repeats, str(args.out), args.short) == ("reduce", 3, 3, "/tmp/x", False)
  assert args.no_torch and args.no_onnx and args.no_eager and not args.evict
  assert matrix.parse_args(["--short"]).rounds == 2
  assert (matrix.parse_args([]).rounds, matrix.parse_args([]).compile_rounds, matrix.parse_args([]).cpus) == (
    11,
    3,
    None,
  )
  assert matrix.parse_args(["--cpus", "1,0"]).cpus == [0, 1]
  with pytest.raises(SystemExit):
    matrix.parse_args(["--cpus", "first"])
  with pytest.raises(SystemExit):
    matrix.parse_args(["--rounds", "0"])


def test_the_compiled_harness_takes_the_matrix_reduce_one_hot_and_gather_rows() -> None:
  from benchmarks.compiled import suite

  only = r" (f32|int8) "  # a sample of the rows (each case draws its full-size inputs once)
  found = suite.cases(only, matrix=True)
  expected = [
    r
    for r in matrix_rows.all_rows(short=False)
    if r.operator in suite.MATRIX_GROUPS and not r.x64 and re.search(only, r.name)
  ]
  assert {r.operator for r in expected} == set(suite.MATRIX_GROUPS)
  assert [c.name for c in found] == [r.name for r in expected]
  by_name = {c.name: c for c in found}
  for r in expected:
    case = by_name[r.name]
    assert list(case.programs) == ["dmljax", r.native]
    shape = case.inputs[0][0]
    if r.operator != "reduce":
      assert case.row is None
    else:
      reduced = int(np.prod(shape)) if r.axis == "all" else shape[0] if r.axis == "first" else shape[-1]
      assert case.row == reduced, r.name
