"""Index width: an index type that cannot index an axis (or the reduced element count) is a DescriptorError.

Shown with ``jax.eval_shape`` on ``jax.ShapeDtypeStruct`` inputs, so nothing of
the billions of elements is ever allocated: the check is on shapes alone, at
trace time. Where the index type can hold every index, the call must trace (no
error, no warning about a truncated dtype) and give the right output shape. The
wide code paths those huge shapes take (a sort instead of ``lax.top_k``'s int32
indices, uint32/int64 flat indices) are checked for values on small arrays by
lowering their thresholds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import ties
from reference import ref_arg_reduce, ref_top_k

import dmljax as dml
from dmljax._src import arg_reduce, reduce, top_k
from dmljax._src.strategies import sort

S = jax.ShapeDtypeStruct
T = dml.TensorDesc
F32, U32, I32, U64 = dml.DataType.FLOAT32, dml.DataType.UINT32, dml.DataType.INT32, dml.DataType.UINT64
INT32_MAX, UINT32_MAX = 2**31 - 1, 2**32 - 1


def _raises(f: Callable[..., Any], *args: Any, match: str) -> None:
  with pytest.raises(dml.DescriptorError, match=match):
    jax.eval_shape(f, *args)


def _shape_of(f: Callable[..., Any], *args: Any) -> Any:
  return jax.tree.map(lambda s: (s.shape, np.dtype(s.dtype)), jax.eval_shape(f, *args))


# --------------------------------------------------------------------------- TOP_K


@pytest.mark.parametrize(
  ("size", "index_dtype"),
  [(INT32_MAX + 2, jnp.int32), (UINT32_MAX + 2, jnp.uint32)],
)
def test_top_k_axis_too_long_for_the_index_type(size: int, index_dtype: Any) -> None:
  name = np.dtype(index_dtype).name
  _raises(
    lambda x: dml.top_k(x, 1, index_dtype=index_dtype),
    S((2, size), jnp.int8),
    match=rf"top_k: index_dtype {name} cannot index axis 1 of size {size} \(largest index {size - 1}.*"
    rf"; got index_dtype={name}",
  )


def test_top_k_descriptor_axis_too_long_for_uint32() -> None:
  size = UINT32_MAX + 2
  desc = dml.TopK1Desc(T(F32, (size, 1)), T(F32, (3, 1)), T(U32, (3, 1)), axis=0, k=3, axis_direction=0)
  _raises(
    lambda x: dml.execute(desc, x),
    S((size, 1), jnp.float32),
    match=r"TOP_K1: output_index_tensor\.data_type uint32 cannot index axis 0 of size 4294967297",
  )


def test_top_k_longest_axes_the_index_type_holds_trace() -> None:
  # Beyond int32 lax.top_k cannot index; uint32 indices up to 2**32 - 1 still must work.
  assert _shape_of(lambda x: dml.top_k(x, 2, index_dtype=jnp.uint32), S((UINT32_MAX + 1,), jnp.float32)) == (
    ((2,), np.dtype(np.float32)),
    ((2,), np.dtype(np.uint32)),
  )
  assert _shape_of(lambda x: dml.top_k(x, 2, index_dtype=jnp.int32), S((INT32_MAX + 1,), jnp.float32))[1] == (
    (2,),
    np.dtype(np.int32),
  )
  with jax.enable_x64(True):
    desc = dml.TopK1Desc(T(F32, (UINT32_MAX + 2,)), T(F32, (1,)), T(U64, (1,)), axis=0, k=1, axis_direction=1)
    assert _shape_of(lambda x: dml.execute(desc, x), S((UINT32_MAX + 2,), jnp.float32))[1] == (
      (1,),
      np.dtype(np.uint64),
    )


def test_top_k_along_an_axis_of_2_31_elements_traces_without_a_warning_with_its_tangent() -> None:
  """int32 indexes every position of an axis of 2**31 elements: no value or tangent gather converts the indices to
  int64, which warns without x64 (the suite's warnings are errors)."""
  x = S((INT32_MAX + 1,), jnp.float32)

  def jvp(x: jax.Array) -> Any:
    return jax.jvp(lambda x: dml.top_k(x, 2)[0], (x,), (x,))

  assert _shape_of(jvp, x) == (((2,), np.dtype(np.float32)), ((2,), np.dtype(np.float32)))


# --------------------------------------------------------------------------- ARGMIN / ARGMAX / REDUCE ARG*


@pytest.mark.parametrize("f", [dml.argmin, dml.argmax])
def test_arg_reduce_reduced_count_too_large_for_int32(f: Callable[..., Any]) -> None:
  # Each axis fits int32 on its own; the flat index over both does not.
  x = S((2**16, 2**15 + 1), jnp.int8)
  count = 2**16 * (2**15 + 1)
  _raises(
    lambda x: f(x, (0, 1), index_dtype=jnp.int32),
    x,
    match=rf"{f.__name__}: index_dtype int32 cannot index the {count} reduced elements of axis \(0, 1\)",
  )
  assert _shape_of(lambda x: f(x, (0, 1), keepdims=True, index_dtype=jnp.uint32), x) == ((1, 1), np.dtype(np.uint32))
  # Only the reduced axes count.
  assert _shape_of(lambda x: f(x, 1, keepdims=True, index_dtype=jnp.int32), x) == ((2**16, 1), np.dtype(np.int32))


def test_arg_reduce_descriptor_reduced_count_too_large_for_uint32() -> None:
  sizes = (2**16, 2**16 + 1)
  desc = dml.ArgMaxDesc(T(dml.DataType.INT8, sizes), T(U32, (1, 1)), axes=(1, 0), axis_direction=0)
  _raises(
    lambda x: dml.execute(desc, x),
    S(sizes, jnp.int8),
    match=r"ARGMAX: output_tensor\.data_type uint32 cannot index the",
  )


@pytest.mark.parametrize("function", ["argmin", "argmax"])
def test_reduce_arg_functions_check_the_index_type(function: str) -> None:
  sizes = (INT32_MAX + 2,)
  _raises(
    lambda x: dml.reduce(x, function, index_dtype=jnp.int32),
    S(sizes, jnp.int8),
    match="reduce: index_dtype int32 cannot index the",
  )
  desc = dml.ReduceDesc(dml.ReduceFunction[function.upper()], T(dml.DataType.INT8, sizes), T(I32, (1,)), axes=(0,))
  _raises(
    lambda x: dml.execute(desc, x), S(sizes, jnp.int8), match=r"REDUCE: output_tensor\.data_type int32 cannot index the"
  )
  got = _shape_of(lambda x: dml.reduce(x, function, keepdims=True, index_dtype=jnp.uint32), S(sizes, jnp.int8))
  assert got == ((1,), np.dtype(np.uint32))


def test_reduce_value_functions_have_no_index_limit() -> None:
  got = _shape_of(lambda x: dml.reduce(x, "sum", keepdims=True), S((INT32_MAX + 2,), jnp.float32))
  assert got == ((1,), np.dtype(np.float32))


# --------------------------------------------------------------------------- GATHER_ND / ONE_HOT positions


@pytest.mark.parametrize("index_dtype", [jnp.int32, jnp.uint32, jnp.int8])
def test_gather_nd_dimension_beyond_int32_needs_x64(index_dtype: Any) -> None:
  x, indices = S((3, INT32_MAX + 2), jnp.int8), S((5, 2), index_dtype)
  _raises(lambda x, i: dml.gather_nd(x, i), x, indices, match=r"x\.shape\[-1\] = 2147483649 needs 64-bit positions")
  with jax.enable_x64(True):
    assert _shape_of(lambda x, i: dml.gather_nd(x, i), x, indices) == ((5,), np.dtype(np.int8))


def test_gather_nd_descriptor_dimension_beyond_int32_needs_x64() -> None:
  sizes = (1, INT32_MAX + 2)
  desc = dml.GatherNDDesc(T(F32, sizes), T(U32, (1, 1)), T(F32, (1, 1)), 1, 1)
  _raises(
    lambda x, i: dml.execute(desc, x, i),
    S(sizes, jnp.float32),
    S((1, 1), jnp.uint32),
    match=r"GATHER_ND: input_tensor\.sizes\[-1\] = 2147483649 needs 64-bit positions",
  )


def test_gather_nd_deterministic_rows_beyond_int32_need_x64() -> None:
  x, indices = S((2**16, 2**15 + 1, 2), jnp.int8), S((4, 2), jnp.int32)
  _raises(lambda x, i: dml.gather_nd(x, i, deterministic=True), x, indices, match="deterministic=True.* needs 64-bit")
  assert _shape_of(lambda x, i: dml.gather_nd(x, i), x, indices) == ((4, 2), np.dtype(np.int8))


@pytest.mark.parametrize("index_dtype", [jnp.int32, jnp.uint32])
def test_one_hot_depth_beyond_int32_needs_x64(index_dtype: Any) -> None:
  depth = INT32_MAX + 2
  indices, values = S((), index_dtype), S((2,), jnp.int8)

  def f(i: jax.Array, v: jax.Array) -> jax.Array:
    return dml.one_hot(i, depth, on_value=v[1], off_value=v[0])

  _raises(f, indices, values, match="one_hot: depth = 2147483649 needs 64-bit positions")
  with jax.enable_x64(True):
    assert _shape_of(f, indices, values) == ((depth,), np.dtype(np.int8))


def test_one_hot_descriptor_depth_beyond_int32_needs_x64() -> None:
  depth = INT32_MAX + 2
  desc = dml.OneHotDesc(T(U32, (1, 1)), T(F32, (1, 2)), T(F32, (1, depth)), axis=1)
  _raises(
    lambda i, v: dml.execute(desc, i, v),
    S((1, 1), jnp.uint32),
    S((1, 2), jnp.float32),
    match=r"ONE_HOT: output_tensor\.sizes\[axis\] = 2147483649 needs 64-bit positions",
  )


# --------------------------------------------------------------------------- the wide paths, on small arrays


@pytest.fixture
def wide_paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
  """Sends every call through the code huge shapes take, and keeps those traces out of other tests."""
  jitted = (
    top_k._top_k_program,
    top_k._top_k,
    arg_reduce.arg_program,
    arg_reduce.arg_extreme,
    reduce._program,
    reduce._reduce,
  )
  for f in jitted:
    f.clear_cache()
  monkeypatch.setattr(sort, "LAX_TOP_K_LARGEST_INDEX", 2)
  monkeypatch.setattr(arg_reduce, "INT32_FLAT_LARGEST_INDEX", 2)
  yield
  for f in jitted:
    f.clear_cache()


def _tricky(shape: tuple[int, ...], seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed)
  pool = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 1.0, -1.0, 3.0], np.float32)
  return rng.choice(pool, size=shape)


