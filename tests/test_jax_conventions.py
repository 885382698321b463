"""The functional path gives JAX's answer, dtype and shape wherever JAX defines one (issue 35).

``dml.top_k``, ``dml.argmin``/``argmax``, ``dml.reduce`` and ``dml.one_hot`` are drop-ins for ``jax.lax.top_k``,
``jnp.argmin``/``argmax``, the ``jnp`` reducers and ``logsumexp``, and ``jax.nn.one_hot``. Each behaviour JAX's own
tests exercise and dmljax used to change is checked here, x64 off and on: index dtypes, ``jnp``'s result types and
integer promotion (and DirectML's in-type rule by ``promote_integers=False``), rank-0 arrays and Python numbers,
size-0 dimensions, bool, complex numbers, 64-bit NumPy input without x64, float indices and negative indices in
``one_hot``, ranks above 8, and the error class of a traced static argument.

Inputs are random bit patterns of every class (tests/bit_patterns.py) where the result is exact, and expected values
come from NumPy and the independent reference (tests/reference.py) in the result type, written here from the rules
in docs/semantics.rst ("Functional path conventions"); values are compared by bits. Where a transcendental function
makes the last bits implementation-defined (a mean of floats, a log-sum-exp), the dtype and shape are compared
exactly and the value within the type's rounding. The JAX call itself is called too, as the answer being matched.
"""

from __future__ import annotations

import contextlib
import warnings
import zlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import assert_bitwise_equal, x64
from bit_patterns import sample
from reference import ref_arg_reduce, ref_extreme, ref_one_hot, ref_reduce, ref_top_k

import dmljax as dml

SETTINGS = pytest.mark.parametrize("wide", [False, True], ids=["x64_off", "x64_on"])


@contextlib.contextmanager
def _x64(wide: bool) -> Iterator[None]:
  with x64() if wide else contextlib.nullcontext():
    yield


def _rng(*parts: object) -> np.random.Generator:
  return np.random.default_rng(zlib.crc32("/".join(map(str, parts)).encode()))


def _default_int(wide: bool) -> np.dtype:
  return np.dtype(np.int64 if wide else np.int32)


def _default_uint(wide: bool) -> np.dtype:
  return np.dtype(np.uint64 if wide else np.uint32)


def _summed_dtype(dtype: np.dtype, wide: bool, promote: bool = True) -> np.dtype:
  """jnp.sum's result type: bool counts as int32; narrower integers widen to the default (promote_integers)."""
  if dtype == np.dtype(bool):
    dtype = np.dtype(np.int32)
  if promote and dtype.kind in "iu":
    default = _default_int(wide) if dtype.kind == "i" else _default_uint(wide)
    return default if dtype.itemsize < default.itemsize else dtype
  return dtype


def _inexact_dtype(dtype: np.dtype) -> np.dtype:
  """jnp.mean's result type: floating and complex stay; bool and integers up to 32 bits float32, 64-bit float64."""
  if dtype.kind in "fc":
    return dtype
  return np.dtype(np.float64 if dtype.itemsize == 8 else np.float32)


_INTEGERS = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _integer_types(wide: bool) -> list[np.dtype]:
  return [np.dtype(n) for n in _INTEGERS if wide or np.dtype(n).itemsize < 8]


# ------------------------------------------------------------------------------------------------- index types
@SETTINGS
def test_arg_reductions_return_jaxs_default_integer_and_top_k_int32(wide: bool) -> None:
  with _x64(wide):
    x = sample(_rng("index", wide), np.float32, (5, 40))
    for name, kind in (("argmax", "max"), ("argmin", "min")):
      got = getattr(dml, name)(x, 1)
      want = ref_arg_reduce(x, (1,), kind, "increasing")[:, 0].astype(_default_int(wide))
      assert_bitwise_equal(got, want, name)
      assert got.dtype == getattr(jnp, name)(x, 1).dtype
      assert_bitwise_equal(dml.reduce(x, name, 1), want, f"reduce {name}")
      assert_bitwise_equal(getattr(dml, name)(x, 1, index_dtype=jnp.int32), want.astype(np.int32), name)
    values, indices = dml.top_k(x, 3)
    want_values, want_indices = ref_top_k(x, 3, -1, "decreasing")
    assert_bitwise_equal(values, want_values, "top_k values")
    assert_bitwise_equal(indices, want_indices.astype(np.int32), "top_k indices")  # int32 as jax.lax.top_k
    assert indices.dtype == jax.lax.top_k(x, 3)[1].dtype


