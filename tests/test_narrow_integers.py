"""REDUCE of 8- and 16-bit integers that the caller computed with wrapping arithmetic in the same program.

XLA:CPU reduces a large 8-bit maximum or minimum, and a float32 reduction of converted 8-bit integers, with a
library fusion that takes the caller's arithmetic in and saturates it (docs/semantics.rst, "Integer overflow";
tests/test_reduce_extreme.py pins the XLA behaviour). Here ``a - 3``, ``a + 3`` and ``a * 3`` of int8, uint8, int16
and uint16 rows long enough for it (8192 elements a block) feed every REDUCE function under ``jax.jit`` on every
path: the CPU kernel where it is built, the XLA composition a build without a compiler runs, ``jax.export``
(serialized, deserialized and called), automatic sharding of the reduced axis over 2 of the suite's 8 CPU
devices, and every ``platform.branch`` branch forced on CPU. The integer functions are compared by bits with
NumPy's answer on the wrapped values; the floating-point ones (whose summation order is the platform's) by bits
with the same call on the same path given the wrapped values as its input, and with NumPy within rounding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import assert_bitwise_equal
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from reference import ref_reduce

import dmljax as dml
from dmljax._src import platform

TYPES = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16))
PATHS = ("jit", "no_kernel", "export", "sharded", "cpu", "cuda", "tpu", "default")
PRODUCERS: dict[str, Callable[[Any], Any]] = {
  "a - 3": lambda a: a - np.array(3, a.dtype),
  "a + 3": lambda a: a + np.array(3, a.dtype),
  "a * 3": lambda a: a * np.array(3, a.dtype),
}
# (shape, reduced axis): blocks of 8192 elements along the minor axis and along the major one.
LAYOUTS = (((4, 8192), 1), ((8192, 4), 0))
INTEGER_FUNCTIONS = ("max", "min", "sum", "multiply", "l1", "sum_square", "argmax", "argmin")
FLOAT_FUNCTIONS = ("mean", "l2", "log_sum", "log_sum_exp")
_ORDER_ONLY = ("max", "min", "argmax", "argmin")  # promote_integers changes nothing of theirs


def _wrapped(producer: str, x: np.ndarray) -> np.ndarray:
  """NumPy's answer: the arithmetic in ``x``'s type, wrapping."""
  with np.errstate(over="ignore"):
    return np.asarray(PRODUCERS[producer](x))


def _input(dtype: np.dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
  """Every value of the type, the extremes included, at random places."""
  info = np.iinfo(dtype)
  return np.random.default_rng(seed).integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@contextlib.contextmanager
def _path(path: str) -> Iterator[None]:
  if path == "no_kernel":
    with platform.choosing(cpu_kernel=False):
      yield
  elif path in platform.BRANCHES:
    with platform.choosing(branch=path, interpret=True):
      yield
  else:
    yield


def _run(path: str, fn: Callable[[jax.Array], jax.Array], x: np.ndarray, axis: int) -> np.ndarray:
  """``fn(x)`` compiled for ``path``."""
  with _path(path):
    if path == "export":
      exported = jax.export.export(jax.jit(fn))(jax.ShapeDtypeStruct(x.shape, x.dtype))
      return np.asarray(jax.export.deserialize(exported.serialize()).call(x))
    if path == "sharded":
      mesh = jax.make_mesh((2,), ("d",), devices=jax.devices()[:2])
      spec = P(*([None] * axis), "d")
      return np.asarray(jax.jit(fn, in_shardings=NamedSharding(mesh, spec))(x))
    return np.asarray(jax.jit(fn)(x))


def _call(function: str, axis: int, promote: bool) -> Callable[[jax.Array], jax.Array]:
  index = {"index_dtype": jnp.int32} if function.startswith("arg") else {}
  return lambda a: dml.reduce(a, function, axis, keepdims=True, promote_integers=promote, **index)


def _integer_reference(wrapped: np.ndarray, function: str, axis: int, promote: bool) -> np.ndarray:
  """NumPy's reduction of the wrapped values, in REDUCE's result type (docs/semantics.rst)."""
  if function.startswith("arg"):
    return ref_reduce(wrapped, function, (axis,)).astype(np.int32)
  if promote and function not in _ORDER_ONLY:  # jnp's types: the default integer of the signedness (x64 off)
    wrapped = wrapped.astype(np.int32 if wrapped.dtype.kind == "i" else np.uint32)
  return ref_reduce(wrapped, function, (axis,))


def _integer_cases(
  dtype: np.dtype, producer: str, path: str, layout: tuple[tuple[int, ...], int], functions: tuple[str, ...]
) -> None:
  """``functions`` of ``producer``'s values, by bits against NumPy on the wrapped values."""
  (shape, axis), make = layout, PRODUCERS[producer]
  x = _input(dtype, shape, seed=TYPES.index(dtype) * 10 + LAYOUTS.index(layout))
  wrapped = _wrapped(producer, x)
  for function in functions:
    for promote in (False,) if function in _ORDER_ONLY else (False, True):
      what = f"{dtype.name} {function}({producer}) promote_integers={promote} {shape} axis {axis} on {path}"
      got = _run(path, lambda a, f=function, p=promote: _call(f, axis, p)(make(a)), x, axis)
      assert_bitwise_equal(got, _integer_reference(wrapped, function, axis, promote), what)


def _float_cases(dtype: np.dtype, producer: str, path: str, layout: tuple[tuple[int, ...], int]) -> None:
  """The floating-point functions of ``producer``'s values: by bits as the same program given the wrapped values
  (the summation order is the platform's), and within rounding of NumPy's."""
  (shape, axis), make = layout, PRODUCERS[producer]
  x = _input(dtype, shape, seed=TYPES.index(dtype) * 10 + LAYOUTS.index(layout))
  wrapped = _wrapped(producer, x)
  for function in FLOAT_FUNCTIONS:
    what = f"{dtype.name} {function}({producer}) {shape} axis {axis} on {path}"
    got = _run(path, lambda a, f=function: _call(f, axis, True)(make(a)), x, axis)
    assert_bitwise_equal(got, _run(path, _call(function, axis, True), wrapped, axis), f"{what}: fused vs given")
    with np.errstate(invalid="ignore", divide="ignore"):
      want = ref_reduce(wrapped.astype(np.float64), "average" if function == "mean" else function, (axis,))
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-5, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", TYPES[:2], ids=str)
def test_max_and_min_of_wrapped_8_bit_integers(dtype: np.dtype, path: str) -> None:
  """The issue's case on every path: MAX and MIN of int8 and uint8 that ``a - 3``, ``a + 3`` or ``a * 3`` wrapped
  (XLA:CPU's 8-bit reduction gives the saturated values' extremes: 124 for int8 ``a - 3``, where NumPy gives 127)."""
  for producer in PRODUCERS:
    for layout in LAYOUTS:
      _integer_cases(dtype, producer, path, layout, ("max", "min"))


@pytest.mark.sample(0)  # every value of every parameter by default; the whole product with -m long
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: f"{layout[0]}-axis{layout[1]}")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("dtype", TYPES, ids=str)
def test_every_function_of_wrapped_narrow_integers(
  dtype: np.dtype, producer: str, path: str, layout: tuple[tuple[int, ...], int]
) -> None:
  _integer_cases(dtype, producer, path, layout, INTEGER_FUNCTIONS)
  _float_cases(dtype, producer, path, layout)
