"""8-bit (and narrower) integers where REDUCE hands them to XLA: out of reach of XLA:CPU's YNNPACK fusion.

XLA:CPU gives a large maximum or minimum reduction of 8-bit integers, and a float32 reduction, to YNNPACK, whose
fusion takes in the elementwise operations that computed the reduced values, the caller's included, and runs
them in YNNPACK's 8-bit arithmetic, which saturates where XLA's wraps: under ``jax.jit``, ``jnp.max(a - 3)`` of
int8 ``a`` holding -128 gives -3 (-128 - 3 saturated to -128), where numpy's wrapped -131 is 125, the maximum;
``jnp.mean((a - 3).astype(jnp.float32))`` is off the same way (docs/semantics.rst, "Integer overflow"). An
optimization barrier does not keep it out (XLA:CPU removes barriers before it fuses), so REDUCE never reduces
8-bit integers, or floats converted from them, in a form that fusion can take the caller's arithmetic into:

* :func:`widened`: MAX and MIN reduce 8-bit integers as 16-bit ones where XLA reduces them (a type YNNPACK has no
  operations for, so XLA's own loops, which wrap, compute everything up to the reduction);
* :func:`as_float`: the floating-point functions (AVERAGE, L2, LOG_SUM, LOG_SUM_EXP) convert 8-bit integers from
  their bits read as the integer of the other signedness (a bitcast, which YNNPACK does not take in): XLA writes
  those bits out once (temporaries of the input's size) and YNNPACK reduces them.

XLA:CPU reduces integer sums and products with its own loops (no YNNPACK reduction adds or multiplies integers),
and 16-bit integers are no YNNPACK type: those need nothing here.
"""

from __future__ import annotations

import jax
import numpy as np
from jax import lax

from dmljax._src import dtypes


def is_narrow(dtype: np.dtype) -> bool:
  """An integer type of 8 bits or fewer (the 4- and 2-bit ones are held in a byte)."""
  return dtypes.is_integer(np.dtype(dtype)) and np.dtype(dtype).itemsize == 1


def widened(x: jax.Array) -> jax.Array:
  """An 8-bit (or narrower) integer ``x`` as the 16-bit integer of its signedness (exact); any other ``x`` as is."""
  dtype = np.dtype(x.dtype)
  if not is_narrow(dtype):
    return x
  return x.astype(np.int16 if dtypes.is_signed_integer(dtype) else np.uint16)


def as_float(x: jax.Array, dtype: np.dtype) -> jax.Array:
  """``x.astype(dtype)`` (a floating ``dtype``), the same values; an 8-bit (or narrower) integer ``x`` converted
  from its bits as the byte of the other signedness, its top bit flipped: ``x + 128`` (``x - 128`` unsigned),
  converted and moved back by the constant, exactly (every float type holds the integers up to 256)."""
  source = np.dtype(x.dtype)
  if not is_narrow(source):
    return x.astype(dtype)
  signed = dtypes.is_signed_integer(source)
  byte, other = (np.dtype(np.int8), np.dtype(np.uint8)) if signed else (np.dtype(np.uint8), np.dtype(np.int8))
  top = np.array(0x80, np.uint8).view(other)[()]
  shifted = lax.bitcast_convert_type(x.astype(byte), other) ^ top
  offset = np.array(128 if signed else -128, dtype)
  return shifted.astype(dtype) - offset
