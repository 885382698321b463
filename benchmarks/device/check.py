"""One command for a GPU or TPU machine: install dmljax, run the self-check and the accelerator benchmarks.

Run it as ``benchmarks/device/check.sh OUTDIR`` (or ``python -m benchmarks.device.check OUTDIR`` from the
repository root). Steps, each in a process of its own with a hard timeout, a failed one recorded and the rest run:

1. ``environment``: Python, jax, jaxlib and their plugins, the devices, PyTorch and CUDA, ``nvidia-smi -L``;
2. ``install``: ``pip install --no-deps --no-build-isolation --no-index`` of a copy of this checkout into a
   temporary folder (nothing fetched; the C++ CPU kernel built for this Python, or one line saying why not), which
   the later steps import; where it fails they import the checkout itself, and say so;
3. ``selfcheck <section>``: ``python -m dmljax.selfcheck --section <section>`` for each of its tables;
4. ``benchmarks``: :mod:`benchmarks.device.bench`: top_k, argmax, REDUCE and sampling against native JAX (and
   ``torch.topk`` where PyTorch has CUDA), each result checked against the self-check's reference.

The whole run keeps to ``--budget`` seconds (450 by default: under 8 minutes on one H100 with the install); each
step's timeout is what is left of it less what the later steps need at least. With ``--short`` (the default when
JAX's backend is the CPU) the self-check runs on float32 only and the benchmarks on small sizes: seconds to a
minute. OUTDIR receives three files: ``report.md`` (every table), ``results.json`` (the raw results of every step)
and ``log.txt`` (every step's whole output).

Exit status: 0 when every checked result is exact; 1 when a self-check cell is WRONG or ERROR or a benchmark result
is wrong; 2 when nothing is wrong but a self-check section gave no verdict (it crashed or ran out of time). A
failed install, environment or benchmark step is reported, not fatal.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import ROOT

PROGRESS = re.compile(r"^(  .+ / .+|selection|reduce|sampling): [0-9.]+ s$")
SECTIONS = ("selection", "reduce", "sampling")
# What ``pip install .`` reads: the package, the kernel's source and the metadata's files.
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "MANIFEST.in", "csrc", "dmljax")
SHORT_TYPES = ("float32",)
# (largest timeout, least time kept for it) of every step, in seconds, in the order they run.
LIMITS = {
  "environment": (60, 15),
  "install": (150, 45),
  "installed dmljax": (60, 5),
  "selfcheck selection": (200, 90),
  "selfcheck reduce": (90, 35),
  "selfcheck sampling": (120, 45),
  "benchmarks": (200, 60),
}

ENVIRONMENT = r"""
import importlib.metadata as m, json, os, platform, subprocess, sys
out = {"python": sys.version.split()[0], "executable": sys.executable, "machine": platform.machine(),
       "cores": os.cpu_count(), "packages": {}}
for name in ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-cuda12-plugin", "jax-cuda12-pjrt",
             "libtpu", "numpy", "ml_dtypes", "torch", "setuptools", "pip", "pytest"):
  try:
    out["packages"][name] = m.version(name)
  except m.PackageNotFoundError:
    pass