# ------------------------------------------------------------------------------------- result types of reduce
@SETTINGS
@pytest.mark.sample(0)
@pytest.mark.parametrize("function", ["sum", "prod", "l1", "sum_square"])
def test_integer_sums_widen_as_jnp_sum_and_keep_their_type_by_keyword(wide: bool, function: str) -> None:
  with _x64(wide):
    for dtype in _integer_types(wide):
      x = sample(_rng(function, dtype, wide), dtype, (3, 16))
      wider = _summed_dtype(dtype, wide)
      # The reference wraps in the result type: jnp's widening first, then two's complement there.
      reference = {"prod": "multiply"}.get(function, function)
      want = ref_reduce(x.astype(wider), reference, (1,))[:, 0]
      got = dml.reduce(x, function, 1)
      assert_bitwise_equal(got, want, f"{function} {dtype}")
      if function in ("sum", "prod"):
        assert_bitwise_equal(got, getattr(jnp, function)(x, 1), f"jnp.{function} {dtype}")
        assert_bitwise_equal(
          dml.reduce(x, function, 1, promote_integers=False),
          getattr(jnp, function)(x, 1, promote_integers=False),
          f"jnp.{function}(promote_integers=False) {dtype}",
        )
      kept = dml.reduce(x, function, 1, promote_integers=False)
      in_type = _summed_dtype(dtype, wide, promote=False)  # bool: int32
      assert_bitwise_equal(kept, ref_reduce(x.astype(in_type), reference, (1,))[:, 0], f"{function} {dtype} kept")


def test_the_issue_example_sums_to_300_and_to_44_in_int8() -> None:
  small = np.array([100, 100, 100], np.int8)
  assert_bitwise_equal(dml.reduce(small, "sum"), np.int32(300), "widened")
  assert_bitwise_equal(dml.reduce(small, "sum", promote_integers=False), np.int8(44), "DirectML's rule")


@SETTINGS
def test_means_of_bool_and_integers_are_floating_as_jnp_mean(wide: bool) -> None:
  with _x64(wide):
    for dtype in _integer_types(wide):
      rng = _rng("mean", dtype, wide)
      # Small values and 8 per block: every sum and mean is exact in float32, so the bits are defined.
      x = (rng.integers(0, 2, (4, 8)) if dtype == np.dtype(bool) else rng.integers(0, 100, (4, 8))).astype(dtype)
      want_dtype = _inexact_dtype(dtype)
      want = (x.astype(np.float64).sum(1) / 8).astype(want_dtype)
      assert_bitwise_equal(dml.reduce(x, "mean", 1), want, f"mean {dtype}")
      assert_bitwise_equal(dml.reduce(x, "mean", 1), jnp.mean(x, 1), f"jnp.mean {dtype}")
      for function, jax_call in (("logsumexp", jax.nn.logsumexp), ("l2", None), ("log_sum", None)):
        got = dml.reduce(x, function, 1)
        assert got.dtype == want_dtype and got.shape == (4,), (function, dtype)
        wide_x = x.astype(np.float64)
        expected = {
          "logsumexp": np.log(np.exp(wide_x).sum(1)),
          "l2": np.sqrt((wide_x**2).sum(1)),
          "log_sum": np.log(wide_x.sum(1)),
        }[function]
        with np.errstate(divide="ignore"):
          np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=1e-6, err_msg=f"{function} {dtype}")
        if jax_call is not None:
          assert got.dtype == jax_call(x, 1).dtype
      if dtype != np.dtype(bool):
        with pytest.raises(dml.DescriptorError, match="needs a floating x when promote_integers=False"):
          dml.reduce(x, "mean", 1, promote_integers=False)


