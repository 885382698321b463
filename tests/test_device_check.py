"""``benchmarks/device/check.sh``, the one command for a GPU or TPU, in the short mode it takes on a CPU.

The run imports dmljax from the checkout (``--no-install``: the install builds the C++ kernel, a minute of its own);
nothing here times anything.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from benchmarks.device import check as device_check

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_short_run_writes_its_tables_and_exits_0(tmp_path: pathlib.Path) -> None:
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["PYTHON"] = sys.executable
  out = tmp_path / "out"
  command = ["bash", str(ROOT / "benchmarks" / "device" / "check.sh"), str(out), "--no-install", "--quiet"]
  done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, env=env, cwd=tmp_path)
  log = (out / "log.txt").read_text() if (out / "log.txt").exists() else ""
  assert done.returncode == 0, done.stdout + done.stderr + log
  assert sorted(p.name for p in out.iterdir()) == ["log.txt", "report.md", "results.json"]
  results = json.loads((out / "results.json").read_text())
  assert results["mode"] == "short" and results["verdict"] == "exact" and results["exit_status"] == 0
  assert [s["status"] for s in results["steps"]] == ["ok", "skipped", "ok", "ok", "ok", "ok"], results["steps"]
  assert results["environment"]["backend"] == "cpu"
  for section in device_check.SECTIONS:
    report = results["selfcheck"][section]["report"]
    assert report["counts"]["exact"] > 0 and report["counts"]["WRONG"] == report["counts"]["ERROR"] == 0, section
  cases = results["benchmarks"]["cases"]
  assert {c["name"].split()[0] for c in cases} >= {"top_k", "argmax", "sum", "max", "logsumexp", "sample"}
  assert not [c for c in cases if c.get("error") or c.get("errors") or c.get("wrong") or c.get("skipped")], cases
  report_md = (out / "report.md").read_text()
  for heading in ("## Environment", "## Install", "## Self-check: sampling", "## Benchmarks"):
    assert heading in report_md
  assert "verdict: exact (exit status 0)" in done.stdout


def test_a_wrong_or_failed_cell_is_the_verdict() -> None:
  def report(status: str) -> dict[str, object]:
    cell = {"status": status, "detail": "why"}
    return {"sections": [{"rows": {"float32": {"cells": {"top_k_mask": cell, "sample": {"status": "exact"}}}}}]}

  assert device_check._selfcheck_verdict(report("exact"))["verdict"] == "exact"
  assert device_check._selfcheck_verdict(report("n/a"))["verdict"] == "exact"
  assert device_check._selfcheck_verdict(report("WRONG"))["wrong"] == ["float32 / top_k_mask: why"]
  assert device_check._selfcheck_verdict(report("ERROR"))["errors"] == ["float32 / top_k_mask: why"]
  assert device_check._selfcheck_verdict(None)["verdict"] == "none"