print("\n".join(f"{k}: {v}" for k, v in out["packages"].items()), flush=True)
gpu = False
try:
  out["nvidia-smi"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout.strip()
  gpu = bool(out["nvidia-smi"])
  print(out["nvidia-smi"], flush=True)
except Exception as e:
  out["nvidia-smi"] = f"{type(e).__name__}: {e}"
out["torch_cuda"] = False
if gpu and "torch" in out["packages"]:  # no NVIDIA GPU: PyTorch's CUDA is not asked (importing it takes seconds)
  try:
    import torch
    out["torch_cuda"] = bool(torch.cuda.is_available())
    out["torch_device"] = torch.cuda.get_device_name(0) if out["torch_cuda"] else None
  except Exception as e:
    out["torch_error"] = f"{type(e).__name__}: {e}"
import jax
out["backend"] = jax.default_backend()
devices = jax.devices()
out["devices"] = [f"{d.platform}:{d.id} {d.device_kind}" for d in devices]
out["device_kind"] = devices[0].device_kind
out["platform_version"] = str(getattr(getattr(devices[0], "client", None), "platform_version", ""))
print(json.dumps(out, indent=1), flush=True)
with open(sys.argv[1], "w") as f:
  json.dump(out, f, indent=1)
"""

KERNEL = r"""
import json, sys
import dmljax
from dmljax._src import cpu_kernel_library

out = {"file": dmljax.__file__, "version": dmljax.__version__, "cpu_kernel": bool(dmljax.cpu_kernel_available())}
status = getattr(cpu_kernel_library, "status", None)
out["cpu_kernel_status"] = status() if status else None
print(json.dumps(out), flush=True)
with open(sys.argv[1], "w") as f:
  json.dump(out, f)
"""


class Runner:
  """Runs the steps: each in its own process group, its output appended to the log, within the run's budget."""

  def __init__(self, budget: float, log: Path, quiet: bool) -> None:
    self.start, self.budget, self.log, self.quiet = time.monotonic(), budget, log, quiet
    self.steps: list[dict[str, Any]] = []
    log.write_text("")

  def timeout(self, name: str) -> float:
    names = list(LIMITS)
    later = sum(LIMITS[n][1] for n in names[names.index(name) + 1 :]) if name in LIMITS else 0
    left = self.budget - (time.monotonic() - self.start) - later
    return max(5.0, min(LIMITS.get(name, (60, 0))[0], left))

  def say(self, text: str) -> None:
    if not self.quiet:
      print(text, flush=True)

  def _append(self, text: str) -> None:
    with open(self.log, "a", encoding="utf-8") as log:
      log.write(text)

  def run(self, name: str, command: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[dict[str, Any], str]:
    """Runs one step; returns its record and its whole output."""
    timeout = self.timeout(name)
    shown = " ".join(a if len(a) < 200 else "<script: see benchmarks/device/check.py>" for a in command)
    self._append(f"\n===== {name} (timeout {timeout:.0f} s): {shown}\n")
    begin = self.log.stat().st_size
    started = time.monotonic()
    code = None
    with open(self.log, "ab") as log:
      try:
        process = subprocess.Popen(
          list(command), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
      except OSError as error:
        status, detail = "failed", f"could not start: {error}"
      else:
        try:
          code = process.wait(timeout=timeout)
          status, detail = ("ok", "") if code == 0 else ("failed", f"exit status {code}")
        except subprocess.TimeoutExpired:
          os.killpg(process.pid, signal.SIGKILL)  # the step's own process group: it and whatever it started
          process.wait()
          status, detail = "timed out", f"stopped after {timeout:.0f} s"
    seconds = time.monotonic() - started
    with open(self.log, "rb") as log:
      log.seek(begin)
      output = log.read().decode("utf-8", errors="replace")
    self._append(f"===== {name}: {status} {detail} ({seconds:.1f} s)\n")
    step = {"name": name, "status": status, "seconds": round(seconds, 1), "returncode": code, "detail": detail}
    if status != "ok":
      step["tail"] = "\n".join(output.rstrip().splitlines()[-12:])[-2000:]  # the error, for the summary
    self.steps.append(step)
    self.say(f"[{time.monotonic() - self.start:5.0f} s] {name}: {status}{' (' + detail + ')' if detail else ''}")
    return step, output

  def skip(self, name: str, why: str) -> None:
    self.steps.append({"name": name, "status": "skipped", "seconds": 0.0, "returncode": None, "detail": why})
    self.say(f"[{time.monotonic() - self.start:5.0f} s] {name}: skipped ({why})")


def _read_json(path: Path) -> Any:
  try:
    return json.loads(path.read_text())
  except (OSError, ValueError):
    return None


def _kernel_line(install_log: str, kernel: dict[str, Any] | None, python: str) -> str:
  if kernel is None:
    return "CPU kernel: unknown (the installed dmljax did not import)"
  if kernel.get("cpu_kernel"):
    return f"CPU kernel: built for Python {python} and in use"
  why = [line.strip() for line in install_log.splitlines() if line.strip().startswith("dmljax:")]
  because = why[-1] if why else (kernel.get("cpu_kernel_status") or "no reason given")
  return f"CPU kernel: not available ({because}); top_k on CPU runs dmljax's XLA strategies, accelerators unaffected"


def _install(runner: Runner, env: dict[str, str], work: Path) -> tuple[Path | None, dict[str, Any]]:
  """Installs the checkout into ``work/site``; returns the folder (None where the install failed) and a record."""
  site, source = work / "site", work / "source"
  # A copy of what the build reads, so that it leaves nothing in the checkout and finds nothing built before (a
  # kernel built for another Python, a stale build folder).
  try:
    source.mkdir()
    for name in BUILD_INPUTS:
      if (ROOT / name).is_dir():
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
      elif (ROOT / name).is_file():
        shutil.copy2(ROOT / name, source / name)
  except OSError as error:
    runner.say(f"could not copy the checkout ({error}): building in place")
    source = ROOT
  command = [sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation", "--no-index"]
  command += ["--no-cache-dir", "--target", str(site), str(source)]
  step, install_log = runner.run("install", command, env, work)
  record: dict[str, Any] = {"target": str(site)}
  if step["status"] != "ok":
    record["line"] = "install failed: the steps below import dmljax from the checkout itself"
    runner.say(record["line"])
    return None, record
  kernel_json = work / "kernel.json"
  probe = {**env, "PYTHONPATH": str(site)}
  runner.run("installed dmljax", [sys.executable, "-c", KERNEL, str(kernel_json)], probe, work)
  kernel = _read_json(kernel_json)
  record["dmljax"] = kernel
  record["line"] = _kernel_line(install_log, kernel, _python_version())
  runner.say(record["line"])
  return site, record


def _python_version() -> str:
  return ".".join(str(v) for v in sys.version_info[:3])


def _selfcheck_verdict(report: dict[str, Any] | None) -> dict[str, Any]:
  if report is None:
    return {"verdict": "none", "wrong": [], "errors": []}
  wrong, errors = [], []
  for section in report.get("sections", []):
    for label, row in section["rows"].items():
      for column, cell in row["cells"].items():
        entry = f"{label} / {column}: {cell.get('detail', '')}"
        if cell["status"] == "WRONG":
          wrong.append(entry)
        elif cell["status"] == "ERROR":
          errors.append(entry)
  return {"verdict": "exact" if not wrong and not errors else "failed", "wrong": wrong, "errors": errors}


def _markdown(results: dict[str, Any], texts: dict[str, str], bench_md: str) -> str:
  env = results.get("environment") or {}
  lines = [
    f"# dmljax device check: {env.get('device_kind', 'unknown device')} ({results['mode']} mode)",
    "",
    f"{results['timestamp']}; {results['seconds']:.0f} s; verdict: **{results['verdict']}** "
    f"(exit status {results['exit_status']})",
    "",
    "| step | status | seconds | detail |",
    "|---|---|---|---|",
  ]
  lines += [f"| {s['name']} | {s['status']} | {s['seconds']} | {s['detail']} |" for s in results["steps"]]
  lines += ["", "## Environment", ""]
  if env:
    lines.append(f"Python {env.get('python')} ({env.get('executable')}), {env.get('cores')} cores")
    lines.append("; ".join(f"{k} {v}" for k, v in env.get("packages", {}).items()))
    lines.append(f"backend {env.get('backend')}: {', '.join(env.get('devices', []))} {env.get('platform_version')}")
    lines.append(f"PyTorch CUDA: {env.get('torch_cuda')} {env.get('torch_device') or env.get('torch_error') or ''}")
  else:
    lines.append("(the environment step failed: see log.txt)")
  lines += ["", "## Install", "", results["install"].get("line", "skipped")]
  for section in SECTIONS:
    text = texts.get(section) or "(no output: see log.txt)"
    shown = [line for line in text.splitlines() if not PROGRESS.match(line)]  # the tables, not the progress lines
    lines += ["", f"## Self-check: {section}", "", "```", "\n".join(shown).strip("\n"), "```"]
  lines += ["", "## Benchmarks", "", bench_md or "(no benchmark results: see log.txt)"]
  return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
  parser.add_argument("outdir", type=Path, help="where report.md, results.json and log.txt go")
  parser.add_argument("--short", action="store_true", help="float32 only and small sizes (default on a CPU)")
  parser.add_argument("--full", action="store_true", help="every type and full sizes, also on a CPU")
  parser.add_argument("--no-install", action="store_true", help="import dmljax from the checkout, installing nothing")
  parser.add_argument("--budget", type=float, default=450.0, help="seconds the whole run keeps to (default 450)")
  parser.add_argument("--quiet", action="store_true", help="print the verdict only")
  args = parser.parse_args(argv)
  out = args.outdir.resolve()
  out.mkdir(parents=True, exist_ok=True)
  work = Path(tempfile.mkdtemp(prefix="dmljax-device-check-"))
  env = {**os.environ, "PYTHONUNBUFFERED": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
  env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX and PyTorch share the GPU in the benchmarks
  results: dict[str, Any] = {"timestamp": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
  texts: dict[str, str] = {}
  try:
    runner = Runner(args.budget, out / "log.txt", args.quiet)
    env_json = work / "environment.json"
    runner.run("environment", [sys.executable, "-c", ENVIRONMENT, str(env_json)], env, work)
    results["environment"] = _read_json(env_json)
    backend = (results["environment"] or {}).get("backend", "unknown")
    short = args.short or (backend == "cpu" and not args.full)
    results["mode"] = "short" if short else "full"
    runner.say(_environment_line(results["environment"]))
    runner.say(f"backend {backend}: {results['mode']} mode")

    if args.no_install:
      runner.skip("install", "--no-install: dmljax imported from the checkout")
      site, results["install"] = None, {"line": "not installed (--no-install): dmljax imported from the checkout"}
    else:
      site, results["install"] = _install(runner, env, work)
    # The steps import dmljax from the installed copy (first on the path) and benchmarks from the checkout; they run
    # in the work folder, so that the checkout's own dmljax is not found as the current directory's.
    path = [str(site)] if site is not None else []
    given = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []  # packages carried in by the caller stay found
    step_env = {**env, "PYTHONPATH": os.pathsep.join([*path, str(ROOT), *given])}

    results["selfcheck"] = {}
    types = [a for t in SHORT_TYPES for a in ("--type", t)] if short else []
    for section in SECTIONS:
      report_json = work / f"selfcheck-{section}.json"
      command = [sys.executable, "-m", "dmljax.selfcheck", "--section", section, "--json", str(report_json), *types]
      step, texts[section] = runner.run(f"selfcheck {section}", command, step_env, work)
      results["selfcheck"][section] = {"step": step["status"], "report": _read_json(report_json)}

    bench_json = work / "benchmarks.json"
    timeout = runner.timeout("benchmarks")
    command = [sys.executable, "-m", "benchmarks.device.bench", "--json", str(bench_json)]
    command += ["--deadline", f"{max(1.0, timeout - 20):.0f}", *(["--short"] if short else [])]
    command += [] if (results["environment"] or {}).get("torch_cuda") else ["--no-torch"]
    runner.run("benchmarks", command, step_env, work)
    results["benchmarks"] = _read_json(bench_json)

    results["steps"] = runner.steps
    verdicts = {}
    for section, record in results["selfcheck"].items():
      verdict = _selfcheck_verdict(record["report"])
      if record["step"] != "ok" and not verdict["wrong"] and not verdict["errors"]:
        verdict["verdict"] = "none"  # crashed or stopped: what it checked was exact, but it did not finish
      verdicts[section] = verdict
    bench = results["benchmarks"] or {}
    bench_wrong = [f"{c['name']}: {c['wrong']}" for c in bench.get("cases", []) if c.get("wrong")]
    wrong = [w for v in verdicts.values() for w in v["wrong"] + v["errors"]] + bench_wrong
    no_verdict = [s for s, v in verdicts.items() if v["verdict"] == "none"]
    results["verdict"] = "wrong" if wrong else ("incomplete" if no_verdict else "exact")
    results["exit_status"] = 1 if wrong else (2 if no_verdict else 0)
    results["wrong"], results["no_verdict"] = wrong, no_verdict
    results["seconds"] = time.monotonic() - runner.start
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "report.md").write_text(_markdown(results, texts, bench.get("markdown", "")))
  finally:
    shutil.rmtree(work, ignore_errors=True)
  _summary(results, out)
  return int(results["exit_status"])


def _environment_line(env: dict[str, Any] | None) -> str:
  if not env:
    return "environment: unknown (its step failed: see log.txt)"
  packages = ", ".join(f"{k} {v}" for k, v in env.get("packages", {}).items())
  return (
    f"device: {env.get('device_kind')} x {len(env.get('devices', []))} ({env.get('backend')}); python "
    f"{env.get('python')}; {packages}; torch CUDA {env.get('torch_cuda')}"
  )


def _summary(results: dict[str, Any], out: Path) -> None:
  """The end of the output: what a reader of the last lines needs."""
  print("\n" + "=" * 100)
  print(_environment_line(results.get("environment")))
  print(results["install"].get("line", ""))
  for step in results["steps"]:
    print(f"  {step['name']:<22} {step['status']:<10} {step['seconds']:>6} s  {step['detail']}")
  for step in results["steps"]:
    if step.get("tail"):
      print(f"--- the end of {step['name']}'s output ({step['status']}):")
      print("\n".join("    " + line for line in step["tail"].splitlines()))
  for section, record in results["selfcheck"].items():
    report = record["report"]
    counts = report["counts"] if report else None
    shown = ", ".join(f"{n} {s}" for s, n in counts.items()) if counts else "no result"
    shown += "" if record["step"] == "ok" else f" (step {record['step']}: no verdict unless a cell is wrong)"
    print(f"self-check {section}: {shown}")
  bench = results.get("benchmarks") or {}
  if bench.get("summary"):
    print(bench["summary"].rstrip())
  for entry in results["wrong"][:20]:
    print(f"WRONG/ERROR: {entry}")
  print(
    f"verdict: {results['verdict']} (exit status {results['exit_status']}); {results['seconds']:.0f} s; "
    f"tables in {out / 'report.md'}, raw results in {out / 'results.json'}, logs in {out / 'log.txt'}"
  )


if __name__ == "__main__":
  raise SystemExit(main())