@SETTINGS
def test_bool_orders_false_below_true(wide: bool) -> None:
  with _x64(wide):
    x = sample(_rng("bool", wide), np.bool_, (6, 12))
    as_bytes = x.astype(np.uint8)
    for name in ("max", "min"):
      assert_bitwise_equal(dml.reduce(x, name, 1), ref_extreme(as_bytes, name, (1,))[:, 0].astype(bool), name)
      assert_bitwise_equal(dml.reduce(x, name, 1), getattr(jnp, name)(x, 1), f"jnp.{name}")
    for name, kind in (("argmax", "max"), ("argmin", "min")):
      want = ref_arg_reduce(as_bytes, (1,), kind, "increasing")[:, 0].astype(_default_int(wide))
      assert_bitwise_equal(getattr(dml, name)(x, 1), want, name)
      assert_bitwise_equal(getattr(dml, name)(x, 1), getattr(jnp, name)(x, 1), f"jnp.{name}")
    values, indices = dml.top_k(x, 4)
    want_values, want_indices = ref_top_k(as_bytes, 4, -1, "decreasing")
    assert_bitwise_equal(values, want_values.astype(bool), "top_k values")
    assert_bitwise_equal(indices, want_indices.astype(np.int32), "top_k indices")
    assert_bitwise_equal(values, jax.lax.top_k(x, 4)[0], "jax.lax.top_k values")


@SETTINGS
def test_complex_sums_products_means_and_lexicographic_extremes(wide: bool) -> None:
  with _x64(wide):
    for dtype in [np.complex64] + ([np.complex128] if wide else []):
      rng = _rng("complex", dtype, wide)
      # Small whole numbers: every sum, product and mean of 4 is exact, so the bits are defined.
      x = (rng.integers(-3, 4, (5, 4)) + 1j * rng.integers(-3, 4, (5, 4))).astype(dtype)
      _assert_complex_bits(dml.reduce(x, "sum", 1), x.sum(1), f"sum {dtype}")
      _assert_complex_bits(dml.reduce(x, "prod", 1), x.prod(1), f"prod {dtype}")
      _assert_complex_bits(dml.reduce(x, "mean", 1), (x.sum(1) / 4).astype(dtype), f"mean {dtype}")
      _assert_complex_bits(dml.reduce(x, "sum_square", 1), (x * x).sum(1), f"sum_square {dtype}")
      for name in ("max", "min"):  # NumPy's complex order is JAX's: the real part, then the imaginary part
        _assert_complex_bits(dml.reduce(x, name, 1), getattr(np, name)(x, 1), f"{name} {dtype}")
        _assert_complex_bits(dml.reduce(x, name, 1), getattr(jnp, name)(x, 1), f"jnp.{name} {dtype}")
      got = dml.reduce(x, "logsumexp", 1)
      want = jax.nn.logsumexp(x, 1)
      assert got.dtype == want.dtype == np.dtype(dtype)
      np.testing.assert_allclose(got, np.log(np.exp(x.astype(np.complex128)).sum(1)), rtol=1e-5)
      np.testing.assert_allclose(got, want, rtol=1e-5)
    nan = np.array([1 + 2j, complex(np.nan, 0), 9j, complex(np.nan, 5)], np.complex64)
    got = np.asarray(dml.reduce(nan, "max"))
    assert np.isnan(got.real) and got.imag == 5  # a NaN real part propagates, with the largest of its imaginaries


def _assert_complex_bits(got: Any, want: Any, what: str) -> None:
  """Same complex dtype and shape, and the same bits in the real and the imaginary parts."""
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
  assert_bitwise_equal(got.real, want.real, f"{what} (real)")
  assert_bitwise_equal(got.imag, want.imag, f"{what} (imaginary)")


@pytest.mark.parametrize(
  ("call", "hint"),
  [
    (lambda x: dml.top_k(x, 1), "top_k needs real x"),
    (lambda x: dml.argmax(x), "argmax needs real x"),
    (lambda x: dml.reduce(x, "l1"), r"pass jnp.abs\(x\), or x.real"),
  ],
)
def test_complex_orderings_and_magnitudes_are_refused_with_what_to_pass(call: Any, hint: str) -> None:
  with pytest.raises(dml.DescriptorError, match=hint):
    call(np.array([1j, 2], np.complex64))


