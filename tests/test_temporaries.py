"""The compiled programs' temporaries stay within the native call's and 1 MiB (issue 34, point 2).

For every class of the speed matrix's rows that held full- or quarter-size temporaries where the native call
holds none: REDUCE MAX/MIN (every float type and axis, integer and float64 rows too), argmin/argmax (the
functional ones and REDUCE's), the MAX/MIN gradient, and the integer SUM the halving computes, at the matrix's
4 MiB inputs and at the (64, 262144) float32 rows of the issue. Both programs are compiled for CPU and XLA's
buffer assignment read (``memory_analysis().temp_size_in_bytes``); nothing is run. The suite's process has
8 devices: these one-device programs take the path a one-device process takes.

REDUCE MAX/MIN's cases run twice: with the compiled CPU kernel, whose FFI call each case finds in the compiled
program (without the kernel built, those cases skip, and fail under ``DMLJAX_REQUIRE_CPU_KERNEL=1``, as CI sets),
and with the XLA composition, whose program holds no such call. XLA's buffer assignment does not see what the
kernel allocates itself: tests/test_cpu_kernel_memory.py measures that.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _helpers import x64

import dmljax as dml
from dmljax._src import cpu_kernel_library, platform

MiB = 1 << 20
LARGE = 4 * MiB
AXES = {"last": -1, "first": 0, "all": None}


REQUIRED = os.environ.get("DMLJAX_REQUIRE_CPU_KERNEL") == "1"


def _compiled(fn: Callable[[jax.Array], Any], x: jax.ShapeDtypeStruct) -> Any:
  return jax.jit(fn).lower(x).compile()


def _temporaries(compiled: Any) -> int:
  analysis = compiled.memory_analysis()
  assert analysis is not None
  return int(analysis.temp_size_in_bytes)


@contextlib.contextmanager
def _extreme_path(kernel: bool) -> Any:
  """REDUCE MAX/MIN with the CPU kernel (``kernel``) or the XLA composition; the kernel's cases skip without it,
  unless DMLJAX_REQUIRE_CPU_KERNEL=1 makes its absence a failure (they would measure the composition twice)."""
  if kernel and not cpu_kernel_library.available():
    if REQUIRED:
      pytest.fail(f"DMLJAX_REQUIRE_CPU_KERNEL=1, but {cpu_kernel_library.status()}")
    pytest.skip(cpu_kernel_library.status())
  with platform.choosing(cpu_kernel=kernel):
    yield


def _input(dtype: Any, shape: tuple[int, ...] | None = None) -> jax.ShapeDtypeStruct:
  """The matrix's large input: 1024 rows of 4 MiB in all, or ``shape``."""
  dtype = np.dtype(dtype)
  return jax.ShapeDtypeStruct(shape or (1024, LARGE // 1024 // dtype.itemsize), dtype)


def _assert_within(
  mine: Callable[[jax.Array], Any],
  native: Callable[[jax.Array], Any],
  x: Any,
  what: str,
  *,
  kernel: bool | None = None,
) -> None:
  """``mine``'s temporaries within ``native``'s and 1 MiB; ``kernel``: whether ``mine``'s compiled program holds the
  CPU kernel's FFI call (``None``: not asked)."""
  compiled = _compiled(mine, x)
  if kernel is not None:
    held = cpu_kernel_library.REDUCE_EXTREME_TARGET in compiled.as_text()
    assert held == kernel, f"{what}: the kernel's call {'missing from' if kernel else 'in'} the compiled program"
  got, allowed = _temporaries(compiled), _temporaries(_compiled(native, x)) + MiB
  assert got <= allowed, f"{what}: {got} bytes of temporaries, native + 1 MiB is {allowed}"


EXTREMES = [(np.float32, "max"), (np.float32, "min"), (ml_dtypes.bfloat16, "max"), (np.float16, "min")]


@pytest.mark.sample(0)
@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "composition"])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize(("dtype", "function"), EXTREMES, ids=lambda v: getattr(v, "__name__", v))
def test_reduce_max_min(dtype: Any, function: str, axis: str, kernel: bool) -> None:
  """With the compiled CPU kernel (where built) and with the XLA composition a build without it runs."""
  native = jnp.max if function == "max" else jnp.min
  x = _input(dtype)
  with _extreme_path(kernel):
    mine = lambda a: dml.reduce(a, function, AXES[axis])  # noqa: E731
    _assert_within(mine, lambda a: native(a, AXES[axis]), x, function, kernel=kernel)


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "composition"])
@pytest.mark.parametrize("axis", ["last", "all"])
def test_reduce_max_min_of_the_issue_s_rows(axis: str, kernel: bool) -> None:
  """64 rows of 1 MiB: the halving held 17 MiB here where jnp.max holds none."""
  x = _input(np.float32, (64, 262144))
  for function, native in (("max", jnp.max), ("min", jnp.min)):
    with _extreme_path(kernel):
      mine = lambda a, f=function: dml.reduce(a, f, AXES[axis])  # noqa: E731
      _assert_within(mine, lambda a, n=native: n(a, AXES[axis]), x, function, kernel=kernel)


