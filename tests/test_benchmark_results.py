"""The committed benchmark results are summaries a reviewer can read, and the reports are regenerated from them.

* every committed result is Markdown, JSON or text under 200 KB, and no JSON holds raw samples (they are written
  to ``benchmarks/results/raw``, which git ignores);
* a summary keeps every figure of its record: it reads back as the record without its samples;
* the speed matrix's Markdown and the section of ``docs/performance.rst`` are exactly what ``--render`` writes
  from the committed summary.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cpu import matrix
from benchmarks.harness import results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LIMIT = 200_000  # bytes


def _committed() -> list[Path]:
  return sorted(p for p in RESULTS.iterdir() if p.is_file() and p.suffix != ".png")  # charts are not committed


def _keys(value: object) -> set[str]:
  if isinstance(value, dict):
    return set(value) | {k for v in value.values() for k in _keys(v)}
  if isinstance(value, list):
    return {k for v in value for k in _keys(v)}
  return set()


@pytest.mark.parametrize("path", _committed(), ids=lambda p: p.name)
def test_a_committed_result_is_a_small_summary(path: Path) -> None:
  assert path.suffix in (".md", ".json", ".txt"), path.name
  assert path.stat().st_size < LIMIT, f"{path.name}: {path.stat().st_size} bytes"
  if path.suffix == ".json":
    assert "samples_s" not in _keys(results.load(path)), f"{path.name} holds raw samples"


def test_a_summary_reads_back_as_its_record_without_samples(tmp_path: Path) -> None:
  stats = {"median_s": 0.1 + 1e-17, "q1_s": 1 / 3, "runs": 7, "samples_s": [0.1, 0.2]}
  record = {
    "rows": [{"name": f"row {i}", "ratio": i / 7, "shape": [4, i], "errors": {}} for i in range(5)],
    "mixed": [{"a": 1}, {"b": 2}],
    "forward": {"dmljax": stats, "jnp.max": dict(stats, median_s=2.5)},
    "long": [{"text": "x" * 200}, {"text": "y"}],
    "nested": {"one": {"x": [1.5, float("inf")]}},
  }
  summary = results.write(record, tmp_path, "study")
  expected = json.loads(json.dumps(record))
  for s in expected["forward"].values():
    del s["samples_s"]
  assert summary == expected == results.load(tmp_path / "study.json")
  assert json.loads((tmp_path / "raw" / "study.json").read_text()) == json.loads(json.dumps(record))
  text = (tmp_path / "study.json").read_text()
  assert '"table": ["name", "ratio", "shape", "errors"]' in text and '"keyed": ["key", "median_s"' in text
  row = '["row 3", 0.42857142857142855, [4, 3], {}]'  # one row a line, its figures as measured
  assert any(line.strip().rstrip(",") == row for line in text.splitlines())


def test_the_matrix_tables_and_the_docs_section_come_from_the_committed_summary(tmp_path: Path) -> None:
  summary = tmp_path / "matrix-cpu.json"
  shutil.copy(RESULTS / "matrix-cpu.json", summary)
  docs = tmp_path / "performance.rst"
  real_docs = (ROOT / "docs" / "performance.rst").read_text()
  docs.write_text(real_docs)
  matrix.main(["--render", str(summary), "--docs", str(docs)])
  assert summary.with_suffix(".md").read_text() == (RESULTS / "matrix-cpu.md").read_text()
  # The docs name the summary and its tables by their paths in the repository: the copies' paths differ there only
  # (and so do the wrapped paragraphs' line breaks).
  rewritten = docs.read_text().replace(f"{tmp_path}/", "benchmarks/results/")
  assert rewritten.split() == real_docs.split()
