"""Compile dmljax and native JAX for accelerators without the hardware, and read what XLA makes of them.

* :mod:`~benchmarks.compiled.availability`: whether the compile-only packages are installed, and JAX's settings;
* :mod:`~benchmarks.compiled.devices`: an H100 and TPU slices as compile-only devices, meshes, placed inputs;
* :mod:`~benchmarks.compiled.program`: compile a function for them and summarize the result;
* :mod:`~benchmarks.compiled.hlo`, :mod:`~benchmarks.compiled.thunks`, :mod:`~benchmarks.compiled.launches`:
  the readers of XLA's dumps; :mod:`~benchmarks.compiled.collectives`: what a sharded program moves between
  devices;
* :mod:`~benchmarks.compiled.roofline`: the GPU estimate;
* ``python -m benchmarks.compiled``: every benchmark workload for an H100, TPU v5e and v6e, into
  ``benchmarks/results/h100-compiled.md`` and ``tpu-compiled.md``; ``python -m benchmarks.compiled.pod``: the
  sharded workloads on TPU pod slices, into ``tpu-pod-compiled.md``; ``python -m
  benchmarks.compiled.tpu_automatic_mesh``: top_k on automatic mesh axes for a TPU slice.

Nothing of the above runs a program: every figure is "compiled, not run". Beside them, two scripts for a machine
that has the devices: ``python -m benchmarks.compiled.gpu_selection`` (every top-k strategy timed on a GPU) and
``python -m benchmarks.compiled.sharded_top_k`` (top_k over a vocabulary sharded on 8 CPU devices).
"""
