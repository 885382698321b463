"""The self-check's inputs: for every type, rows of bit patterns that hold its special values.

Floats: NaNs of both signs with payloads (quiet and signalling where the type tells them apart), ±inf, ±0, the
largest and smallest normal numbers, many ties and random bit patterns; every pattern of the 8-bit and 4-bit types
that is not subnormal. Integers: their extremes, 0, ±1 and random patterns. Subnormals are left out: a platform may
flush them to zero, and no result may depend on telling them from zero.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np

from dmljax._src.selfcheck import reference

_FLOATS = (
  "float32",
  "float16",
  "bfloat16",
  "float64",
  "float8_e4m3fn",
  "float8_e4m3fnuz",
  "float8_e5m2",
  "float8_e5m2fnuz",
  "float8_e4m3b11fnuz",
  "float8_e3m4",
  "float8_e4m3",
  "float8_e8m0fnu",
  "float4_e2m1fn",
)
_INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "int4", "uint4", "int2", "uint2")


def types() -> list[np.dtype]:
  """Every float and integer type this JAX has, in a fixed order (older JAX lacks some float8 variants)."""
  return [np.dtype(getattr(jnp, name)) for name in (*_FLOATS, *_INTEGERS) if hasattr(jnp, name)]


def needs_x64(dtype: np.dtype) -> bool:
  return np.dtype(dtype).itemsize == 8


def _subnormal(bits: np.ndarray, dtype: np.dtype) -> np.ndarray:
  values = reference.decoded(reference.from_bits(bits, dtype))
  with np.errstate(invalid="ignore"):
    return (values != 0) & (np.abs(values) < float(ml_dtypes.finfo(dtype).smallest_normal))


def special_bits(dtype: np.dtype) -> np.ndarray:
  """The bit patterns every row draws from (as uint64), none of them subnormal."""
  dtype = np.dtype(dtype)
  width = reference.bit_width(dtype)
  if not reference.is_float(dtype):
    info = ml_dtypes.iinfo(dtype)
    values = {info.min, info.min + 1, info.max - 1, info.max, 0, 1}
    if info.min < 0:
      values |= {-1, -2}
    else:
      values |= {info.max // 2, info.max // 2 + 1}
    mask = (1 << width) - 1
    return np.array(sorted(v & mask for v in values), np.uint64)
  if width <= 8:
    patterns = np.arange(1 << width, dtype=np.uint64)
  else:
    finfo = ml_dtypes.finfo(dtype)
    mantissa = int(finfo.nmant)
    exponent = ((1 << int(finfo.nexp)) - 1) << mantissa
    quiet = 1 << (mantissa - 1)
    one = int(reference.bits_of(np.array(1, dtype))[()])
    magnitudes = [
      0,  # zero
      exponent,  # infinity
      exponent | quiet,  # the quiet NaN
      exponent | quiet | 1,  # payloads
      exponent | quiet | (quiet >> 1),
      exponent | 1,  # signalling NaNs
      exponent | (quiet >> 1) | 3,
      exponent | ((1 << mantissa) - 1),
      exponent - 1,  # the largest finite
      1 << mantissa,  # the smallest normal
      one,
      one + 1,
    ]
    sign = 1 << (width - 1)
    patterns = np.array([m | s for m in magnitudes for s in (0, sign)], np.uint64)
  return patterns[~_subnormal(patterns, dtype)]


def _random_bits(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], pool: np.ndarray) -> np.ndarray:
  width = reference.bit_width(dtype)
  bits = rng.integers(0, 1 << 64, size=shape, dtype=np.uint64)
  if width < 64:
    bits &= np.uint64((1 << width) - 1)
  if reference.is_float(dtype):
    bad = _subnormal(bits, dtype)
    bits[bad] = rng.choice(pool, size=int(bad.sum()))
  return bits


def rows(dtype: np.dtype, shape: tuple[int, ...], largest_first: bool, seed: int) -> np.ndarray:
  """An array of ``shape`` (rows along the last axis) for a selection in the given direction.

  Row 0 (mod 4): random bit patterns with special values sprinkled in. Row 1: special values only, repeated (ties
  everywhere). Row 2: each special value twice, at random places, among copies of the value that comes last,
  so that even a small ``k`` sees them in order. Row 3: few values (ties across both zeros, both NaN signs or the
  integer extremes).
  """
  dtype = np.dtype(dtype)
  rng = np.random.default_rng(seed)
  pool = special_bits(dtype)
  n = shape[-1]
  flat = _random_bits(rng, dtype, (int(np.prod(shape[:-1], dtype=np.int64)), n), pool)
  last = pool[reference.ranked(reference.from_bits(pool, dtype), largest_first)[-1]]
  few = pool[rng.choice(len(pool), size=min(3, len(pool)), replace=False)]
  for r in range(flat.shape[0]):
    kind = r % 4
    if kind == 0:
      sprinkled = rng.random(n) < 0.25
      flat[r, sprinkled] = rng.choice(pool, size=int(sprinkled.sum()))
    elif kind == 1:
      flat[r] = rng.choice(pool, size=n)
    elif kind == 2:
      flat[r] = last
      chosen = np.repeat(rng.permutation(pool)[: max(1, n // 2)], 2)[:n]
      flat[r, rng.choice(n, size=len(chosen), replace=False)] = chosen
    else:
      flat[r] = rng.choice(few, size=n)
  return reference.from_bits(flat.reshape(shape), dtype)
