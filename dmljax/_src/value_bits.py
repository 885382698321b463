"""Floats that move as their bits: across devices, through a sort, a gather or a collective.

XLA may carry a float through float arithmetic where it only moves it: XLA:CPU all-gathers and
sorts bfloat16 as float32 (quieting NaNs: 0x7F81 comes back 0x7FC0), and XLA's SPMD partitioner
turns a gather from a split table into masked gathers and an all-reduce SUM (-0.0 + 0.0 is +0.0).
An unsigned integer of the same width goes through all of those unchanged, so every value dmljax
returns bit for bit is moved as :func:`to_bits` and read back with :func:`from_bits`. Integers move
as they are, but for 4- and 2-bit ones, and 4-bit floats, which move as 8-bit integers: XLA:CPU has no
all-reduce for them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import dtypes


def _width(dtype: np.dtype) -> int:
  return int(jnp.finfo(dtype).bits if dtypes.is_float(dtype) else jnp.iinfo(dtype).bits)


def carrier(dtype: np.dtype) -> np.dtype:
  """The type a value of ``dtype`` moves as: an unsigned integer of its width (8 bits at least) for floats,
  the 8-bit integer of its signedness for 4- and 2-bit integers (XLA:CPU has no all-reduce for those), else itself."""
  dtype = np.dtype(dtype)
  if dtypes.is_float(dtype):
    return np.dtype(f"uint{max(8, _width(dtype))}")
  if dtypes.is_integer(dtype) and _width(dtype) < 8:
    return np.dtype(np.int8) if dtypes.is_signed_integer(dtype) else np.dtype(np.uint8)
  return dtype


def moves_exactly(dtype: np.dtype) -> bool:
  """Whether XLA moves values of ``dtype`` unchanged on one device (a gather, a slice, a select, a concatenation).

  8-bit and narrower floats do not: XLA:CPU (from jax 0.12's XLA) carries their data movement through float16,
  which turns every NaN into one NaN (float8_e4m3's 0x79 comes back 0x7C). They move as :func:`to_bits`.
  """
  dtype = np.dtype(dtype)
  return not (dtypes.is_float(dtype) and _width(dtype) <= 8)


def to_bits(x: jax.Array) -> jax.Array:
  """``x``'s bits as :func:`carrier`'s integer (integers of 8 bits or more unchanged)."""
  dtype = np.dtype(x.dtype)
  moved = carrier(dtype)
  if moved == dtype:
    return x
  if not dtypes.is_float(dtype):
    return x.astype(moved)  # a narrow integer widened: exact
  width = _width(dtype)
  if width >= 8:
    return lax.bitcast_convert_type(x, moved)
  return lax.bitcast_convert_type(x, np.dtype(f"uint{width}")).astype(moved)


def from_bits(bits: jax.Array, dtype: np.dtype) -> jax.Array:
  """The values of ``dtype`` whose :func:`to_bits` is ``bits``."""
  dtype = np.dtype(dtype)
  if carrier(dtype) == dtype:
    return bits
  if not dtypes.is_float(dtype):
    return bits.astype(dtype)
  width = _width(dtype)
  if width < 8:
    bits = bits.astype(np.dtype(f"uint{width}"))
  return lax.bitcast_convert_type(bits, dtype)
