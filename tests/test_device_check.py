"""``benchmarks/device/check.sh``, the one command for a GPU or TPU, as a bare image runs it.

The check runs in fresh venvs of this Python, offline (``PIP_NO_INDEX``, no pip configuration, no find-links): one
with the setuptools ``python -m venv`` gives Python 3.11 (65.5, older than the build needs) and one with none
(Python 3.12's default). They see the suite's own packages (jax, numpy...) through a folder of links, never its
dmljax or setuptools, and each holds a decoy ``dmljax`` package that must not be the one imported. Nothing here
times anything.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import sysconfig

from benchmarks.device import check as device_check

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHECK = ROOT / "benchmarks" / "device" / "check.sh"
# What the linked folder leaves out of the suite's site-packages: what a bare venv lacks or must find in itself.
LEFT_OUT = ("setuptools", "pkg_resources", "_distutils_hack", "pip", "dmljax", "__editable__", "__pycache__")


def _offline_env(python: pathlib.Path) -> dict[str, str]:
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS" and not k.startswith(("PIP_", "PYTHON"))}
  return {**env, "PYTHON": str(python), "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull}


def _run(python: pathlib.Path, out: pathlib.Path, *options: str) -> tuple[subprocess.CompletedProcess[str], dict]:
  command = ["bash", str(CHECK), str(out), "--quiet", *options]
  done = subprocess.run(
    command, capture_output=True, text=True, timeout=600, check=False, env=_offline_env(python), cwd=out.parent
  )
  results_file = out / "results.json"
  log = (out / "log.txt").read_text() if (out / "log.txt").exists() else ""
  assert results_file.exists(), done.stdout + done.stderr + log
  return done, json.loads(results_file.read_text())


def _venv(folder: pathlib.Path, *, pip: bool = True, packages: bool = True) -> tuple[pathlib.Path, pathlib.Path]:
  """A fresh venv of this Python (its interpreter and site-packages); ``packages``: the suite's, linked in."""
  subprocess.run([sys.executable, "-m", "venv", *([] if pip else ["--without-pip"]), str(folder)], check=True)
  python = folder / "bin" / "python"
  site = pathlib.Path(
    subprocess.run(
      [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
      capture_output=True,
      text=True,
      check=True,
    ).stdout.strip()
  )
  if packages:
    linked = folder.parent / f"{folder.name}-packages"
    linked.mkdir()
    ours = pathlib.Path(sysconfig.get_paths()["purelib"])
    for entry in ours.iterdir():
      if not entry.name.startswith(LEFT_OUT) and entry.suffix != ".pth":
        (linked / entry.name).symlink_to(entry)
    (site / "suite-packages.pth").write_text(f"{linked}\n")
    decoy = site / "dmljax"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("__version__ = 'decoy'\n")
  return python, site


def _setuptools(python: pathlib.Path) -> str | None:
  found = subprocess.run(
    [str(python), "-c", "import importlib.metadata as m; print(m.version('setuptools'))"],
    capture_output=True,
    text=True,
    check=False,
  )
  return found.stdout.strip() if found.returncode == 0 else None


def test_a_bare_venv_copies_the_checkout_and_the_short_run_is_exact(tmp_path: pathlib.Path) -> None:
  python, site = _venv(tmp_path / "venv")
  # Python 3.11's venv: setuptools 65.5. From 3.12 a venv has none: the old one is then only declared.
  old = _setuptools(python)
  declared = old is None
  if declared:
    info = site / "setuptools-65.5.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: setuptools\nVersion: 65.5.0\n")
    old = "65.5.0"
  assert device_check._version(old) < device_check._least_setuptools()

  # Setuptools too old for the build: the install-only run copies dmljax, says why and what to run, exits 0.
  done, results = _run(python, tmp_path / "old", "--install-only")
  assert done.returncode == 0 and results["verdict"] == "installed", done.stdout + done.stderr
  assert [s["status"] for s in results["steps"]] == ["ok", "ok", "ok"], results["steps"]
  line = results["install"]["line"]
  assert results["install"]["method"] == "copy" and f"setuptools is {old}" in line and "the build needs >= 77" in line
  assert f"{python} -m pip install 'setuptools>=77'" in line and line in done.stdout and "\n" not in line
  assert results["dmljax"]["version"] != "decoy" and results["dmljax"]["file"].endswith("/site/dmljax/__init__.py")

  # No setuptools (Python 3.12's venv): the whole short run, on the copy, exact, the kernel's absence reported.
  if not declared:
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "setuptools"], check=True, capture_output=True)
  for info in site.glob("setuptools-*.dist-info"):
    for file in info.iterdir():
      file.unlink()
    info.rmdir()
  assert _setuptools(python) is None
  out = tmp_path / "none"
  done, results = _run(python, out)
  log = (out / "log.txt").read_text()
  assert done.returncode == 0, done.stdout + done.stderr + log
  assert sorted(p.name for p in out.iterdir()) == ["log.txt", "report.md", "results.json"]
  assert results["mode"] == "short" and results["verdict"] == "exact" and results["exit_status"] == 0
  statuses = [(s["name"], s["status"]) for s in results["steps"]]
  assert statuses == [
    ("environment", "ok"),
    ("install", "ok"),
    ("imported dmljax", "ok"),
    *((f"selfcheck {section}", "ok") for section in device_check.SECTIONS),
    ("benchmarks", "ok"),
  ], results["steps"]
  assert "this Python has no setuptools" in results["install"]["line"] and results["install"]["method"] == "copy"
  imported = results["dmljax"]
  assert imported["version"] != "decoy" and imported["file"].endswith("/site/dmljax/__init__.py")
  assert imported["file"] in done.stdout and f"copied from {ROOT}" in done.stdout
  assert not imported["cpu_kernel"] and "no setuptools" in imported["cpu_kernel_status"]
  assert results["kernel_line"].startswith("CPU kernel: not available") and "accelerators do not use" in done.stdout
  assert results["environment"]["backend"] == "cpu" and "setuptools" not in results["environment"]["packages"]
  for section in device_check.SECTIONS:
    report = results["selfcheck"][section]["report"]
    assert report["counts"]["exact"] > 0 and report["counts"]["WRONG"] == report["counts"]["ERROR"] == 0, section
  cases = results["benchmarks"]["cases"]
  assert {c["name"].split()[0] for c in cases} >= {"top_k", "argmax", "sum", "max", "logsumexp", "sample"}
  assert not [c for c in cases if c.get("error") or c.get("errors") or c.get("wrong") or c.get("skipped")], cases
  strategies = next(c for c in cases if c["name"].endswith("strategies"))
  assert "cpu_kernel" not in strategies["seconds"] and "no setuptools" in strategies["absent"]["cpu_kernel"]
  report_md = (out / "report.md").read_text()
  for heading in ("## Environment", "## Install", "## Self-check: sampling", "## Benchmarks"):
    assert heading in report_md
  assert results["kernel_line"] in report_md and imported["file"] in report_md
  assert "verdict: exact (exit status 0)" in done.stdout