# ------------------------------------------------------------------------------------------- scalars and size 0
@SETTINGS
def test_rank_0_arrays_and_python_numbers_are_one_element(wide: bool) -> None:
  with _x64(wide):
    floating = np.dtype(np.float64 if wide else np.float32)
    assert_bitwise_equal(dml.reduce(1.0, "logsumexp"), np.array(1.0, floating), "logsumexp(1.0)")
    assert_bitwise_equal(dml.reduce(2.5, "sum", keepdims=True), np.array(2.5, floating), "sum(2.5)")
    assert_bitwise_equal(dml.reduce(3, "sum"), np.array(3, _default_int(wide)), "sum(3)")
    assert_bitwise_equal(dml.reduce(True, "sum"), np.array(1, _default_int(wide)), "sum(True)")
    assert_bitwise_equal(dml.reduce(np.int8(-7), "max"), np.int8(-7), "max(int8)")
    assert_bitwise_equal(dml.argmax(np.float32(np.nan)), np.array(0, _default_int(wide)), "argmax(nan)")
    assert_bitwise_equal(dml.argmin(5, keepdims=True), np.array(0, _default_int(wide)), "argmin(5)")
    assert_bitwise_equal(dml.one_hot(2, 4), np.array([0, 0, 1, 0], floating), "one_hot(2)")
    assert dml.reduce(1.0, "logsumexp").dtype == jax.nn.logsumexp(1.0).dtype
    with pytest.raises(dml.DescriptorError, match="axis must name no axis for rank 0"):
      dml.argmax(3.0, 0)
    with pytest.raises(dml.DescriptorError, match="x must have rank 1 or more"):
      dml.top_k(3.0, 1)  # as jax.lax.top_k


@SETTINGS
def test_size_0_dimensions_give_jnps_results(wide: bool) -> None:
  with _x64(wide):
    empty = np.zeros((0, 4), np.float32)
    assert_bitwise_equal(dml.reduce(empty, "sum", 0), np.zeros(4, np.float32), "sum")
    assert_bitwise_equal(dml.reduce(empty, "prod", 0), np.ones(4, np.float32), "prod")
    assert_bitwise_equal(dml.reduce(empty, "l2", 0, keepdims=True), np.zeros((1, 4), np.float32), "l2")
    assert_bitwise_equal(dml.reduce(empty, "logsumexp", 0), np.full(4, -np.inf, np.float32), "logsumexp")
    assert_bitwise_equal(dml.reduce(empty, "log_sum", 0), np.full(4, -np.inf, np.float32), "log_sum")
    assert_bitwise_equal(dml.reduce(empty, "mean", 0), jnp.mean(empty, 0), "mean")  # NaN, as jnp's 0 / 0
    complex_type = np.dtype(np.complex128 if wide else np.complex64)
    empty_complex = np.zeros((0, 3), complex_type)
    for name, x in (
      ("complex", empty_complex),
      ("int8", np.zeros((0, 3), np.int8)),
      ("float16", np.zeros((0, 3), np.float16)),
    ):
      mean = dml.reduce(x, "mean", 0)
      assert_bitwise_equal(mean, jnp.mean(x, 0), f"{name} mean")  # jnp's bits: complex nan+nanj (its 0 / 0)
      assert_bitwise_equal(jax.jit(lambda v: dml.reduce(v, "mean", 0))(x), jnp.mean(x, 0), f"{name} mean, jit")
    assert np.isnan(np.asarray(dml.reduce(empty_complex, "mean", 0)).imag).all()  # not nan+0j
    assert_bitwise_equal(dml.reduce(np.zeros((0, 4), np.int8), "sum", 0), np.zeros(4, _default_int(wide)), "int8")
    assert_bitwise_equal(dml.reduce(empty, "max", 1), np.zeros((0,), np.float32), "max along a non-empty axis")
    for fn, jnp_fn in (("sum", jnp.sum), ("prod", jnp.prod), ("mean", jnp.mean), ("max", None)):
      got = dml.reduce(empty, fn, 1 if fn == "max" else 0)
      if jnp_fn is not None:
        assert got.shape == jnp_fn(empty, 0).shape and got.dtype == jnp_fn(empty, 0).dtype
    for axis in (0, None):
      with pytest.raises(dml.DescriptorError, match="zero-size array to reduction operation max"):
        dml.reduce(empty, "max", axis)
    two_by_zero = np.zeros((2, 0), np.float32)
    assert_bitwise_equal(dml.argmax(two_by_zero, 0), np.zeros((0,), _default_int(wide)), "argmax (2, 0) axis 0")
    assert_bitwise_equal(dml.argmax(two_by_zero, 0), jnp.argmax(two_by_zero, 0), "jnp.argmax (2, 0) axis 0")
    for axis in (1, None):
      with pytest.raises(dml.DescriptorError, match="attempt to get argmax of an empty sequence"):
        dml.argmax(two_by_zero, axis)
    values, indices = dml.top_k(np.zeros((0, 5), np.float32), 2)
    assert_bitwise_equal(values, np.zeros((0, 2), np.float32), "top_k values")
    assert_bitwise_equal(indices, np.zeros((0, 2), np.int32), "top_k indices")
    values, indices = dml.top_k(two_by_zero, 0)  # k = 0, as jax.lax.top_k accepts
    assert values.shape == indices.shape == jax.lax.top_k(two_by_zero, 0)[0].shape == (2, 0)
    assert_bitwise_equal(dml.top_k(np.ones((2, 3), np.float32), 0)[1], np.zeros((2, 0), np.int32), "k=0")
    with pytest.raises(dml.DescriptorError, match=r"0 <= k <= x.shape\[axis\] \(= 0\)"):
      dml.top_k(two_by_zero, 1)
    floating = np.dtype(np.float64 if wide else np.float32)
    assert_bitwise_equal(dml.one_hot(np.zeros((0, 3), np.int32), 4), np.zeros((0, 3, 4), floating), "one_hot")
    assert_bitwise_equal(dml.one_hot(np.array([1, 2], np.int32), 0), np.zeros((2, 0), floating), "depth 0")
    assert dml.one_hot(np.zeros((0, 3), np.int32), 4).shape == jax.nn.one_hot(np.zeros((0, 3), np.int32), 4).shape


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # JAX's narrowing of 1e300 warns
def test_64_bit_numpy_input_without_x64_is_narrowed_as_jax_narrows_it() -> None:
  assert not jax.config.read("jax_enable_x64")
  x = np.array([[1.0, 1.0 + 1e-12, 0.1], [np.pi, -np.e, 1e300]])  # ties, rounding and an overflow once narrowed
  with np.errstate(over="ignore"):
    narrow = x.astype(np.float32)
  assert_bitwise_equal(dml.argmax(x, 1), jnp.argmax(x, 1), "argmax")
  assert_bitwise_equal(dml.argmax(x, 1), ref_arg_reduce(narrow, (1,), "max", "increasing")[:, 0].astype(np.int32))
  assert_bitwise_equal(dml.reduce(x, "max", 1), ref_extreme(narrow, "max", (1,))[:, 0], "max")
  assert_bitwise_equal(dml.top_k(x, 2)[0], ref_top_k(narrow, 2, -1, "decreasing")[0], "top_k")
  integers = np.array([2**40 + 5, 7])  # int64: converted to int32 as jnp.asarray converts it
  assert_bitwise_equal(dml.reduce(integers, "sum"), jnp.sum(integers), "sum of int64")
  assert_bitwise_equal(dml.one_hot(np.array([1, 3]), 4), jax.nn.one_hot(np.array([1, 3]), 4), "one_hot")


