"""Smoke run of the benchmark (``python -m benchmarks.cpu.run --quick``) on two workloads, and checks of every
framework adapter on every quick workload: it runs, its JSON and Markdown have the documented shape, the
peers run at their defaults, a contender's error is reported, and a broken adapter fails here. Timings are
never asserted (they belong to the benchmark).

PyTorch is not in the test extra (its default wheel is a multi-GB CUDA build): its checks run where it is
installed. ONNX Runtime and matplotlib are in the test extra.
"""

import importlib.util
import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.cpu import run
from benchmarks.cpu.workloads import all_workloads
from benchmarks.harness import results
from benchmarks.harness.adapters_jax import value
from benchmarks.harness.workload import Workload, normal
from benchmarks.peers import adapters_onnx, adapters_torch

_STATS = {"median_s", "q1_s", "q3_s", "min_s", "max_s", "runs", "calls_per_run", "samples_s", "family"}
_HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
  pytest.importorskip("onnxruntime")
  pytest.importorskip("matplotlib")
  out = tmp_path_factory.mktemp("bench")
  only = r"^top_k f32 \S+ k=1$|SUM \S+ axis 1"
  run.main(["--quick", "--quiet", "--no-eager", "--only", only, "--out", str(out)])
  return json.loads((out / "raw" / f"{run.device_name()}-quick.json").read_text()), out  # with every sample


def test_the_committed_file_is_the_summary_of_the_raw_record(report: tuple[dict, Path]) -> None:
  data, out = report
  assert results.load(out / f"{run.device_name()}-quick.json") == results.summary(data)


