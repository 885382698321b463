"""Runs JAX's own tests for the functions dmljax replaces, on JAX and with dmljax substituted, and counts.

Usage (from the dmljax checkout, with dmljax installed and ``absl-py`` besides the test extra)::

  python tools/jax_upstream_tests.py /path/to/jax                 # a checkout of JAX at the installed release's tag
  python tools/jax_upstream_tests.py /path/to/jax --cases 30 --only reducers --x64 on

For each selection below and each x64 setting, the same tests run twice in pytest (one process each, in the
checkout's ``tests`` folder, ``JAX_NUM_GENERATED_CASES`` cases per generated test): once on plain JAX, once with
the plugin ``tools/jax_upstream_adapters.py``, which puts dmljax where ``jax.lax.top_k``, ``jnp.argmin``/
``argmax``, the ``jnp`` reducers, ``logsumexp`` and ``jax.nn.one_hot`` were, and sends the arguments dmljax has no
equivalent for back to JAX (counted). The table gives, per selection and setting, the tests that pass on JAX and
those of them that also pass with dmljax; every test that passes on JAX and fails with dmljax is listed with the
first line of its failure, and marked with its reason where it is one of the documented differences
(:data:`DOCUMENTED`, docs/semantics.rst, "Differences from JAX that remain"). ``--json PATH`` writes it all.

The JAX checkout is only read (a copy of its ``tests`` folder at the tag is enough); nothing of it is kept here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class Selection:
  name: str
  file: str
  keyword: str | None = None


SELECTIONS = (
  Selection("top_k", "lax_test.py", "TopK"),
  Selection("top_k_autodiff", "lax_autodiff_test.py", "TopK"),
  Selection("top_k_vmap", "lax_vmap_test.py", "TopK"),
  Selection("argminmax", "lax_numpy_test.py", "ArgMinMax"),
  Selection("one_hot", "nn_test.py", "OneHot"),
  Selection("logsumexp", "lax_scipy_test.py", "LogSumExp"),
  Selection("reducers", "lax_numpy_reducers_test.py"),
)

# Tests that pass on JAX and fail with dmljax for a documented reason: (test name pattern, failure pattern, reason).
DOCUMENTED: tuple[tuple[str, str, str], ...] = (
  (r"testTopKOverflow", r"top_k returns int32 indices", "checks JAX's error text"),
  (r"testOneHotConcretizationError", r"jax\.nn\.one_hot argument", "checks JAX's error text"),
  (r"testOneHotNonInteger", r"jax\.nn\.one_hot input should be integer-typed", "checks JAX's warning text"),
  (r"testReducer\w*(Bad|NonBoolean)\w*", r"initial value must be a scalar|where must be None", "checks JAX's text"),
  (r"testReductionWithRepeatedAxisError", r"duplicate value in 'axis'", "checks JAX's error text"),
  (r"test(Mean|Reducer)F16Casts", r"Lists differ", "checks JAX's compiled form (the primitives of its jaxpr)"),
)


@dataclasses.dataclass
class Run:
  outcomes: dict[str, str]  # test id -> "passed", "failed", "skipped"
  messages: dict[str, str]  # test id -> the first line of its failure
  calls: dict[str, int]


def _run(tests: Path, selection: Selection, x64: bool, cases: int, adapters: bool, scratch: Path) -> Run:
  tag = f"{selection.name}-{'x64' if x64 else 'x32'}-{'dmljax' if adapters else 'jax'}"
  report, calls = scratch / f"{tag}.xml", scratch / f"{tag}.calls.json"
  env = dict(os.environ, JAX_ENABLE_X64="1" if x64 else "0", JAX_NUM_GENERATED_CASES=str(cases))
  env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TOOLS), env.get("PYTHONPATH", "")) if p)
  env["DMLJAX_UPSTREAM_CALLS"] = str(calls)
  command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", selection.file]
  command += ["-k", selection.keyword] if selection.keyword else []
  command += ["-p", "jax_upstream_adapters"] if adapters else []
  command += [f"--junitxml={report}", "-o", "junit_family=xunit1"]
  subprocess.run(command, cwd=tests, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
  outcomes: dict[str, str] = {}
  messages: dict[str, str] = {}
  for case in ElementTree.parse(report).getroot().iter("testcase"):
    test = f"{case.get('classname')}::{case.get('name')}"
    failure = case.find("failure")
    if failure is None:
      failure = case.find("error")
    if failure is not None:
      outcomes[test] = "failed"
      text = (failure.get("message") or failure.text or "").strip()
      messages[test] = text.splitlines()[0][:300] if text else ""
    elif case.find("skipped") is not None:
      outcomes[test] = "skipped"
    else:
      outcomes[test] = "passed"
  return Run(outcomes, messages, json.loads(calls.read_text()) if calls.exists() else {})


def _documented(test: str, message: str) -> str | None:
  for name, failure, reason in DOCUMENTED:
    if re.search(name, test) and re.search(failure, message):
      return reason
  return None


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
  parser.add_argument("jax", type=Path, help="a checkout of JAX (its root, or its tests folder)")
  parser.add_argument("--cases", type=int, default=10, help="JAX_NUM_GENERATED_CASES (default 10)")
  parser.add_argument("--x64", choices=("off", "on", "both"), default="both")
  parser.add_argument("--only", nargs="*", choices=[s.name for s in SELECTIONS], help="selections to run")
  parser.add_argument("--json", type=Path, help="write the counts, failures and calls here")
  args = parser.parse_args(argv)
  tests = args.jax / "tests" if (args.jax / "tests").is_dir() else args.jax
  if not (tests / "lax_numpy_reducers_test.py").exists():
    parser.error(f"{tests} holds no JAX tests (lax_numpy_reducers_test.py)")
  settings = {"off": (False,), "on": (True,), "both": (False, True)}[args.x64]
  chosen = [s for s in SELECTIONS if not args.only or s.name in args.only]
  rows: list[dict[str, Any]] = []
  unexplained = 0
  with tempfile.TemporaryDirectory() as scratch:
    for selection in chosen:
      for x64 in settings:
        plain = _run(tests, selection, x64, args.cases, False, Path(scratch))
        swapped = _run(tests, selection, x64, args.cases, True, Path(scratch))
        on_jax = sorted(t for t, o in plain.outcomes.items() if o == "passed")
        both = [t for t in on_jax if swapped.outcomes.get(t) == "passed"]
        lost: list[dict[str, Any]] = []
        for test in on_jax:
          if swapped.outcomes.get(test) != "passed":
            message = swapped.messages.get(test, swapped.outcomes.get(test, "not run"))
            reason = _documented(test, message)
            unexplained += reason is None
            lost.append({"test": test, "outcome": swapped.outcomes.get(test), "message": message, "reason": reason})
        rows.append(
          {
            "selection": selection.name,
            "x64": x64,
            "pass_on_jax": len(on_jax),
            "pass_with_dmljax": len(both),
            "lost": lost,
            "calls": swapped.calls,
          }
        )
        setting = "on " if x64 else "off"
        print(f"{selection.name:16} x64 {setting}  JAX {len(on_jax):4}  dmljax {len(both):4}", flush=True)
        for item in lost:
          print(f"    {item['reason'] or 'UNEXPLAINED'}: {item['test']}: {item['message'][:160]}")
  sent: dict[str, int] = {}
  for row in rows:
    for key, count in row["calls"].items():
      sent[key] = sent.get(key, 0) + count
  print("calls:", ", ".join(f"{k}={v}" for k, v in sorted(sent.items())))
  if args.json:
    args.json.write_text(json.dumps({"cases": args.cases, "rows": rows, "calls": sent}, indent=1))
  return 1 if unexplained else 0


if __name__ == "__main__":
  sys.exit(main())