# --------------------------------------------------------------------------------------------------- one_hot
@SETTINGS
def test_one_hot_negative_indices_are_all_off_unless_counted_from_the_end(wide: bool) -> None:
  with _x64(wide):
    for dtype in _integer_types(wide)[1:]:
      indices = sample(_rng("one_hot", dtype, wide), dtype, (40,))
      off, on = np.float32(-2.5), np.float32(7.0)
      got = dml.one_hot(indices, 16, on_value=on, off_value=off)
      as_int = indices.astype(np.float64)  # exact for every index type here, and no wrap-around
      want = np.where(np.arange(16) == as_int[:, None], on, off).astype(np.float32)
      assert_bitwise_equal(got, want, f"default {dtype}")
      assert_bitwise_equal(dml.one_hot(indices, 16), jax.nn.one_hot(indices, 16), f"jax.nn.one_hot {dtype}")
      from_end = dml.one_hot(indices, 16, on_value=on, off_value=off, negative_indices="from_end")
      assert_bitwise_equal(from_end, ref_one_hot(indices[:, None], np.array([off, on]), 16, 1), f"from_end {dtype}")
    padding = dml.one_hot(np.array([2, -1, 0], np.int32), 3)
    assert padding.tolist() == [[0, 0, 1], [0, 0, 0], [1, 0, 0]]  # -1 as padding gives zeros
    with pytest.raises(dml.DescriptorError, match="negative_indices must be 'off'"):
      dml.one_hot(np.array([1]), 3, negative_indices="wrap")


