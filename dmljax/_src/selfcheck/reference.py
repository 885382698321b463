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

from typing import Any

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
    # NaNs set aside as the other end's infinity: a row of NaNs alone then has an extreme, which the NaN branch
    # below never reads (no NumPy "All-NaN slice" warning).
    finite = np.where(nan, -np.inf if find_max else np.inf, values)
    extreme = finite.max(axis=-1) if find_max else finite.min(axis=-1)
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


def hot_positions(indices: np.ndarray, depth: int, *, from_end: bool = True) -> np.ndarray:
  """The hot position of each index, or -1 for an all-off sequence: a negative index counted from the end once
  (DirectML's rule, ``from_end``), or off (``jax.nn.one_hot``'s)."""
  i = indices.astype(np.int64)
  wrapped = np.where(i < 0, i + depth, i) if from_end else i
  return np.where((wrapped >= 0) & (wrapped < depth), wrapped, -1)


# Sampling (dmljax.sampling): which entries each filter keeps. Written from the contract's words alone: order by
# descending value, ties by ascending index, -0.0 equal to +0.0, NaN dropped (counted as -inf); weights
# exp(x - max) in float32, the largest entry's weight 1; probabilities their float32 softmax, summed exactly.


def sampling_order(x: np.ndarray) -> np.ndarray:
  """For every row (last axis) of float logits, its indices in the filters' order (NaN counted as -inf)."""
  values = decoded(x)
  values = np.where(np.isnan(values), -np.inf, values) + 0.0
  index = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
  return np.lexsort((index, -values), axis=-1)


def sampling_weights(x: np.ndarray) -> np.ndarray:
  """float32 weights exp(x - max) of every row: the largest entries 1, NaN and -inf entries 0.

  A row whose largest entry is +inf gives its +inf entries weight 1 and the others 0; a row with no entry above
  -inf (all -inf or NaN) has weight 0 everywhere.
  """
  values = decoded(x)
  values = np.where(np.isnan(values), -np.inf, values)
  top = values.max(axis=-1, keepdims=True)
  with np.errstate(invalid="ignore", over="ignore"):
    difference = np.where(np.isfinite(top), values - np.where(np.isfinite(top), top, 0.0), 0.0)
    weights = np.exp(difference.astype(np.float32))
  weights = np.where(np.isneginf(values), np.float32(0), weights)
  weights = np.where(np.isposinf(top), (values == np.inf).astype(np.float32), weights)
  return weights.astype(np.float32)


def _in_order(mask_in_order: np.ndarray, order: np.ndarray) -> np.ndarray:
  keep = np.zeros(mask_in_order.shape, bool)
  np.put_along_axis(keep, order, mask_in_order, axis=-1)
  return keep


def top_k_keep(x: np.ndarray, k: Any) -> np.ndarray:
  """Which entries ``top_k_mask(x, k)`` keeps (``k`` one per row): the first min(k, V); k <= 0 or k >= V: all."""
  n = x.shape[-1]
  k = np.broadcast_to(np.asarray(k, np.int64), x.shape[:-1])[..., None]
  count = np.where((k <= 0) | (k >= n), n, k)
  return _in_order(np.arange(n) < count, sampling_order(x))