@pytest.mark.parametrize("x64_on", [False, True])
@pytest.mark.usefixtures("wide_paths")
def test_wide_top_k_path_matches_reference(x64_on: bool) -> None:
  with jax.enable_x64(x64_on):
    assert "sort[" in str(jax.make_jaxpr(lambda x: dml.top_k(x, 2))(np.zeros(5, np.float32)))
    for seed, (shape, axis, k) in enumerate([((9,), 0, 4), ((3, 7, 2), 1, 7), ((5, 4), 0, 3)]):
      x = _tricky(shape, seed)
      for direction in ("increasing", "decreasing"):
        values, indices = dml.top_k(x, k, axis=axis, direction=direction)
        _, want = ref_top_k(x, k, axis, direction)
        np.testing.assert_array_equal(np.asarray(indices), want)
        np.testing.assert_array_equal(np.asarray(values), np.take_along_axis(x, want, axis=axis))


@pytest.mark.parametrize("x64_on", [False, True])
@pytest.mark.usefixtures("wide_paths")
def test_wide_arg_reduce_path_matches_reference(x64_on: bool) -> None:
  with jax.enable_x64(x64_on):
    wide = "int64" if x64_on else "uint32"
    assert f"iota[dimension=0 dtype={wide} " in str(jax.make_jaxpr(lambda x: dml.argmin(x))(np.zeros(5, np.float32)))
    cases = [((9,), (0,)), ((3, 4, 2), (2, 0)), ((2, 5), (0, 1))]
    for (seed, (shape, axes)), index_dtype in itertools.product(enumerate(cases), (jnp.uint32, jnp.int32)):
      x = _tricky(shape, seed)
      options = {"keepdims": True, "index_dtype": index_dtype}  # DirectML's layout, as the reference gives it
      for kind, f in (("min", dml.argmin), ("max", dml.argmax)):
        for direction in ("increasing", "decreasing"):
          want = ref_arg_reduce(x, axes, kind, direction)
          np.testing.assert_array_equal(np.asarray(f(x, axes, ties=ties(direction), **options)), want)
        first = ref_arg_reduce(x, axes, kind, "increasing")
        np.testing.assert_array_equal(np.asarray(dml.reduce(x, f"arg{kind}", axes, **options)), first)