def test_one_hot_float_indices_set_the_position_they_equal_with_a_deprecation_warning() -> None:
  indices = np.array([1.0, 1.5, -1.0, np.nan, np.inf, 2.0, -0.0, 3.0], np.float32)
  want = np.where(np.arange(3) == indices[:, None], 1.0, 0.0).astype(np.float32)  # NaN, inf, 1.5, 3: no position
  for dtype in (np.float32, np.float16, jnp.bfloat16):
    with pytest.warns(DeprecationWarning, match="indices should be integer-typed"):
      got = dml.one_hot(indices.astype(dtype), 3)
    assert_bitwise_equal(got, want, str(np.dtype(dtype)))
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", DeprecationWarning)
      assert_bitwise_equal(got, jax.nn.one_hot(indices.astype(dtype), 3), f"jax.nn.one_hot {np.dtype(dtype)}")
  with pytest.warns(DeprecationWarning):
    from_end = dml.one_hot(indices, 3, negative_indices="from_end")
  assert from_end[2].tolist() == [0, 0, 1]  # -1.0 counts from the end by keyword
  with pytest.warns(DeprecationWarning):
    complex_hot = dml.one_hot(np.array([1 + 0j, 1 + 1j], np.complex64), 3)
  assert complex_hot.tolist() == [[0, 1, 0], [0, 0, 0]]
  with pytest.raises(dml.DescriptorError, match="bool is no index"):
    dml.one_hot(np.array([True]), 3)


# ------------------------------------------------------------------------------------------------- any rank
def test_ranks_above_8_are_computed_as_jax_computes_them() -> None:
  x = sample(_rng("rank9"), np.float32, (2, 3, 1, 2, 2, 1, 2, 3, 2))
  for axes in ((0, 4, 8), (3,), None, ()):
    reduced = tuple(range(9)) if axes is None else axes
    want = ref_extreme(x, "max", reduced) if reduced else x
    got = dml.reduce(x, "max", axes, keepdims=True)
    assert_bitwise_equal(got, want, f"max {axes}")
  for axes in ((0, 4, 8), (7,), None):
    reduced = tuple(range(9)) if axes is None else axes
    want = ref_arg_reduce(x, reduced, "min", "decreasing").astype(np.int32)
    assert_bitwise_equal(dml.argmin(x, axes, ties="last", keepdims=True), want, f"argmin {axes}")
  values, indices = dml.top_k(x, 2, axis=7, direction="increasing")
  want_values, want_indices = ref_top_k(x, 2, 7, "increasing")
  assert_bitwise_equal(values, want_values, "top_k values")
  assert_bitwise_equal(indices, want_indices.astype(np.int32), "top_k indices")
  integers = np.arange(2 * 3 * 2**7, dtype=np.int32).reshape(2, 3, *(2,) * 7) % 5 - 1
  for axis in (0, 4, -1):
    got = dml.one_hot(integers, 4, axis=axis)
    assert_bitwise_equal(got, jax.nn.one_hot(integers, 4, axis=axis), f"one_hot axis {axis}")


# ------------------------------------------------------------------------------------------------ error class
@pytest.mark.parametrize(
  "call",
  [
    lambda: jax.jit(dml.top_k)(jnp.ones(4), 2),
    lambda: jax.jit(dml.one_hot)(jnp.array([0, 2]), 3),
    lambda: jax.jit(lambda x, a: dml.reduce(x, "sum", a))(jnp.ones((2, 3)), 1),
    lambda: jax.jit(lambda x, a: dml.argmax(x, a))(jnp.ones((2, 3)), 1),
  ],
  ids=["top_k_k", "one_hot_depth", "reduce_axis", "argmax_axis"],
)
def test_a_traced_static_argument_is_jaxs_concretization_error_too(call: Any) -> None:
  with pytest.raises(jax.errors.ConcretizationTypeError) as info:
    call()
  assert isinstance(info.value, dml.DescriptorError) and isinstance(info.value, dml.StaticArgumentError)
  assert "static" in str(info.value) and "jax.jit" in str(info.value)


def test_other_errors_are_not_concretization_errors() -> None:
  with pytest.raises(dml.DescriptorError) as info:
    dml.top_k(jnp.ones(4), 5)
  assert not isinstance(info.value, jax.errors.ConcretizationTypeError)
