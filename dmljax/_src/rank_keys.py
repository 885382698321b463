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


def canonical_float(x: jax.Array) -> jax.Array:
  """A float ``x`` widened to the key's width (float32 or float64), -0.0 made +0.0 and every NaN the positive NaN.

  Equal values then have equal bits, and the IEEE total order of the result is the library's order.
  """
  work = np.dtype(np.float64) if key_dtype(np.dtype(x.dtype)) == np.int64 else np.dtype(np.float32)
  f = x.astype(work)
  f = jnp.where(f == 0, np.array(0, work), f)
  return jnp.where(jnp.isnan(f), np.array(np.nan, work), f)


def ascending_key(x: jax.Array) -> jax.Array:
  """A signed integer key, ordered as ``x`` in dmljax's value order (NaN largest, -0 == +0)."""
  dtype = np.dtype(x.dtype)
  kdt = key_dtype(dtype)
  if dtypes.is_float(dtype):
    return _flip_negative(lax.bitcast_convert_type(canonical_float(x), kdt))
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


def key_as_total_order_float(key: jax.Array) -> jax.Array:
  """The float of the key's width whose IEEE total order equals the key's order."""
  fdt = np.float64 if key.dtype.itemsize == 8 else np.float32
  return lax.bitcast_convert_type(_flip_negative(key), fdt)
