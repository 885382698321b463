"""The CPU route of an operation, decided in one place: a compiled kernel, the one-device composition, or the
composition a program of several devices runs.

Every operation with a route of its own for one CPU device (a compiled kernel: REDUCE MAX/MIN, argmin/argmax, the
sampling filters' whole-row work; the halving: MAX/MIN's composition, REDUCE's integer sums, the MAX/MIN gradient's
count, argmin/argmax's composition and MULTIPLY's tangent) hands :func:`choose` its implementations, and
:func:`choose` decides which one runs where. All of them compute the same values; they differ in what they cost
where. (top_k's kernel is one strategy of its selection table, which makes the same decision per case.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from dmljax._src import cpu_kernel_library, platform, shardings

Implementation = Callable[[jax.Array], Any]


def choose(
  x: jax.Array,
  axes: tuple[int, ...],
  *,
  default: Implementation,
  one_device: Implementation | None = None,
  kernel: Implementation | None = None,
  several: Implementation | None = None,
  trailing: bool = False,
  trace_several: bool = False,
  usable: Callable[[Any], bool] | None = None,
) -> Any:
  """The reduction of ``x`` over ``axes`` by the route its platform, its program and its blocks take.

  * CPU, a program of one device, blocks the one-device routes can cut (:func:`shardings.blockwise`: the reduced
    axes next to each other, the trailing ones with ``trailing``, no explicit sharding splitting them, a static
    shape): ``kernel`` where it is given, the platform choice allows the compiled kernels
    (:attr:`platform.Choice.cpu_kernel`: off is what a build without a C++ compiler runs) and their library is
    loaded; else ``one_device``. A kernel's own lowering is its composition where the program is exported.
  * CPU, a program of several devices (decided when it is lowered: :func:`shardings.by_program_devices`), and CPU
    wherever the blocks cannot be cut: ``several`` (``None``: ``default``). ``several`` the very function
    ``one_device`` is makes no choice at lowering: it runs in a program of any number of devices, and where the
    blocks cannot be cut, ``default`` does.
  * Every other platform, and CPU where neither a kernel nor ``one_device`` is given: ``default``.

  ``trace_several``: trace ``several`` now as well (what :func:`shardings.by_program_devices` needs where it holds
  a ``custom_partitioning`` call). ``usable``: for a ``kernel`` whose primitives have no lowering of their own
  elsewhere, whether it can run in the program being lowered (a lowering rule's context: CPU alone, not exported);
  where it says no, ``several`` runs.
  """
  several = default if several is None else several
  one = one_device
  if kernel is not None and platform.current().cpu_kernel and cpu_kernel_library.available():
    one = kernel
  if one is None or not shardings.blockwise(x, axes, trailing=trailing):
    if several is default or several is one_device:
      return default(x)
    return platform.branch(x, cpu=several, default=default)
  if several is one:  # one_device itself, not a kernel: no choice at lowering
    return platform.branch(x, cpu=one, default=default)

  def cpu(x: jax.Array) -> Any:
    return shardings.by_program_devices(
      x, one_device=one, several=several, trace_several=trace_several, usable=usable if one is kernel else None
    )

  return platform.branch(x, cpu=cpu, default=default)
