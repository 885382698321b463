"""One command for a GPU or TPU machine: install dmljax, run the self-check and the accelerator benchmarks.

Run it as ``benchmarks/device/check.sh OUTDIR`` (or ``python -m benchmarks.device.check OUTDIR`` from the
repository root). Steps, each in a process of its own with a hard timeout, a failed one recorded and the rest run:

1. ``environment``: Python, jax, jaxlib and their plugins, the devices, PyTorch and CUDA, ``nvidia-smi -L``;
2. ``install``: ``pip install --no-deps --no-build-isolation --no-index`` of a copy of this checkout into a
   temporary folder (nothing fetched; the C++ CPU kernel built for this Python, or one line saying why not). Where
   pip cannot build offline (no pip, or no setuptools as recent as pyproject.toml's build needs: Python 3.12's
   venvs have none, 3.11's have 65.5), the package is copied there instead, without the CPU kernel, and the report
   says why in one line and what to run to build it;
3. ``imported dmljax``: the copy is imported as the later steps import it, and its path printed; dmljax imported
   from anywhere else (another installed copy) fails the step. A CPU kernel that is not the copy's own is left
   unused (``DMLJAX_CPU_KERNEL=0`` for the later steps);
4. ``selfcheck <section>``: ``python -m dmljax.selfcheck --section <section>`` for each of its tables;
5. ``benchmarks``: :mod:`benchmarks.device.bench`: top_k, argmax, REDUCE and sampling against native JAX (and
   ``torch.topk`` where PyTorch has CUDA), each result checked against the self-check's reference.

The whole run keeps to ``--budget`` seconds (450 by default: under 8 minutes on one H100 with the install); each
step's timeout is what is left of it less what the later steps need at least. With ``--short`` (the default when
JAX's backend is the CPU) the self-check runs on float32 only and the benchmarks on small sizes: seconds to a
minute. ``--install-only`` stops after step 3 (seconds: can this image install and import dmljax?). OUTDIR
receives three files: ``report.md`` (every table), ``results.json`` (the raw results of every step) and
``log.txt`` (every step's whole output).

Exit status: 0 when every step ran and every checked result is exact (the CPU kernel's absence is reported, not a
failure: accelerators do not use it); 1 when a self-check cell is WRONG or ERROR or a benchmark result is wrong;
2 when nothing is wrong but a step failed or stopped (the environment, pip's build, the import, a self-check
section without a verdict, the benchmarks or a benchmark case that raised).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import ROOT

PROGRESS = re.compile(r"^(  .+ / .+|selection|reduce|sampling): [0-9.]+ s$")
SECTIONS = ("selection", "reduce", "sampling")
# What ``pip install .`` reads: the package, the kernel's source and the metadata's files.
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "MANIFEST.in", "csrc", "dmljax")
SHORT_TYPES = ("float32",)
FAILED = ("failed", "timed out")  # a step's statuses that make the run incomplete
# (largest timeout, least time kept for it) of every step, in seconds, in the order they run.
LIMITS = {
  "environment": (60, 15),
  "install": (150, 45),
  "imported dmljax": (60, 5),
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

# Imports dmljax as the later steps do; fails unless it is the package in the folder argv[2] (the checkout's copy).
IMPORTED = r"""
import json, pathlib, sys
import dmljax
from dmljax._src import cpu_kernel_library

found, expected = pathlib.Path(dmljax.__file__).resolve().parent, pathlib.Path(sys.argv[2]).resolve()
library, status = cpu_kernel_library.load()
out = {"file": str(found / "__init__.py"), "expected": str(expected), "version": dmljax.__version__,
       "cpu_kernel": library is not None, "cpu_kernel_status": status}
if library is not None:
  out["cpu_kernel_file"] = str(pathlib.Path(library._name).resolve())
  out["cpu_kernel_own"] = pathlib.Path(out["cpu_kernel_file"]).is_relative_to(expected)
print(json.dumps(out, indent=1), flush=True)
with open(sys.argv[1], "w") as f:
  json.dump(out, f)
sys.exit(0 if found == expected else f"dmljax was imported from {found}, not from this checkout's copy {expected}")
"""
# setup.py's record of the kernel's build, which dmljax.cpu_kernel_status() reads (a copy gets one saying why not).
BUILD_INFO = "_cpu_kernel_build.json"


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

  def record(self, name: str, status: str, why: str) -> None:
    """A step that runs no process (skipped, or done here)."""
    self.steps.append({"name": name, "status": status, "seconds": 0.0, "returncode": None, "detail": why})
    self.say(f"[{time.monotonic() - self.start:5.0f} s] {name}: {status} ({why})")


def _read_json(path: Path) -> Any:
  try:
    return json.loads(path.read_text())
  except (OSError, ValueError):
    return None


def _least_setuptools() -> tuple[int, ...]:
  """The oldest setuptools pyproject.toml's build system accepts (``setuptools>=77``: ``(77,)``)."""
  requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
  found = [re.match(r"setuptools\s*>=\s*([0-9.]+)", r) for r in requires]
  return next((_version(f.group(1)) for f in found if f), (0,))