@pytest.mark.parametrize("axis", AXES)
def test_reduce_max_min_of_integers_and_float64(axis: str) -> None:
  _assert_within(
    lambda a: dml.reduce(a, "max", AXES[axis]), lambda a: jnp.max(a, AXES[axis]), _input(np.int32), "int32"
  )
  with x64():
    x = _input(np.float64)
    _assert_within(lambda a: dml.reduce(a, "min", AXES[axis]), lambda a: jnp.min(a, AXES[axis]), x, "float64")


def test_integer_sum_by_halving() -> None:
  x = _input(np.int32)
  mine = lambda a: dml.reduce(a, "sum", None, promote_integers=False)  # noqa: E731
  _assert_within(mine, lambda a: jnp.sum(a, dtype=jnp.int32), x, "sum")


ARG_TYPES = [np.float32, ml_dtypes.bfloat16, np.float16, np.int32, np.int8]


@pytest.mark.sample(0)
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("dtype", ARG_TYPES, ids=lambda d: np.dtype(d).name)
def test_argmin_argmax(dtype: Any, axis: str) -> None:
  x = _input(dtype)
  a = AXES[axis]
  _assert_within(lambda v: dml.argmax(v, a), lambda v: jnp.argmax(v, a), x, "argmax")
  _assert_within(lambda v: dml.argmin(v, a, ties="last"), lambda v: jnp.argmin(v, a), x, "argmin")
  _assert_within(lambda v: dml.reduce(v, "argmin", a), lambda v: jnp.argmin(v, a), x, "REDUCE ARGMIN")


def test_argmax_of_the_issue_s_rows() -> None:
  """64 rows of 1 MiB: the top-1 selection held the keys, 64 MiB, where jnp.argmax holds none."""
  x = _input(np.float32, (64, 262144))
  _assert_within(lambda v: dml.argmax(v, -1), lambda v: jnp.argmax(v, -1), x, "argmax")
  _assert_within(lambda v: dml.reduce(v, "argmin", -1), lambda v: jnp.argmin(v, -1), x, "REDUCE ARGMIN")


def _value_and_grad(fn: Callable[[jax.Array], jax.Array]) -> Callable[[jax.Array], Any]:
  return jax.value_and_grad(lambda a: fn(a).astype(jnp.float32).sum())


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16], ids=lambda d: np.dtype(d).name)
def test_max_gradient(dtype: Any, axis: str) -> None:
  """The gradient counts each block's extremes where it reads them (XLA's sum wrote the comparisons out)."""
  a = AXES[axis]
  x = _input(dtype)
  _assert_within(_value_and_grad(lambda v: dml.reduce(v, "max", a)), _value_and_grad(lambda v: jnp.max(v, a)), x, "max")