def test_quick_run_writes_json_markdown_and_chart(report: tuple[dict, Path]) -> None:
  data, out = report
  assert data["schema_version"] == run.SCHEMA_VERSION
  assert data["settings"]["quick"] is True
  assert data["settings"]["repeats"] >= 10
  assert {"jax", "jaxlib", "numpy", "python", "torch", "onnxruntime"} <= set(data["environment"]["versions"])
  assert [w["name"] for w in data["workloads"]] == ["top_k f32 4x2048 k=1", "reduce SUM 256x512 axis 1"]
  markdown = (out / f"{run.device_name()}-quick.md").read_text()
  for w in data["workloads"]:
    assert f"| {w['name']} |" in markdown
  assert (out / f"{run.device_name()}-quick.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_contender_runs_forward_and_backward(report: tuple[dict, Path]) -> None:
  data, _ = report
  for w in data["workloads"]:
    assert w["errors"] == {}, w["errors"]  # a broken adapter (JAX, PyTorch, ONNX Runtime) fails here
    assert w["target"] == "native"
    forward_families = {s["family"] for s in w["forward"].values()}
    assert "onnxruntime" in forward_families
    if _HAS_TORCH:
      assert "torch" in forward_families and "torch" in {s["family"] for s in w["fwd_bwd"].values()}
    for phase in ("forward", "fwd_bwd"):
      families = {s["family"] for s in w[phase].values()}
      assert "dmljax" in families and families & {"jax", "jax-approx"}, (w["name"], phase)
      for stats in w[phase].values():
        assert set(stats) == _STATS
        assert stats["runs"] >= 10 and len(stats["samples_s"]) == stats["runs"]
        assert 0 < stats["min_s"] <= stats["q1_s"] <= stats["median_s"] <= stats["q3_s"] <= stats["max_s"]
      ratio = w["ratios"][phase]["jax"]
      assert ratio["ratio"] > 0 and 0 < ratio["paired_q1"] <= ratio["paired_ratio"] <= ratio["paired_q3"]
    assert w["contenders"]["dmljax"]["compile_s"] > 0
    # Trace + compile from empty caches, for dmljax and every native form, with target 5 scored on them.
    times = w["trace_compile"]
    assert "dmljax" in times and set(times) > {"dmljax"}
    assert all(len(t["samples_s"]) == data["settings"]["compile_rounds"] and t["median_s"] > 0 for t in times.values())
  compile_target = data["summary"]["target5_trace_compile_within_2"]
  assert compile_target["of"] == len(data["workloads"]) and all(r["ratio"] > 0 for r in compile_target["rows"])


def test_native_forms_are_labelled_by_what_they_compute(report: tuple[dict, Path]) -> None:
  data, out = report
  top_k, reduction = data["workloads"]
  assert top_k["contenders"]["jax.lax.top_k"]["semantics"] == "approximate"
  assert "-0.0" in top_k["contenders"]["jax.lax.top_k"]["approx_reason"]
  assert top_k["contenders"]["jnp.argmax+take_along_axis"]["semantics"] == "exact"
  assert reduction["contenders"]["jnp.sum"]["same_compiled_program_as_dmljax"] is True
  markdown = (out / f"{run.device_name()}-quick.md").read_text()
  assert "## Why a native form is marked ≈" in markdown and "`jax.lax.top_k (top_k)`" in markdown
  assert "(jnp.sum ≡)" in markdown


def test_peers_run_at_their_defaults_and_the_report_says_so(report: tuple[dict, Path]) -> None:
  data, out = report
  # Nothing in the benchmark sets thread variables: whatever is there came from the caller, and is recorded.
  recorded = data["environment"]["thread_settings"]["torch"]["env"]
  assert recorded.get("OMP_WAIT_POLICY") == os.environ.get("OMP_WAIT_POLICY")
  ort = data["environment"]["thread_settings"]["onnxruntime"]
  assert ort["installed"] and ort["allow_spinning"].startswith("default") and ort["intra_op_num_threads"] == 0
  if _HAS_TORCH:
    import torch

    assert data["environment"]["thread_settings"]["torch"]["intra_op_threads"] == torch.get_num_threads()
  assert "Every framework runs at its defaults" in (out / f"{run.device_name()}-quick.md").read_text()


def test_reduction_bandwidth_and_targets_are_reported(report: tuple[dict, Path]) -> None:
  data, _ = report
  copy = data["copy_bandwidth"]
  assert copy["bytes_per_s"] > 0 and copy["method"] in copy["per_method_bytes_per_s"]
  (reduction,) = [w for w in data["workloads"] if w["reduction_bytes"]]
  assert reduction["bandwidth_fraction"]["dmljax"] > 0
  summary = data["summary"]
  assert summary["target1_native_ratio_le_1.05"]["of"] == 4  # two workloads, forward and forward+backward
  assert summary["target3_bandwidth_ge_0.7"]["of"] == 1
  for rows in summary.values():
    assert all(isinstance(row["holds"], bool) for row in rows["rows"])


def test_a_failing_contender_is_reported_not_swallowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  def broken(x: jax.Array) -> jax.Array:
    raise ValueError("this form is broken on purpose")

  tiny = Workload(
    name="broken top_k 4x16",
    group="top_k",
    make=normal((4, 16)),
    dmljax=lambda x: jnp.sort(x, axis=-1)[:, :2],
    jax={"broken form": broken, "jnp.sort": lambda x: jnp.sort(x, axis=-1)[:, :2]},
  )
  monkeypatch.setattr(run, "all_workloads", lambda quick: [tiny])
  data = run.main(["--quick", "--quiet", "--no-eager", "--no-torch", "--no-onnx", "--no-chart", "--out", str(tmp_path)])
  (w,) = data["workloads"]
  assert w["errors"] == {"broken form": "ValueError: this form is broken on purpose"}
  assert w["failed_families"] == ["jax"]
  markdown = (tmp_path / f"{run.device_name()}-quick.md").read_text()
  assert "## Contenders that could not run" in markdown and "broken on purpose" in markdown


@pytest.mark.parametrize("w", all_workloads(True), ids=lambda w: w.name)
def test_adapters_build_every_quick_workload(w: Workload) -> None:
  """Each PyTorch form and ONNX model of every quick workload runs and returns dmljax's output shape."""
  ort = adapters_onnx.load()
  torch = adapters_torch.load()
  if ort is None and torch is None:
    pytest.skip("neither onnxruntime nor torch is installed")
  inputs = w.make(np.random.default_rng(0))
  expected = value(jax.eval_shape(w.dmljax, *inputs), w.value_output).shape
  if ort is not None:
    for name, node in w.onnx.items():
      if np.dtype(inputs[0].dtype).name == "bfloat16" and node.op_type == "TopK":
        continue  # ONNX Runtime has no bfloat16 TopK kernel; the report lists that error
      c = adapters_onnx.contender(ort, f"onnxruntime {name}", node, [inputs])
      c.forward(0)
      prepared = node.prepare(inputs) if node.prepare else inputs
      session = ort.InferenceSession(adapters_onnx.model_bytes(node, prepared), providers=["CPUExecutionProvider"])
      out = session.run(None, {f"in{j}": a for j, a in enumerate(prepared)})[0]
      assert out.size == int(np.prod(expected)), (name, out.shape, expected)
  if torch is not None:
    cts = None
    if w.grad:
      cts = [np.ones(expected, np.float32).astype(np.dtype(inputs[0].dtype))]
    for name, fn in w.torch.items():
      c = adapters_torch.contender(torch, name, fn, [inputs], cts, w.value_output)
      c.forward(0)
      if c.fwd_bwd is not None:
        c.fwd_bwd(0)


def test_cli_options_parse() -> None:
  args = run.parse_args(["--quick", "--only", "top_k", "--repeats", "12", "--label", "x"])
  assert (args.quick, args.only, args.repeats, args.label, args.min_sample) == (True, "top_k", 12, "x", 0.0)
  with pytest.raises(SystemExit):
    run.parse_args(["--repeats", "3"])
