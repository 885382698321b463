"""The CPU kernels' error path: a C++ exception in a kernel is a Python error, never a terminated process.

The kernels (csrc/cpu_top_k.cc, csrc/cpu_reduce_extreme.cc, csrc/cpu_arg_extreme.cc) catch every C++ exception, on
the calling thread or on a thread of XLA's pool, and return it to XLA as an FFI error. The exceptions are real ones,
thrown where the kernels' work runs: the library reads ``DMLJAX_CPU_KERNEL_FAULT`` once per process, and with it set
the first unit of work of every call throws ``std::bad_alloc`` (as a failed buffer allocation would), a
``std::runtime_error`` or an ``int`` (no ``std::exception`` at all). Each runs in a process of its own, on a small
input (run on the calling thread) and a large one (spread over the pool's threads), for each kernel, and the process
must go on afterwards.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

import dmljax as dml
from dmljax._src import cpu_kernel_library

REQUIRED = os.environ.get("DMLJAX_REQUIRE_CPU_KERNEL") == "1"

_SCRIPT = """
import json
import jax
import numpy as np
import dmljax as dml
from dmljax._src import cpu_kernel_library, platform
from dmljax._src.strategies import cpu_kernel

assert cpu_kernel_library.available(), cpu_kernel_library.status()
results = {}
for name, shape in (("calling thread", (4, 1000)), ("pool threads", (64, 8192))):
  x = np.random.default_rng(30).standard_normal(shape).astype(np.float32)
  with platform.choosing(top_k=cpu_kernel.NAME):
    fn = jax.jit(lambda x: dml.top_k(x, 5))
    assert cpu_kernel_library.TARGET in fn.lower(x).as_text()
    try:
      np.asarray(fn(x)[1])  # the indices fetched: an error raised when the program runs, or when its output is read
      results[name] = "no error"
    except Exception as error:
      results[name] = f"{type(error).__name__}: {error}"
  for kind, fn, target in (
    ("reduce", jax.jit(lambda x: dml.reduce(x, "max", 1)), cpu_kernel_library.REDUCE_EXTREME_TARGET),
    ("argmax", jax.jit(lambda x: dml.argmax(x, 1, ties="last")), cpu_kernel_library.ARG_EXTREME_TARGET),
  ):
    assert target in fn.lower(x).as_text()
    try:
      np.asarray(fn(x))
      results[f"{kind}, {name}"] = "no error"
    except Exception as error:
      results[f"{kind}, {name}"] = f"{type(error).__name__}: {error}"
values, _ = jax.jit(lambda x: jax.lax.top_k(x, 5))(x)  # the process goes on: XLA still runs programs
results["after"] = bool(np.all(np.asarray(values) == -np.sort(-x, axis=1)[:, :5]))
print("RESULTS " + json.dumps(results))
"""

# Every part a message must hold; {kernel} is the kernel's name (the top-k kernel's, REDUCE MAX/MIN's or argmax's).
_EXPECTED = {
  "bad_alloc": ["RESOURCE_EXHAUSTED", "{kernel}: out of memory", "DMLJAX_CPU_KERNEL=0"],
  "runtime_error": ["INTERNAL", "{kernel}: fault injected by DMLJAX_CPU_KERNEL_FAULT", "please report it"],
  "unknown": ["INTERNAL", "{kernel}: an unknown C++ exception", "please report it"],
}


@pytest.mark.skipif(not cpu_kernel_library.available() and not REQUIRED, reason=cpu_kernel_library.status())
@pytest.mark.parametrize("fault", sorted(_EXPECTED))
def test_an_exception_in_the_kernel_is_a_python_error(fault: str) -> None:
  root = str(pathlib.Path(dml.__file__).resolve().parent.parent)  # the dmljax this process imported
  env = {**os.environ, "DMLJAX_CPU_KERNEL_FAULT": fault, "JAX_PLATFORMS": "cpu"}
  env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
  env.pop("XLA_FLAGS", None)  # one device: the pool's threads are the whole machine's
  run = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, f"the process died (exit {run.returncode}):\n{run.stderr[-3000:]}"
  line = next(line for line in run.stdout.splitlines() if line.startswith("RESULTS "))
  results = json.loads(line.removeprefix("RESULTS "))
  assert results.pop("after") is True
  assert len(results) == 6
  kernels = {"reduce": "dmljax_cpu_reduce_extreme", "argmax": "dmljax_cpu_arg_extreme"}
  for where, message in results.items():
    kernel = kernels.get(where.split(",")[0], "dmljax_cpu_top_k")
    for part in _EXPECTED[fault]:
      assert part.format(kernel=kernel) in message, f"{fault} on the {where}: {part!r} not in {message!r}"