def test_a_failed_step_is_a_non_zero_exit(tmp_path: pathlib.Path) -> None:
  python, _ = _venv(tmp_path / "venv", pip=False, packages=False)  # no jax, no pip
  done, results = _run(python, tmp_path / "out", "--install-only")
  assert done.returncode == 2 and results["verdict"] == "incomplete", done.stdout + done.stderr
  assert [(s["name"], s["status"]) for s in results["steps"]] == [
    ("environment", "failed"),
    ("install", "ok"),
    ("imported dmljax", "failed"),
  ]
  assert "this Python has no pip" in results["install"]["line"]
  assert "FAILED: environment: failed (exit status 1)" in done.stdout
  assert "ModuleNotFoundError: No module named 'jax'" in done.stdout


def test_pip_s_own_error_is_the_install_line() -> None:
  log = """Processing ./source
  error: subprocess-exited-with-error
  × Preparing metadata (pyproject.toml) did not run successfully.
      ModuleNotFoundError: No module named 'setuptools.command.bdist_wheel'
  error: metadata-generation-failed
"""
  assert device_check._pip_error(log) == "ModuleNotFoundError: No module named 'setuptools.command.bdist_wheel'"
  assert device_check._pip_error("") == "no output"
  assert device_check._least_setuptools() == (77,)


def test_a_wrong_or_failed_cell_is_the_verdict() -> None:
  def report(status: str) -> dict[str, object]:
    cell = {"status": status, "detail": "why"}
    return {"sections": [{"rows": {"float32": {"cells": {"top_k_mask": cell, "sample": {"status": "exact"}}}}}]}

  assert device_check._selfcheck_verdict(report("exact"))["verdict"] == "exact"
  assert device_check._selfcheck_verdict(report("n/a"))["verdict"] == "exact"
  assert device_check._selfcheck_verdict(report("WRONG"))["wrong"] == ["float32 / top_k_mask: why"]
  assert device_check._selfcheck_verdict(report("ERROR"))["errors"] == ["float32 / top_k_mask: why"]
  assert device_check._selfcheck_verdict(None)["verdict"] == "none"

  def verdict(install: str, bench: str, section: str = "exact", case: dict | None = None) -> tuple[str, int]:
    named = (("install", install), ("benchmarks", bench))
    steps = [{"name": name, "status": status, "detail": ""} for name, status in named]
    results = {
      "mode": "short",
      "steps": steps,
      "selfcheck": {"selection": {"step": "ok", "report": report(section)}},
      "benchmarks": {"cases": [case or {"name": "top_k"}]},
    }
    device_check._verdict(results)
    return results["verdict"], results["exit_status"]

  assert verdict("ok", "ok") == ("exact", 0)
  assert verdict("skipped", "ok") == ("exact", 0)  # --no-install
  assert verdict("failed", "ok") == ("incomplete", 2)
  assert verdict("ok", "timed out") == ("incomplete", 2)
  assert verdict("ok", "ok", case={"name": "top_k", "error": "RuntimeError"}) == ("incomplete", 2)
  assert verdict("failed", "ok", section="WRONG") == ("wrong", 1)
  assert verdict("ok", "ok", case={"name": "top_k", "wrong": "off by one"}) == ("wrong", 1)