def top_p_cumulative(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(order, exact cumulative sums of the float32 probabilities taken in that order) of every row."""
  order = sampling_order(x)
  weights = sampling_weights(x)
  total = weights.astype(np.float64).sum(axis=-1, keepdims=True)
  with np.errstate(invalid="ignore", divide="ignore"):
    probabilities = (weights / np.where(total > 0, total, 1.0).astype(np.float32)).astype(np.float32)
  return order, np.cumsum(np.take_along_axis(probabilities, order, axis=-1).astype(np.float64), axis=-1)


def top_p_keep(x: np.ndarray, p: Any) -> np.ndarray:
  """Which entries ``top_p_mask(x, p)`` keeps: the shortest prefix whose exact probability sum is >= p (at least
  one entry); p >= 1 keeps every entry above -inf, and NaN entries are never kept."""
  order, cumulative = top_p_cumulative(x)
  p = np.broadcast_to(np.asarray(p, np.float64), x.shape[:-1])[..., None]
  reached = cumulative >= p
  # The prefix ends at the first entry whose sum reaches p (the whole row where none does).
  first = np.where(reached.any(axis=-1, keepdims=True), reached.argmax(axis=-1)[..., None], x.shape[-1] - 1)
  count = np.where(p >= 1, x.shape[-1], np.maximum(first + 1, 1))
  keep = _in_order(np.arange(x.shape[-1]) < count, order)
  return keep & ~np.isnan(decoded(x))


def min_p_keep(x: np.ndarray, m: Any) -> np.ndarray:
  """Which entries ``min_p_mask(x, m)`` keeps: weight >= min(m, 1); m <= 0 keeps every entry but NaNs."""
  m = np.broadcast_to(np.asarray(m, np.float64), x.shape[:-1])[..., None]
  weights = sampling_weights(x).astype(np.float64)
  keep = (m <= 0) | (weights >= np.minimum(m, 1.0))
  return keep & ~np.isnan(decoded(x))


def masked_bits(x: np.ndarray, keep: np.ndarray) -> np.ndarray:
  """The bits a filter returns: the input's where kept (NaN never), -inf's elsewhere."""
  minus_inf = bits_of(np.array(-np.inf).astype(x.dtype))
  return np.where(keep & ~np.isnan(decoded(x)), bits_of(x), minus_inf)


# SUM and LOG_SUM_EXP: float results depend on the order of summation, so the check compares them with an exact
# (float64 or Python integer) reference within a stated tolerance, or exactly where the exact result is a value
# of the type.


def ulp(value: np.ndarray, dtype: np.dtype) -> np.ndarray:
  """The spacing of ``dtype``'s values at ``|value|`` (its smallest normal spacing near zero)."""
  info = ml_dtypes.finfo(dtype)
  magnitude = np.abs(np.asarray(value, np.float64))
  with np.errstate(divide="ignore", invalid="ignore"):
    exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
  exponent = np.where((magnitude > 0) & np.isfinite(exponent), exponent, float(info.minexp))
  exponent = np.maximum(exponent, float(info.minexp))
  return np.exp2(exponent - float(info.nmant))


def accumulator_epsilon(dtype: np.dtype) -> float:
  """The relative precision a float reduction of ``dtype`` accumulates in: float32's, float64's for float64."""
  return float(np.finfo(np.float64 if np.dtype(dtype).itemsize == 8 else np.float32).eps)


def integer_sum(x: np.ndarray) -> np.ndarray:
  """SUM of integer rows, wrapping in the type's own width (two's complement), as bit patterns."""
  width = bit_width(x.dtype)
  total = np.array([sum(int(v) for v in row) for row in decoded(x).reshape(-1, x.shape[-1])], dtype=object)
  return np.array([t % (1 << width) for t in total], np.uint64).reshape(x.shape[:-1])


def float_sum(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(exact sum in float64, sum of magnitudes) of every row of finite floats."""
  values = decoded(x)
  return values.sum(axis=-1), np.abs(values).sum(axis=-1)


def log_sum_exp(x: np.ndarray) -> np.ndarray:
  """log(sum(exp(x))) of every row in float64, computed stably: -inf for all -inf, +inf with a +inf, NaN with a
  NaN."""
  values = decoded(x)
  nan = np.isnan(values).any(axis=-1)
  top = np.where(np.isnan(values), -np.inf, values).max(axis=-1)
  finite_top = np.where(np.isfinite(top), top, 0.0)
  with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
    total = np.exp(np.where(np.isnan(values), -np.inf, values) - finite_top[..., None]).sum(axis=-1)
    out = finite_top + np.log(total)
  out = np.where(np.isinf(top), top, out)
  return np.where(nan, np.nan, out)
