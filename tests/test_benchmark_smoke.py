"""Smoke run of the benchmark (``python -m benchmarks.run --quick``) on two workloads: it runs, and its
JSON and Markdown have the documented shape. Timings are never asserted (they belong to the benchmark).
"""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import run

_STATS = {"median_s", "q1_s", "q3_s", "min_s", "max_s", "runs", "calls_per_run", "samples_s", "family"}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
  out = tmp_path_factory.mktemp("bench")
  run.main(["--quick", "--quiet", "--no-chart", "--only", r"top_k f32 \S+ k=1$|SUM \S+ axis 1", "--out", str(out)])
  return json.loads((out / f"{run.device_name()}-quick.json").read_text()), out


def test_quick_run_writes_json_and_markdown(report: tuple[dict, Path]) -> None:
  data, out = report
  assert data["schema_version"] == run.SCHEMA_VERSION
  assert data["settings"]["quick"] is True
  assert data["settings"]["repeats"] >= 10
  assert {"jax", "jaxlib", "numpy", "python", "torch", "onnxruntime"} <= set(data["environment"]["versions"])
  assert [w["name"] for w in data["workloads"]] == ["top_k f32 4x2048 k=1", "reduce SUM 256x512 axis 1"]
  markdown = (out / f"{run.device_name()}-quick.md").read_text()
  for w in data["workloads"]:
    assert f"| {w['name']} |" in markdown


def test_every_workload_times_dmljax_and_native_jax_forward_and_backward(report: tuple[dict, Path]) -> None:
  data, _ = report
  for w in data["workloads"]:
    assert w["target"] == "native"
    for phase in ("forward", "fwd_bwd"):
      families = {s["family"] for s in w[phase].values()}
      assert {"dmljax", "jax"} <= families, (w["name"], phase)
      for stats in w[phase].values():
        assert set(stats) == _STATS
        assert stats["runs"] >= 10 and len(stats["samples_s"]) == stats["runs"]
        assert 0 < stats["min_s"] <= stats["q1_s"] <= stats["median_s"] <= stats["q3_s"] <= stats["max_s"]
      ratio = w["ratios"][phase]["jax"]
      assert ratio["ratio"] > 0 and 0 < ratio["paired_q1"] <= ratio["paired_ratio"] <= ratio["paired_q3"]
    assert w["contenders"]["dmljax"]["compile_s"] > 0
    assert not {k: v for k, v in w["errors"].items() if "dmljax" in k or k.startswith("j")}


def test_reduction_bandwidth_and_targets_are_reported(report: tuple[dict, Path]) -> None:
  data, _ = report
  copy = data["copy_bandwidth"]
  assert copy["bytes_per_s"] > 0 and copy["method"] in copy["per_method_bytes_per_s"]
  (reduction,) = [w for w in data["workloads"] if w["reduction_bytes"]]
  assert reduction["bandwidth_fraction"]["dmljax"] > 0
  # The sum's compiled program is jnp.sum's: the benchmark says so.
  assert reduction["contenders"]["jnp.sum"]["same_compiled_program_as_dmljax"] is True
  summary = data["summary"]
  assert summary["target1_native_ratio_le_1.05"]["of"] == 4
  assert summary["target3_bandwidth_ge_0.7"]["of"] == 1
  for rows in summary.values():
    assert all(isinstance(row["holds"], bool) for row in rows["rows"])
