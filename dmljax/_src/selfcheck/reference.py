"""The self-check's own reference: dmljax's value order computed with NumPy from the input's bits.

It shares nothing with the library's key code: every element is decoded to a float64 (floats, through the
ml_dtypes types JAX exposes, float8 and float4 included) or a Python-width integer, and ordered by
``np.lexsort``:

* a NaN, whatever its sign and payload, ranks above +inf, and all NaNs are equal;
* -0.0 equals +0.0;
* integers are ordered by value, their extremes included;
* equal values keep ascending index order, in both directions.

Values are never compared as numbers in a verdict: a selection is right when its indices are the reference's
and its value bits are the input's bits at those indices.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np


def is_float(dtype: np.dtype) -> bool:
  """Whether ``dtype`` is a floating type (the ml_dtypes ones are kind ``V``, so ask their finfo)."""
  if dtype.kind == "f":
    return True
  if dtype.kind != "V":
    return False
  try:
    ml_dtypes.finfo(dtype)
  except (ValueError, TypeError):
    return False
  return True


def bit_width(dtype: np.dtype) -> int:
  """The number of meaningful bits of an element: 4 for float4/int4, the storage width otherwise."""
  name = np.dtype(dtype).name
  for width in (2, 4):
    if name.endswith(f"int{width}") or name.startswith(f"float{width}_"):
      return width
  return np.dtype(dtype).itemsize * 8


def storage(dtype: np.dtype) -> np.dtype:
  """The unsigned integer type of an element's storage (one byte for the sub-byte types)."""
  return np.dtype(f"u{np.dtype(dtype).itemsize}")


def bits_of(a: np.ndarray) -> np.ndarray:
  """The bit patterns of ``a`` as unsigned integers (sub-byte types: the low bits of each byte)."""
  a = np.asarray(a)
  raw = a.view(storage(a.dtype))
  width = bit_width(a.dtype)
  if width < 8:
    return raw & np.array((1 << width) - 1, raw.dtype)
  return raw


def from_bits(bits: np.ndarray, dtype: np.dtype) -> np.ndarray:
  """The array of ``dtype`` whose elements have the bit patterns ``bits``."""
  return np.asarray(bits).astype(storage(dtype)).view(dtype)


def decoded(a: np.ndarray) -> np.ndarray:
  """Every element's value: float64 for floats, int64 or uint64 for integers."""
  a = np.asarray(a)
  if is_float(a.dtype):
    with np.errstate(invalid="ignore"):
      return a.astype(np.float64)
  if a.dtype == np.uint64:
    return a
  return a.astype(np.int64)


def order_keys(a: np.ndarray, largest_first: bool) -> tuple[np.ndarray, np.ndarray]:
  """(class, value) keys whose ascending lexicographic order is the order of selection.

  class 0 for numbers and 1 for NaNs (reversed for ``largest_first``); value the number (0 for NaNs), with -0.0
  made +0.0, negated (floats) or complemented (integers: no overflow) for ``largest_first``.
  """
  values = decoded(a)
  if values.dtype == np.float64:
    nan = np.isnan(values)
    values = np.where(nan, 0.0, values) + 0.0
    if largest_first:
      values = -values
    nan_class = nan.astype(np.int8)
  else:
    if largest_first:
      values = ~values
    nan_class = np.zeros(values.shape, np.int8)
  return (-nan_class if largest_first else nan_class), values


def ranked(a: np.ndarray, largest_first: bool) -> np.ndarray:
  """For every row (last axis), its indices in the order of selection: ties by ascending index."""
  nan_class, values = order_keys(a, largest_first)
  index = np.broadcast_to(np.arange(a.shape[-1]), a.shape)
  return np.lexsort((index, values, nan_class), axis=-1)


def top_k(a: np.ndarray, k: int, largest_first: bool) -> np.ndarray:
  """The indices of the ``k`` first elements of every row."""
  return ranked(a, largest_first)[..., :k]


def arg_extreme(a: np.ndarray, find_max: bool, last: bool) -> np.ndarray:
  """The first (or ``last``) index of the extreme of every row; a NaN is the extreme for both."""
  if last:
    return a.shape[-1] - 1 - arg_extreme(a[..., ::-1], find_max, last=False)
  if find_max:
    return ranked(a, largest_first=True)[..., 0]
  # The smallest first, except that a NaN is the extreme: NaNs move to the front.
  nan_class, values = order_keys(a, largest_first=False)
  index = np.broadcast_to(np.arange(a.shape[-1]), a.shape)
  return np.lexsort((index, values, -nan_class), axis=-1)[..., 0]


def equal_to_extreme(a: np.ndarray, result: np.ndarray, find_max: bool) -> np.ndarray:
  """Whether ``result`` (one element a row) is a right MAX/MIN of each row of ``a``.

  NaN where the row holds a NaN (any NaN), else the extreme's value with either zero's sign, and always the bits of
  some element of the row.
  """
  values = decoded(a)
  got = decoded(result)
  present = (bits_of(a) == bits_of(result)[..., None]).any(axis=-1)
  if is_float(a.dtype):
    nan = np.isnan(values)
    finite = np.where(nan, np.nan, values)
    with np.errstate(invalid="ignore"):
      extreme = np.nanmax(finite, axis=-1) if find_max else np.nanmin(finite, axis=-1)
    return np.where(nan.any(axis=-1), np.isnan(got), (got == extreme) & present)
  extreme = values.max(axis=-1) if find_max else values.min(axis=-1)
  return (got == extreme) & present


def gathered_positions(indices: np.ndarray, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
  """Each index tuple's coordinates: a negative one counted from the end once, then clamped into range."""
  coordinates = []
  for axis, size in enumerate(sizes):
    c = indices[..., axis].astype(np.int64)
    c = np.where(c < 0, c + size, c)
    coordinates.append(np.clip(c, 0, size - 1))
  return tuple(coordinates)


def hot_positions(indices: np.ndarray, depth: int) -> np.ndarray:
  """The hot position of each index (a negative one counted from the end once), or -1 for an all-off sequence."""
  i = indices.astype(np.int64)
  wrapped = np.where(i < 0, i + depth, i)
  return np.where((wrapped >= 0) & (wrapped < depth), wrapped, -1)
