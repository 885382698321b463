"""Files run again in a process of one CPU device, the process a user on a laptop has.

The suite's process has 8 CPU devices (tests/conftest.py). The library chooses its paths from each program's
devices, not the process's, so a one-device program takes the same path in both; running the files here
again in a child process whose only device is the CPU checks that, and that nothing assumes the 8 devices.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
# REDUCE MAX/MIN's fused CPU path, every layout it reshapes.
FILES = ("test_reduce_extreme.py",)


@pytest.mark.long  # the whole file again in a child process: about a minute
@pytest.mark.parametrize("name", FILES)
def test_the_file_passes_in_a_process_of_one_device(name: str) -> None:
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1", "JAX_PLATFORMS": "cpu"}
  command = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-o", "addopts="]
  command.append(str(TESTS / name))
  done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, cwd=TESTS.parent, env=env)
  output = done.stdout + done.stderr
  assert "jax devices: 1 (cpu)" in output, output[-3000:]
  assert done.returncode == 0, output[-3000:]
  summary = re.search(r"(\d+) passed", output.splitlines()[-1])
  assert summary is not None and int(summary.group(1)) > 0 and "skipped" not in output.splitlines()[-1], output[-500:]
