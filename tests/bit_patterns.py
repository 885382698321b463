"""Inputs from random bit patterns of every class, for every numeric type JAX has (not a test module).

Floats: random bits over the whole width, then the special classes planted at random places: NaNs of both
signs with payloads (quiet and signalling), +-inf, +-0, the largest finite values and the smallest normal
ones, and heavy ties (values repeated from a small pool). A type without one of those classes (no
infinity, no -0.0, no NaN, no sign) simply has none: the classes are found by decoding every bit pattern
of types up to 16 bits (ml_dtypes' cast to float32) and built from the IEEE layout for float32 and float64.
Subnormals are replaced by the smallest normal value of their sign: dmljax may flush them to zero, so no
result may depend on them. Integers: random bits, both extremes, zero, ties. Complex numbers: a real and an
imaginary part drawn each as the float type of half the width.

Written without dmljax: the matrix's references read the same arrays.
"""

from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np


def _is_float(dtype: np.dtype) -> bool:
  return dtype.kind == "f" or dtype.name.startswith(("bfloat16", "float8", "float6", "float4"))


def width(dtype: Any) -> int:
  """The number of bits of one value (4 for float4_e2m1fn, int4 and uint4)."""
  dtype = np.dtype(dtype)
  if dtype.kind == "c":
    return dtype.itemsize * 8
  if _is_float(dtype):
    return int(ml_dtypes.finfo(dtype).bits)
  if dtype == np.dtype(bool):
    return 1
  return int(ml_dtypes.iinfo(dtype).bits)


def _storage(dtype: np.dtype) -> np.dtype:
  return np.dtype(f"u{dtype.itemsize}")


def from_bits(patterns: np.ndarray, dtype: Any) -> np.ndarray:
  """The array of ``dtype`` whose bit patterns are ``patterns`` (unsigned integers, within the type's width)."""
  dtype = np.dtype(dtype)
  return np.asarray(patterns).astype(_storage(dtype)).view(dtype)


def bits_of(x: np.ndarray) -> np.ndarray:
  x = np.asarray(x)
  return x.view(_storage(x.dtype))


def _decoded(patterns: np.ndarray, dtype: np.dtype) -> np.ndarray:
  """The float64 values of float bit patterns (ml_dtypes' decoding; NaNs stay NaNs)."""
  with np.errstate(invalid="ignore"):
    return from_bits(patterns, dtype).astype(np.float64)


@functools.cache
def _float_classes(dtype: np.dtype) -> dict[str, np.ndarray]:
  """Bit patterns by class: ``nan``, ``inf``, ``zero``, ``extreme`` (largest, smallest normal), ``normal``."""
  bits = width(dtype)
  info = ml_dtypes.finfo(dtype)
  tiny = float(info.smallest_normal)
  if bits <= 16:
    patterns = np.arange(1 << bits, dtype=np.uint64)
    values = _decoded(patterns, dtype)
  else:
    exponent, mantissa = int(info.nexp), int(info.nmant)
    top = ((1 << exponent) - 1) << mantissa
    sign = 1 << (bits - 1)
    payloads = [1, 2, 3, 1 << (mantissa - 1), (1 << (mantissa - 1)) | 5, (1 << mantissa) - 1]
    special = [top | p for p in payloads] + [sign | top | p for p in payloads]
    special += [top, sign | top, 0, sign, top - 1, sign | (top - 1), 1 << mantissa, sign | (1 << mantissa)]
    patterns = np.array(special, np.uint64)
    values = _decoded(patterns, dtype)
  finite = np.isfinite(values)
  classes = {
    "nan": patterns[np.isnan(values)],
    "inf": patterns[np.isinf(values)],
    "zero": patterns[values == 0],
    "extreme": patterns[finite & ((np.abs(values) == float(info.max)) | (np.abs(values) == tiny))],
  }
  if bits <= 16:
    classes["normal"] = patterns[finite & (np.abs(values) >= tiny)]
  return {name: p for name, p in classes.items() if p.size}


