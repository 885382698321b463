"""Runs a JAX program as several processes on this machine, as it would run on several hosts.

Each process gets its own CPU devices (``--xla_force_host_platform_device_count``), joins the others
through ``jax.distributed.initialize`` on a free loopback port, and exchanges data through the gloo
CPU collectives. Inside the program, ``jax.devices()`` lists every process's devices, a mesh over
them is a global mesh, and a jitted function runs as one SPMD program across the processes: the
same code then runs on a GPU cluster or a TPU pod, where ``jax.distributed.initialize()`` finds its
arguments by itself (see the docs' "Scaling out" page).

    python examples/local_cluster.py --processes 2 --devices 4 program.py [program arguments]

:func:`launch` does the same from Python (``examples/sharded_decoding.py`` and the test suite use
it), and :func:`collective_bytes` reads from a compiled program how many bytes its collectives move.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import runpy
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from typing import Any

_DEVICES_FLAG = "--xla_force_host_platform_device_count"


class ClusterError(RuntimeError):
  """A process of the cluster failed or ran past its time; the message holds every process's output."""


def free_port() -> int:
  """A TCP port that is free on the loopback interface now."""
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _child_environment(devices: int, port: int, processes: int, process_id: int) -> dict[str, str]:
  env = dict(os.environ)
  flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(_DEVICES_FLAG)]
  env["XLA_FLAGS"] = " ".join([*flags, f"{_DEVICES_FLAG}={devices}"])
  env["JAX_PLATFORMS"] = "cpu"
  env["LOCAL_CLUSTER"] = f"{port},{processes},{process_id}"
  # The processes import what this one imports (a checkout's dmljax rather than another installed one, say).
  env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(path or os.curdir) for path in sys.path)
  return env


def launch(
  program: str | os.PathLike[str],
  args: Sequence[str] = (),
  *,
  processes: int = 2,
  devices: int = 4,
  timeout: float = 120.0,
) -> list[str]:
  """Runs ``program`` (a Python file) as ``processes`` JAX processes with ``devices`` CPU devices each.

  Returns each process's output (stdout and stderr together), in process order. If a process exits
  with an error, the others are killed at once (they would wait for it in their collectives), and
  after ``timeout`` seconds all of them are; either way :class:`ClusterError` carries every output.
  """
  port = free_port()
  with tempfile.TemporaryDirectory(prefix="local_cluster_") as logs:
    paths = [os.path.join(logs, f"process_{i}.log") for i in range(processes)]
    running: list[subprocess.Popen[bytes]] = []
    try:
      for i, path in enumerate(paths):
        with open(path, "wb") as log:
          command = [sys.executable, os.path.abspath(__file__), "--join", os.fspath(program), *args]
          env = _child_environment(devices, port, processes, i)
          running.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
      failure = _wait(running, timeout)
    finally:
      for p in running:
        if p.poll() is None:
          p.kill()
        p.wait()
    outputs = []
    for path in paths:
      with open(path, encoding="utf-8", errors="replace") as log:
        outputs.append(log.read())
  if failure is not None:
    shown = "\n".join(f"----- process {i} -----\n{text}" for i, text in enumerate(outputs))
    raise ClusterError(f"{failure}\n{shown}")
  return outputs


def _wait(running: list[subprocess.Popen[bytes]], timeout: float) -> str | None:
  """Waits until every process succeeded (``None``), one failed or the time ran out (what happened)."""
  deadline = time.monotonic() + timeout
  while True:
    codes = [p.poll() for p in running]
    failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
    if failed:
      return f"process {failed[0]} exited with status {codes[failed[0]]}"
    if all(code == 0 for code in codes):
      return None
    if time.monotonic() > deadline:
      return f"the processes ran past {timeout:g} s"
    time.sleep(0.05)


def _join_and_run(program: str, args: list[str]) -> None:
  """In a launched process: joins the cluster (before anything touches a device), then runs the program."""
  import jax

  port, processes, process_id = map(int, os.environ["LOCAL_CLUSTER"].split(","))
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  address = f"127.0.0.1:{port}"
  jax.distributed.initialize(
    coordinator_address=address,
    num_processes=processes,
    process_id=process_id,
    coordinator_bind_address=address,
  )
  sys.argv = [program, *args]
  sys.path.insert(0, os.path.dirname(os.path.abspath(program)))  # as ``python program.py`` would
  try:
    runpy.run_path(program, run_name="__main__")
  except SystemExit as exit:
    if exit.code not in (None, 0):
      _fail()
  except BaseException:
    _fail()
  jax.distributed.shutdown()


def _fail() -> None:
  """Exits at once with the traceback: a clean shutdown would wait for the other processes, which may be waiting
  for this one in a collective."""
  traceback.print_exc()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(1)


_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4}
_BYTES |= {"s64": 8, "u64": 8, "f64": 8}
_COLLECTIVE = re.compile(r"=\s*(.+?)\s+(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)(-start)?\(")
_SHAPE = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")


def collectives(compiled: Any) -> list[tuple[str, str]]:
  """Every collective of a compiled program: its kind (``all-gather``, ...) and its result type on one device."""
  found = []
  for line in compiled.as_text().splitlines():
    match = _COLLECTIVE.search(line)
    if match:
      found.append((match.group(2), re.sub(r"\{[^}]*\}", "", match.group(1))))  # layouts dropped
  return found


def collective_bytes(compiled: Any) -> int:
  """Bytes the collectives of a compiled program produce on one device (each collective's result, summed).

  An all-gather's result is what the device receives plus its own part, so this bounds what
  reaches each device from the others.
  """
  total = 0
  for _, result in collectives(compiled):
    for dtype, dims in _SHAPE.findall(result):
      total += _BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
  return total


def main() -> None:
  if sys.argv[1:2] == ["--join"]:
    _join_and_run(sys.argv[2], sys.argv[3:])
    return
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--processes", type=int, default=2)
  parser.add_argument("--devices", type=int, default=4, help="CPU devices per process")
  parser.add_argument("--timeout", type=float, default=600.0)
  parser.add_argument("program")
  parser.add_argument("args", nargs=argparse.REMAINDER)
  options = parser.parse_args()
  for i, output in enumerate(
    launch(options.program, options.args, processes=options.processes, devices=options.devices, timeout=options.timeout)
  ):
    print(f"----- process {i} -----\n{output}", end="")


if __name__ == "__main__":
  main()
