"""The one order key (dmljax._src.rank_keys) over every type JAX has: every bit pattern of the types of up to 16 bits,
random patterns and the special values of the wider ones.

The order checked is the library's, decoded independently here from the values NumPy/ml_dtypes give the
patterns: NaN above everything (every NaN equal), -0.0 equal to +0.0, integers exact. The kernel keys of
:mod:`kernel_keys` are views of the rank key and are checked to keep its order and invert where it does; so are
the unsigned view the sampling search bisects, and IEEE ``maximum``'s key (REDUCE MAX/MIN), which merges nothing.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _helpers import x64

from dmljax._src import rank_keys
from dmljax._src.strategies import kernel_keys

NARROW_FLOATS = sorted(name for name in dir(jnp) if name.startswith(("float8_", "float4_")))
NARROW = [*NARROW_FLOATS, "float16", "bfloat16", "int2", "uint2", "int4", "uint4", "int8", "uint8", "int16", "uint16"]
WIDE = ["float32", "int32", "uint32"]
WIDE_64 = ["float64", "int64", "uint64"]


def _width(dtype: np.dtype) -> int:
  return int(ml_dtypes.finfo(dtype).bits if jnp.issubdtype(dtype, jnp.floating) else ml_dtypes.iinfo(dtype).bits)


def _every_pattern(dtype: np.dtype) -> np.ndarray:
  """Every element of a type of up to 16 bits, as NumPy holds it (sub-byte types one a byte)."""
  width = _width(dtype)
  patterns = np.arange(1 << width, dtype=np.uint16 if width == 16 else np.uint8)
  if width >= 8 or jnp.issubdtype(dtype, jnp.floating):
    return patterns.view(dtype)
  # Sub-byte integers: the pattern's value, two's complement for the signed ones.
  values = patterns.astype(np.int16)
  if jnp.issubdtype(dtype, jnp.signedinteger):
    values = np.where(values >= 1 << (width - 1), values - (1 << width), values)
  return values.astype(dtype)


def _wide_sample(dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
  width = _width(dtype)
  unsigned = np.dtype(f"uint{width}")
  raw = rng.integers(0, np.iinfo(unsigned).max, 4000, dtype=unsigned, endpoint=True)
  if jnp.issubdtype(dtype, jnp.floating):
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0], dtype).view(unsigned)
    sign = unsigned.type(1 << (width - 1))
    nan = np.array(np.nan, dtype).view(unsigned)
    special = np.concatenate([special, [nan | 1, nan | 1 | sign, (nan >> 1) | 1, unsigned.type(1)]])
  else:
    info = np.iinfo(dtype)
    special = np.array([info.min, info.min + 1, 0, 1, info.max - 1, info.max], dtype).view(unsigned)
  return np.concatenate([raw, special, raw[:50]]).view(dtype)


def _order_of(values: np.ndarray) -> np.ndarray:
  """An integer rank per element in the library's order, from the decoded values (the independent reference)."""
  if jnp.issubdtype(values.dtype, jnp.floating):
    with np.errstate(invalid="ignore"):
      decoded = values.astype(np.float64)
    nan = np.isnan(decoded)
    decoded = np.where(decoded == 0, 0.0, decoded)  # -0.0 == +0.0
    distinct = np.unique(decoded[~nan])
    rank = np.searchsorted(distinct, np.where(nan, 0.0, decoded))
    return np.where(nan, len(distinct), rank)
  distinct = np.unique(values)
  return np.searchsorted(distinct, values)


def _assert_same_order(key: np.ndarray, rank: np.ndarray, what: str) -> None:
  """``key`` orders the elements as ``rank`` does: equal where equal, less where less."""
  by_key = np.argsort(key, kind="stable")
  assert np.all(np.diff(rank[by_key]) >= 0), f"{what}: the key's order is not the value order"
  assert np.array_equal(np.diff(key[by_key]) == 0, np.diff(rank[by_key]) == 0), f"{what}: ties differ"


@functools.partial(jax.jit, static_argnums=1)
def _round_trip(x: jax.Array, dtype: np.dtype) -> tuple[jax.Array, jax.Array, jax.Array]:
  key = rank_keys.ascending_key(x)
  value, exact = rank_keys.value_of_key(key, dtype)
  return key, value, exact


def _patterns(values: np.ndarray) -> np.ndarray:
  dtype = values.dtype
  if _width(dtype) < 8 and not jnp.issubdtype(dtype, jnp.floating):
    return values.astype(np.int16) & ((1 << _width(dtype)) - 1)
  return values.view(f"uint{dtype.itemsize * 8}").astype(np.int64)


def _check_type(values: np.ndarray) -> None:
  dtype = values.dtype
  key, back, exact = (np.asarray(a) for a in _round_trip(jnp.asarray(values), dtype))
  assert key.dtype == (np.int64 if _width(dtype) == 64 else np.int32)
  _assert_same_order(key.astype(np.int64) if key.dtype != np.int64 else key, _order_of(values), dtype.name)
  # The inverse gives back the very pattern wherever no other pattern has the key, else one with the same key.
  assert np.array_equal(_patterns(back)[exact], _patterns(values)[exact]), dtype.name
  assert np.array_equal(np.asarray(rank_keys.ascending_key(jnp.asarray(back))), key), dtype.name
  merged = ~exact
  if jnp.issubdtype(dtype, jnp.floating):
    with np.errstate(invalid="ignore"):
      decoded = values.astype(np.float64)
    assert np.all(np.isnan(decoded[merged]) | (decoded[merged] == 0)), f"{dtype.name}: only zeros and NaNs merge"
  else:
    assert not merged.any()
  low, high = rank_keys.key_range(dtype)
  if _width(dtype) <= 16:
    assert (key.min(), key.max()) == (low, high), dtype.name
    for largest, want in ((True, high), (False, low)):
      bits = int(rank_keys.extreme_bits(dtype, largest=largest)) & ((1 << _width(dtype)) - 1)
      assert key[_patterns(values) == bits][0] == want, dtype.name