def _no_subnormals(patterns: np.ndarray, dtype: np.dtype) -> np.ndarray:
  """Subnormal patterns replaced by the smallest normal value of their sign."""
  values = _decoded(patterns, dtype)
  tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
  subnormal = (values != 0) & (np.abs(values) < tiny)
  if not subnormal.any():
    return patterns
  replacement = bits_of(np.copysign(tiny, values[subnormal]).astype(dtype)).astype(patterns.dtype)
  patterns = patterns.copy()
  patterns[subnormal] = replacement
  return patterns


def _random_patterns(rng: np.random.Generator, dtype: np.dtype, size: int) -> np.ndarray:
  bits = width(dtype)
  if _is_float(dtype) and bits <= 16:
    # Every pattern but subnormals, uniformly.
    return rng.choice(_float_classes(dtype)["normal"], size).astype(np.uint64)
  high = rng.integers(0, 1 << min(bits, 32), size, dtype=np.uint64)
  if bits > 32:
    high = (high << np.uint64(bits - 32)) | rng.integers(0, 1 << (bits - 32), size, dtype=np.uint64)
  return high


def _integer_extremes(dtype: np.dtype) -> np.ndarray:
  info = ml_dtypes.iinfo(dtype)
  values = [int(info.min), int(info.max), 0, int(info.min) + 1, int(info.max) - 1]
  wide = np.uint64 if int(info.min) == 0 else np.int64
  return bits_of(np.array(values, wide).astype(dtype)).astype(np.uint64)


def sample(rng: np.random.Generator, dtype: Any, shape: tuple[int, ...], *, ties: bool = True) -> np.ndarray:
  """An array of ``dtype`` and ``shape`` drawn from random bit patterns, every special class planted.

  ``ties``: about half the elements are drawn from a pool of a few values (special ones among them),
  so equal values, equal NaNs and +-0 meet often.
  """
  dtype = np.dtype(dtype)
  size = int(np.prod(shape))
  if dtype == np.dtype(bool):
    return rng.integers(0, 2, shape).astype(bool)
  if dtype.kind == "c":  # the real and the imaginary parts, each drawn as the float type of half the width
    part = np.dtype(f"f{dtype.itemsize // 2}")
    out = np.empty(shape, dtype)
    out.real, out.imag = sample(rng, part, shape, ties=ties), sample(rng, part, shape, ties=ties)
    return out
  patterns = _random_patterns(rng, dtype, size)
  if _is_float(dtype):
    specials = np.concatenate([p for name, p in _float_classes(dtype).items() if name != "normal"])
  else:
    specials = _integer_extremes(dtype)
  patterns = _no_subnormals(patterns, dtype) if _is_float(dtype) else patterns
  # Plant every special pattern class somewhere (a few of each), then the ties.
  planted = rng.choice(specials, min(size, max(4, size // 8)))
  where = rng.choice(size, planted.size, replace=False)
  patterns[where] = planted
  if ties and size > 4:
    pool = np.concatenate([rng.choice(specials, 2), patterns[rng.choice(size, 3)]])
    tied = rng.random(size) < 0.5
    patterns[tied] = rng.choice(pool, int(tied.sum()))
  return from_bits(patterns, dtype).reshape(shape)


def finite_tangent(rng: np.random.Generator, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
  """Tangents of a float ``dtype``: normal values of modest size (exact in every float type, no flushing)."""
  dtype = np.dtype(dtype)
  magnitudes = np.array([1.0, 1.5, 2.0, 3.0, 4.0])
  if dtype.name == "float8_e8m0fnu":  # powers of two only, no sign
    return rng.choice(np.array([0.5, 1.0, 2.0, 4.0]), shape).astype(dtype)
  values = rng.choice(magnitudes, shape) * rng.choice(np.array([-1.0, 1.0]), shape)
  return values.astype(dtype)