def _version(text: str) -> tuple[int, ...]:
  return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _pip_problem() -> str | None:
  """Why pip cannot build dmljax offline with this Python (nothing fetched, no build isolation), or ``None``."""
  if importlib.util.find_spec("pip") is None:
    return "this Python has no pip"
  least = ".".join(map(str, _least_setuptools()))
  try:
    found = metadata.version("setuptools")
  except metadata.PackageNotFoundError:
    return f"this Python has no setuptools (venvs of Python 3.12 and later have none); the build needs >= {least}"
  if _version(found) < _least_setuptools():
    return f"this Python's setuptools is {found}; the build needs >= {least}"
  return None


def _fix() -> str:
  least = ".".join(map(str, _least_setuptools()))
  return (
    f"to build it, run `{sys.executable} -m pip install 'setuptools>={least}'` (from PyPI, or with "
    "--no-index --find-links a folder holding its wheel), then this check again"
  )


def _pip_error(log: str) -> str:
  """The first specific error line of pip's output (not pip's closing summary), or its last line."""
  generic = ("subprocess-exited-with-error", "metadata-generation-failed", "See above", "Failed building")
  lines = [line.strip() for line in log.splitlines() if line.strip()]
  found = [
    line for line in lines if re.match(r"^(\w*Error\b|ERROR:|error:)", line) and not any(g in line for g in generic)
  ]
  return (found or lines or ["no output"])[0][:300]


def _copy(site: Path, why: str) -> None:
  """The package's Python files into ``site`` (no compiled kernel), with a build record saying why."""
  ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.dll", "*.dylib", BUILD_INFO)
  shutil.copytree(ROOT / "dmljax", site / "dmljax", ignore=ignore)
  reason = f"the device check copied dmljax from the checkout without building it: {why}"
  (site / "dmljax" / "_src" / BUILD_INFO).write_text(json.dumps({"built": False, "reason": reason}, indent=1) + "\n")


def _install(runner: Runner, env: dict[str, str], work: Path) -> tuple[Path, dict[str, Any]]:
  """Installs the checkout into ``work/site`` with pip, or copies it there where pip cannot build it offline.

  Returns the folder and a record whose ``line`` says in one line what happened (and why, and the fix).
  """
  site, source = work / "site", work / "source"
  record: dict[str, Any] = {"target": str(site)}
  problem = _pip_problem()
  if problem is not None:
    _copy(site, problem)
    runner.record("install", "ok", "copied, without the CPU kernel: pip cannot build dmljax here")
    record["method"] = "copy"
    record["line"] = f"install: pip cannot build dmljax offline here: {problem}. Copied it without the CPU kernel; "
    record["line"] += _fix()
    runner.say(record["line"])
    return site, record
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
  step, install_log = runner.run("install", command, {**env, "PIP_NO_INDEX": "1"}, work)
  if step["status"] == "ok":
    record["method"] = "pip"
    setuptools = metadata.version("setuptools")
    record["line"] = f"install: pip installed a copy of the checkout (offline, setuptools {setuptools})"
    return site, record
  cause = _pip_error(install_log)
  shutil.rmtree(site, ignore_errors=True)
  _copy(site, f"pip failed: {cause}")
  record["method"] = "copy"
  record["line"] = (
    f"install FAILED: pip could not build dmljax ({cause}; the whole output is in log.txt); the later steps import a "
    "copy of the checkout without the CPU kernel"
  )
  runner.say(record["line"])
  return site, record


def _imported(runner: Runner, env: dict[str, str], work: Path, package: Path) -> dict[str, Any] | None:
  """Imports dmljax as the later steps will (it must be ``package``) and reports its path and CPU kernel."""
  found = work / "imported.json"
  runner.run("imported dmljax", [sys.executable, "-c", IMPORTED, str(found), str(package)], env, work)
  return _read_json(found)


def _dmljax_line(imported: dict[str, Any], method: str) -> str:
  if not imported:
    return "dmljax: did not import (see the imported dmljax step)"
  where = "this checkout" if method == "none" else f"{'installed by pip' if method == 'pip' else 'copied'} from {ROOT}"
  return f"dmljax {imported.get('version')}: {imported.get('file')} ({where})"


