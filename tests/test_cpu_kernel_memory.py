"""The CPU MAX/MIN kernel's host memory, and its work split over a large thread pool (issue 41, point 3).

What the kernel allocates is no XLA buffer, so ``memory_analysis()`` cannot see it (tests/test_temporaries.py reads
that): here the process's peak resident memory is measured instead. XLA:CPU sizes its intra-op thread pool from the
``NPROC`` environment variable where it is set (else from the cores), and the kernel splits its work into up to four
units a thread, so a child process with ``NPROC=64`` runs the kernel as it runs on a 64-core machine, here on two
cores: the pool's size decides how the work is cut and what the cut costs in memory, not how fast it runs. Child
processes build the same (64, 2**19) float32 input (128 MiB), compile REDUCE MAX over axis 0 (the kernel) and
``jnp.max`` over axis 0, and run one of them, or neither: the kernel's peak is within 64 MiB of ``jnp.max``'s and
within 16 MiB of neither's. (The kernel used to keep partial maxima of every chunk of the reduced axis for every
column: with such a pool, 64 chunks of 2**19 keys and NaN candidates, 256 MiB; with the two cores' own pool, 8
chunks, 32 MiB, which the first bound would not have caught.) Another child runs tests/test_cpu_kernel.py with that
pool, so that the REDUCE kernel's column blocks, its chunks of the reduced axis and the parallel combine of their
partial maxima, and the top-k kernel's chunks of long rows and their merge, are checked against the reference.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import dmljax
from dmljax._src import cpu_kernel_library

TESTS = pathlib.Path(__file__).resolve().parent
REQUIRED = os.environ.get("DMLJAX_REQUIRE_CPU_KERNEL") == "1"
needs_kernel = pytest.mark.skipif(
  not cpu_kernel_library.available() and not REQUIRED, reason=cpu_kernel_library.status()
)
POOL = "64"  # the threads XLA:CPU's pool gets in the children: a 64-core machine's
MiB = 1 << 20
ROWS, COLUMNS = 64, 1 << 19


def _child_env() -> dict[str, str]:
  """A child that imports this process's dmljax, with XLA:CPU's pool at :data:`POOL` threads."""
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PJRT_NPROC")}
  package_root = str(pathlib.Path(dmljax.__file__).resolve().parent.parent)
  path = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
  return {**env, "NPROC": POOL, "JAX_PLATFORMS": "cpu", "PYTHONPATH": path}


def _peak(which: str, where: pathlib.Path) -> tuple[int, bool, str]:
  """A child's peak resident memory in bytes, whether its kernel program holds the FFI call, the kernel's status."""
  command = [sys.executable, str(TESTS / "kernel_memory_worker.py"), which, str(ROWS), str(COLUMNS)]
  done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=where, env=_child_env())
  assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
  result = json.loads(done.stdout.strip().splitlines()[-1])
  return int(result["peak_kib"]) * 1024, bool(result["kernel_in_program"]), str(result["status"])


@needs_kernel
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss counts KiB on Linux")
def test_the_kernel_s_peak_memory_is_jnp_max_s_with_a_64_thread_pool(tmp_path: pathlib.Path) -> None:
  """Peaks of three children: the kernel's run, ``jnp.max``'s, and neither (the input and both compiled programs).
  The kernel's is within 64 MiB of ``jnp.max``'s, and within 16 MiB of neither's: its 2 MiB output and the threads'
  stacks (measured: 3 MiB; ``jnp.max``'s run holds 131 MiB, the old kernel's 258 MiB)."""
  (kernel, held, status), (native, _, _), (neither, _, _) = (
    _peak(w, tmp_path) for w in ("kernel", "native", "neither")
  )
  assert held, status
  above_native, above_neither = kernel - native, kernel - neither
  assert above_native <= 64 * MiB, f"the kernel's run peaked {above_native / MiB:.0f} MiB above jnp.max's (64 at most)"
  assert above_neither <= 16 * MiB, f"the kernel's run held {above_neither / MiB:.0f} MiB (its output is 2 MiB)"


@needs_kernel
def test_the_kernel_tests_pass_with_a_64_thread_pool(tmp_path: pathlib.Path) -> None:
  """The child runs from a folder of its own (its dmljax is this process's, by PYTHONPATH, not the working
  directory's: CI runs this file on the installed wheel too)."""
  command = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-o", "addopts="]
  command += ["--rootdir", str(TESTS.parent), str(TESTS / "test_cpu_kernel.py")]
  env = {**_child_env(), "DMLJAX_REQUIRE_CPU_KERNEL": "1"}
  done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path, env=env)
  output = done.stdout + done.stderr
  assert done.returncode == 0, output[-3000:]
  summary = re.search(r"(\d+) passed", output.strip().splitlines()[-1])
  assert summary is not None and int(summary.group(1)) > 0 and "skipped" not in output.splitlines()[-1], output[-500:]
