"""The program of the CPU kernel's memory test (tests/test_cpu_kernel_memory.py); not a test module itself.

``python tests/kernel_memory_worker.py WHICH ROWS COLUMNS``, ``WHICH`` ``kernel``, ``native`` or ``neither``: makes a
float32 (ROWS, COLUMNS) array on the CPU device, compiles both REDUCE MAX over axis 0 (which must hold the CPU
kernel's FFI call) and ``jnp.max`` over axis 0, runs the one it names once (or neither), and prints one JSON line:
the process's peak resident memory (``ru_maxrss``) and whether the kernel's program holds the call. Every process
builds the same input and compiles the same two programs, so their peaks differ by what the run itself holds at
its height.
"""

from __future__ import annotations

import json
import resource
import sys

import jax
import jax.numpy as jnp
from jax import lax

import dmljax as dml
from dmljax._src import cpu_kernel_library


def main(which: str, rows: int, columns: int) -> None:
  x = jax.jit(lambda: lax.iota(jnp.float32, rows * columns).reshape(rows, columns))()
  x.block_until_ready()
  kernel = jax.jit(lambda a: dml.reduce(a, "max", 0)).lower(x).compile()
  native = jax.jit(lambda a: jnp.max(a, 0)).lower(x).compile()
  if which != "neither":
    (kernel if which == "kernel" else native)(x).block_until_ready()
  peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
  held = cpu_kernel_library.REDUCE_EXTREME_TARGET in kernel.as_text()
  print(json.dumps({"peak_kib": peak_kib, "kernel_in_program": held, "status": cpu_kernel_library.status()}))


if __name__ == "__main__":
  main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