@pytest.mark.parametrize("name", NARROW)
def test_every_pattern_of_every_narrow_type_keys_in_the_value_order(name: str) -> None:
  _check_type(_every_pattern(np.dtype(getattr(jnp, name))))


@pytest.mark.parametrize("name", WIDE)
def test_32_bit_types_key_in_the_value_order(name: str) -> None:
  _check_type(_wide_sample(np.dtype(getattr(jnp, name)), np.random.default_rng(701)))


@pytest.mark.parametrize("name", WIDE_64)
def test_64_bit_types_key_in_the_value_order(name: str) -> None:
  with x64():
    _check_type(_wide_sample(np.dtype(getattr(jnp, name)), np.random.default_rng(702)))


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e8m0fnu", "float4_e2m1fn"])
def test_layouts_without_infinity_or_sign(name: str) -> None:
  """The types the IEEE layout does not describe: their NaN and extremes, read off the type."""
  dtype = np.dtype(getattr(jnp, name))
  layout = rank_keys.layout(dtype)
  finfo = ml_dtypes.finfo(dtype)
  largest = int(np.array(finfo.max, dtype).view(np.uint8)) & (0x7F if layout.signed else 0xFF)
  assert layout.top == largest  # no infinity: the largest finite is the top
  assert layout.nan_at_sign == name.endswith("fnuz")
  assert layout.signed == (name != "float8_e8m0fnu")
  assert layout.has_nan == (name != "float4_e2m1fn")


@pytest.mark.parametrize("name", [*NARROW_FLOATS, "float16", "bfloat16", "int4", "uint8", "int16"])
@pytest.mark.parametrize("largest_first", [True, False])
def test_ordinal_kernel_key_is_the_rank_key_as_an_exact_float(name: str, largest_first: bool) -> None:
  values = _every_pattern(np.dtype(getattr(jnp, name)))
  x = jnp.asarray(values)
  key = np.asarray(kernel_keys.ordinal(x, largest_first))
  assert key.dtype == np.float32 and not np.any(np.isnan(key)) and not np.any(np.signbit(key) & (key == 0))
  rank = _order_of(values)
  _assert_same_order(key, rank if largest_first else -rank, name)
  back, exact = kernel_keys.ordinal_inverse(jnp.asarray(key), values.dtype, largest_first)
  assert np.array_equal(_patterns(np.asarray(back))[np.asarray(exact)], _patterns(values)[np.asarray(exact)])


def _values_for(name: str) -> np.ndarray:
  dtype = np.dtype(getattr(jnp, name))
  return _every_pattern(dtype) if _width(dtype) <= 16 else _wide_sample(dtype, np.random.default_rng(703))


@pytest.mark.parametrize("name", ["float16", "bfloat16", "int8", "uint16", "float32", "int32"])
def test_the_unsigned_view_keeps_the_keys_order_and_width(name: str) -> None:
  values = _values_for(name)
  unsigned = np.asarray(rank_keys.unsigned_ascending_key(jnp.asarray(values)))
  assert unsigned.dtype == np.uint32, unsigned.dtype  # the key's width: 32 bits up to 32-bit types
  _assert_same_order(unsigned.astype(np.int64), _order_of(values), name)


def _decoded(values: np.ndarray) -> np.ndarray:
  with np.errstate(invalid="ignore"):
    return values.astype(np.float64)


def _ieee_rank(values: np.ndarray, find_max: bool) -> np.ndarray:
  """The reference for the numbers (NaN left out): by value (MIN: reversed), -0.0 below +0.0 (MIN: above)."""
  decoded = _decoded(values)
  negative_zero = (decoded == 0) & np.signbit(decoded)
  tie = np.where(decoded == 0, np.where(negative_zero == find_max, 0, 1), 0)  # MAX: -0.0 first; MIN: +0.0 first
  pairs = np.stack([decoded if find_max else -decoded, tie], 1)
  _, rank = np.unique(pairs, axis=0, return_inverse=True)  # the dense rank in lexicographic order
  return rank.reshape(-1)


@pytest.mark.parametrize("find_max", [True, False], ids=["max", "min"])
@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
def test_the_ieee_maximum_key_orders_as_ieee_maximum_and_inverts(name: str, find_max: bool) -> None:
  values = _values_for(name)
  dtype = values.dtype
  signed = np.dtype(f"int{_width(dtype)}")
  assert rank_keys.has_ieee_maximum_key(dtype)
  key = np.asarray(rank_keys.ieee_maximum_key(jnp.asarray(values.view(signed)), dtype, find_max=find_max))
  back = np.asarray(rank_keys.bits_of_ieee_maximum_key(jnp.asarray(key), dtype, find_max=find_max))
  assert np.array_equal(back, values.view(signed)), f"{name}: the inverse does not give back every pattern"
  assert len(np.unique(key)) == len(np.unique(values.view(signed))), f"{name}: two patterns share a key"
  key = key.astype(np.int64)
  nan = np.isnan(_decoded(values))
  # Numbers in IEEE maximum's (minimum's) order, every NaN above every number.
  _assert_same_order(key[~nan], _ieee_rank(values[~nan], find_max), name)
  assert key[nan].min() > key[~nan].max(), f"{name}: a NaN keys below a number"
