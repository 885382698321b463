"""Exact integer rank keys: the library's value order, shared by top-k and argmin/argmax.

NaN ranks above +inf and all NaNs are equal, -0.0 equals +0.0, and integers
are ordered exactly (no negation, so INT_MIN is safe). Every element maps to a
signed integer *rank key* whose integer order is that value order; equal values
get equal keys, so index tie-breaks can be exact.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import dtypes


def key_dtype(dtype: np.dtype) -> np.dtype:
  """int32 for types of up to 32 bits, int64 for 64-bit types."""
  return np.dtype(np.int64) if np.dtype(dtype).itemsize == 8 else np.dtype(np.int32)


def _flip_negative(bits: jax.Array) -> jax.Array:
  """Sign-magnitude bits <-> two's-complement order (an involution)."""
  width = bits.dtype.itemsize * 8
  magnitude = np.array((1 << (width - 1)) - 1, bits.dtype)
  return bits ^ (lax.shift_right_arithmetic(bits, np.array(width - 1, bits.dtype)) & magnitude)


def _work_float(dtype: np.dtype) -> np.dtype:
  return np.dtype(np.float64) if key_dtype(dtype) == np.int64 else np.dtype(np.float32)


def canonical_float(x: jax.Array) -> jax.Array:
  """A float ``x`` widened to the key's width (float32 or float64), -0.0 made +0.0 and every NaN the positive NaN.

  Equal values then have equal bits, and the IEEE total order of the result is the library's order.
  """
  work = _work_float(np.dtype(x.dtype))
  f = x.astype(work)
  f = jnp.where(f == 0, np.array(0, work), f)
  return jnp.where(jnp.isnan(f), np.array(np.nan, work), f)


def _canonical_bits(x: jax.Array) -> jax.Array:
  """The bits of :func:`canonical_float`, by integer arithmetic alone.

  No select: XLA's TPU compiler fuses such a pass into the TopK that consumes it, where a select
  makes it copy the input into another layout first.
  """
  work = _work_float(np.dtype(x.dtype))
  kdt = key_dtype(work)
  bits = lax.bitcast_convert_type(x.astype(work), kdt)
  sign = np.array(np.iinfo(kdt).min, kdt)
  inf_bits = np.array(np.array(np.inf, work).view(kdt), kdt)
  nan_bits = np.array(np.array(np.nan, work).view(kdt), kdt)
  magnitude = bits & ~sign
  keep = -((magnitude != 0) & (magnitude <= inf_bits)).astype(kdt)
  nan = -(magnitude > inf_bits).astype(kdt)
  return (bits & keep) | (nan_bits & nan)


def ascending_key(x: jax.Array) -> jax.Array:
  """A signed integer key, ordered as ``x`` in dmljax's value order (NaN largest, -0 == +0).

  int32 for types of up to 32 bits, int64 for 64-bit types; computed without selects.
  """
  dtype = np.dtype(x.dtype)
  kdt = key_dtype(dtype)
  if dtypes.is_float(dtype):
    return _flip_negative(_canonical_bits(x))
  if dtype.itemsize < kdt.itemsize:
    return x.astype(kdt)
  if dtypes.is_signed_integer(dtype):
    return x
  # Unsigned of the key's width: flipping the top bit maps unsigned order onto signed order.
  top = np.array(1 << (kdt.itemsize * 8 - 1), dtype)
  return lax.bitcast_convert_type(x ^ top, kdt)


def descending_key(x: jax.Array) -> jax.Array:
  """The reverse order: bitwise not reverses a two's-complement order exactly."""
  return ~ascending_key(x)


def selection_key(x: jax.Array, largest_first: bool) -> jax.Array:
  """The key whose largest values come first: :func:`ascending_key`, or :func:`descending_key` for the smallest."""
  return ascending_key(x) if largest_first else descending_key(x)


def extreme_key(x: jax.Array, find_max: bool) -> jax.Array:
  """The key whose largest value is argmax's (``find_max``) or argmin's answer: NaN is the extreme either way.

  For argmin the key is :func:`descending_key` with every NaN moved to the largest key (an xor, not
  a select, for the reason :func:`_canonical_bits` gives).
  """
  if find_max:
    return ascending_key(x)
  key = descending_key(x)
  if not dtypes.is_float(np.dtype(x.dtype)):
    return key
  largest = np.array(np.iinfo(key.dtype).max, key.dtype)
  nan = -jnp.isnan(x).astype(key.dtype)
  return key ^ ((key ^ largest) & nan)


def key_as_total_order_float(key: jax.Array) -> jax.Array:
  """The float of the key's width whose IEEE total order equals the key's order.

  The bit patterns that are NaNs, subnormals or -0.0 as floats are keys like any other, so only a
  comparison in the total order (``lax.sort``'s and ``lax.top_k``'s comparator) keeps them apart.
  """
  fdt = np.float64 if key.dtype.itemsize == 8 else np.float32
  return lax.bitcast_convert_type(_flip_negative(key), fdt)