def _kernel_line(imported: dict[str, Any] | None) -> str:
  unaffected = "top_k on CPU runs dmljax's XLA strategies; accelerators do not use it"
  if imported is None:
    return "CPU kernel: unknown (dmljax did not import: see the imported dmljax step)"
  if imported.get("cpu_kernel") and imported.get("cpu_kernel_own"):
    return f"CPU kernel: built for Python {_python_version()} and in use ({imported['cpu_kernel_file']})"
  if imported.get("cpu_kernel"):
    return (
      f"CPU kernel: {imported['cpu_kernel_file']} belongs to another installed dmljax, not this checkout's copy: "
      f"left unused (DMLJAX_CPU_KERNEL=0); {unaffected}"
    )
  return f"CPU kernel: not available ({imported.get('cpu_kernel_status')}); {unaffected}"


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
  lines += ["", "## Install", "", results["install"].get("line", "")]
  lines += ["", results["dmljax_line"]]
  lines += ["", results["kernel_line"]]
  if results["failed"]:
    lines += ["", "Failed or stopped steps: " + "; ".join(results["failed"])]
  if results["mode"] == "install only":
    return "\n".join(lines) + "\n"
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
  parser.add_argument("--install-only", action="store_true", help="the environment, install and import steps only")
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
    results["mode"] = "install only" if args.install_only else ("short" if short else "full")
    runner.say(_environment_line(results["environment"]))
    runner.say(f"backend {backend}: {results['mode']} mode")

    if args.no_install:
      runner.record("install", "skipped", "--no-install: dmljax imported from the checkout")
      site, results["install"] = ROOT, {"method": "none", "line": "not installed (--no-install): the checkout itself"}
    else:
      site, results["install"] = _install(runner, env, work)
    # The steps import dmljax from the installed copy (first on the path) and benchmarks from the checkout; they run
    # in the work folder, so that the checkout's own dmljax is not found as the current directory's.
    given = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []  # packages carried in by the caller stay found
    step_env = {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys([str(site), str(ROOT), *given]))}
    results["dmljax"] = _imported(runner, step_env, work, site / "dmljax")
    imported = results["dmljax"] or {}
    if imported.get("cpu_kernel") and not imported.get("cpu_kernel_own"):
      step_env["DMLJAX_CPU_KERNEL"] = "0"  # another installed copy's kernel: not what this checkout builds
    results["kernel_line"] = _kernel_line(results["dmljax"])
    results["dmljax_line"] = _dmljax_line(imported, results["install"]["method"])
    runner.say(results["dmljax_line"])
    runner.say(results["kernel_line"])

    results["selfcheck"] = {}
    results["benchmarks"] = None
    if not args.install_only:
      _check(runner, step_env, work, short, results, texts)
    results["steps"] = runner.steps
    _verdict(results)
    results["seconds"] = time.monotonic() - runner.start
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    bench = results["benchmarks"] or {}
    (out / "report.md").write_text(_markdown(results, texts, bench.get("markdown", "")))
  finally:
    shutil.rmtree(work, ignore_errors=True)
  _summary(results, out)
  return int(results["exit_status"])


def _check(
  runner: Runner, step_env: dict[str, str], work: Path, short: bool, results: dict[str, Any], texts: dict[str, str]
) -> None:
  """The self-check's sections and the benchmarks."""
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


def _verdict(results: dict[str, Any]) -> None:
  """``verdict`` and ``exit_status``: wrong (1) over incomplete (2) over exact, or installed with --install-only (0)."""
  verdicts = {}
  for section, record in results["selfcheck"].items():
    verdict = _selfcheck_verdict(record["report"])
    if record["step"] != "ok" and not verdict["wrong"] and not verdict["errors"]:
      verdict["verdict"] = "none"  # crashed or stopped: what it checked was exact, but it did not finish
    verdicts[section] = verdict
  bench = results["benchmarks"] or {}
  bench_wrong = [f"{c['name']}: {c['wrong']}" for c in bench.get("cases", []) if c.get("wrong")]
  wrong = [w for v in verdicts.values() for w in v["wrong"] + v["errors"]] + bench_wrong
  failed = [f"{s['name']}: {s['status']} ({s['detail']})" for s in results["steps"] if s["status"] in FAILED]
  failed += [f"benchmark {c['name']}: {c['error']}" for c in bench.get("cases", []) if c.get("error")]
  results["wrong"], results["failed"] = wrong, failed
  results["no_verdict"] = [s for s, v in verdicts.items() if v["verdict"] == "none"]
  done = "installed" if results["mode"] == "install only" else "exact"
  results["verdict"] = "wrong" if wrong else ("incomplete" if failed or results["no_verdict"] else done)
  results["exit_status"] = {"wrong": 1, "incomplete": 2}.get(results["verdict"], 0)


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
  print(results["install"].get("line") or f"install: {results['install'].get('method')}")
  print(results["dmljax_line"])
  print(results["kernel_line"])
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
  for entry in results["failed"]:
    print(f"FAILED: {entry}")
  print(
    f"verdict: {results['verdict']} (exit status {results['exit_status']}); {results['seconds']:.0f} s; "
    f"tables in {out / 'report.md'}, raw results in {out / 'results.json'}, logs in {out / 'log.txt'}"
  )


if __name__ == "__main__":
  raise SystemExit(main())
