"""benchmarks/compiled/pod.py on the smallest slice (16 chips of a TPU v5e), compiled without the hardware.

The script compiles the sharded decode top-k and argmax workloads for ``v5e:4x4`` and writes its report; the
tests read the report's JSON: dmljax's collectives hold at most k (top_k) or one (argmax) candidate per shard
for every row, and its argmax is estimated no slower than ``jnp.argmax``. Skipped, with the reason, where
libtpu is missing (the normal test venv); ``.ci/run`` runs it in ``.venv-aot``. Nothing runs on a device.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.compiled import availability

TPU_PROBLEM = availability.problem("tpu")
pytestmark = pytest.mark.skipif(TPU_PROBLEM is not None, reason=f"no TPU compile: {TPU_PROBLEM}")

SLICE = "v5e:4x4"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
  from benchmarks.compiled import pod as pod_compiled

  out = tmp_path_factory.mktemp("pod")
  assert pod_compiled.main(["--slices", SLICE, "--only", "top_k|argmax", "--out", str(out)]) == 0
  data = json.loads((out / f"{pod_compiled.NAME}.json").read_text())
  data["markdown"] = (out / f"{pod_compiled.NAME}.md").read_text()
  return data


def _rows(report: dict[str, Any], workload: str, program: str) -> list[dict[str, Any]]:
  found = [r for r in report["rows"] if r["workload"].startswith(workload) and r["program"] == program]
  assert {r["axes"] for r in found} == {"automatic", "explicit"}, found
  return found


def test_every_table_is_labelled_compiled_not_run(report: dict[str, Any]) -> None:
  assert report["label"] == "compiled, not run"
  headings = [line for line in report["markdown"].splitlines() if line.startswith("#")]
  assert len(headings) >= 4, headings
  assert all("compiled, not run" in line for line in headings), headings
  assert report["slices"][SLICE]["chips"] == 16


@pytest.mark.parametrize(("workload", "k"), [("decode top_k", 50), ("argmax,", 1), ("argmax(logits / T)", 1)])
def test_dmljax_moves_only_candidates(report: dict[str, Any], workload: str, k: int) -> None:
  """The collectives hold at most k candidates (value or key, and index: 8 bytes) of each of 16 shards per row."""
  shard = 512 * 262144 * 4 // 16
  for row in _rows(report, workload, "dmljax"):
    assert "error" not in row, row
    assert row["bound_bytes"] == 16 * 512 * k * 8, row
    assert 0 < row["result_bytes"] <= row["bound_bytes"] < shard, row
    assert row["received_bytes"] <= 2 * row["bound_bytes"], row


@pytest.mark.parametrize("workload", ["argmax,", "argmax(logits / T)"])
def test_sharded_argmax_is_no_slower_than_jnp_argmax(report: dict[str, Any], workload: str) -> None:
  from benchmarks.compiled import pod as pod_compiled

  natives = {r["axes"]: r for r in _rows(report, workload, "jnp.argmax")}
  for row in _rows(report, workload, "dmljax"):
    native = natives[row["axes"]]
    assert row["estimate_us"] is not None and native["estimate_us"] is not None, (row, native)
    assert row["estimate_us"] <= native["estimate_us"] * (1 + pod_compiled.EQUAL), (row, native)


def test_native_top_k_is_refused_on_explicit_axes(report: dict[str, Any]) -> None:
  rows = {r["axes"]: r for r in _rows(report, "decode top_k", "jax.lax.top_k")}
  assert "ShardingTypeError" in rows["explicit"]["error"], rows
  assert "error" not in rows["automatic"], rows


def test_automatic_top_k_is_xla_s_partitioned_top_k_on_exact_keys(report: dict[str, Any]) -> None:
  """On automatic axes dmljax's keys go to XLA's own TopK, which XLA partitions as it does native top-k's: where no
  selected value must be read from the input (no zero, NaN or subnormal selected), within 1.1x the estimate of native
  top_k whose indices are used, and only candidates cross chips; the read (a conditional) is estimated apart."""
  from benchmarks.compiled import pod as pod_compiled

  native = {r["axes"]: r for r in _rows(report, "decode top_k", pod_compiled.INDICES_USED)}["automatic"]
  row = {r["axes"]: r for r in _rows(report, "decode top_k", "dmljax")}["automatic"]
  assert row["conditional"] and row["baseline"] == pod_compiled.INDICES_USED, row
  assert row["estimate_us"] <= 1.1 * native["estimate_us"], (row, native)
  assert row["result_bytes"] <= row["bound_bytes"], row
  assert row["work_estimate_us"] is not None and row["work_estimate_us"] > row["estimate_us"], row
