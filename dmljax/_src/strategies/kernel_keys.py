"""Float keys for XLA's TopK kernels that order every input as dmljax does, whatever the kernel compares.

XLA's TopK kernels take float32 or bfloat16 operands. The GPU kernel compares them with IEEE ``>``
and ``==`` (:mod:`gpu_kernel`); the TPU one is given XLA's total-order comparator (:mod:`tpu_kernel`).
The two orders differ only on NaNs, -0.0 and, where subnormals are flushed, subnormals, so a key
with no NaN and no -0.0 (zero is always +0.0, or always -0.0 in a negated key) is ordered the same
by both:

* :func:`ordinal`: types of up to 16 bits. Their rank, as a float32, is an integer of at most 17 bits:
  never NaN, subnormal or -0.0, so exact under any comparison.
* :func:`one_step_below`: float32 and bfloat16, which fill their exponent range. Non-NaN floats of a
  width distinguish one class fewer than dmljax's order of that width has (NaN above +inf), so the
  key moves every magnitude one step down (``bits - 1``): +inf becomes the largest finite, NaN becomes
  +inf, inputs' subnormals are flushed to zero first (dmljax lets subnormals act as zero), and the
  smallest normal magnitude lands on the largest subnormal. Exact wherever the comparison does not
  flush subnormals (the total order, and XLA's GPU kernel: see :mod:`gpu_kernel`); one that flushed
  them would tie +-2**-126 (bfloat16 alike) with zero and nothing else.

Both are computed with integer arithmetic only: ``--xla_gpu_ftz`` does not change them, and with no
select in them XLA's TPU compiler fuses them into its TopK (a select there makes it copy the input
into another layout first). The smallest first is the negated key (by its sign bit, zero staying
+0.0): for a NaN-free float that reverses the order exactly.

Each key gives back the input it came from wherever no other input has it (:func:`ordinal_inverse`,
:func:`one_step_below_inverse`): every integer, every float but zeros and NaNs (and, for
:func:`one_step_below`, subnormals), so a selection of keys can return those inputs without reading them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import dtypes

SAME_WIDTH = (np.dtype(np.float32), np.dtype(jnp.bfloat16))


def has_ordinal(dtype: np.dtype) -> bool:
  return np.dtype(dtype).itemsize <= 2


def _mask(condition: jax.Array, dtype: np.dtype) -> jax.Array:
  """All ones where ``condition`` holds, zero elsewhere (arithmetic, not a select: TPUs fuse it into TopK)."""
  return -condition.astype(dtype)


def _width_facts(dtype: np.dtype) -> tuple[np.dtype, int]:
  """A float type's signed integer type of its width, and the bits of +inf."""
  bits_type = np.dtype(f"int{dtype.itemsize * 8}")
  return bits_type, int(np.array(np.inf, dtype).view(bits_type))


def _float_bits(x: jax.Array) -> tuple[jax.Array, np.dtype, int, int]:
  """``x``'s bits as a signed integer of its width, that type, and the bits of +inf and of the smallest normal."""
  dtype = np.dtype(x.dtype)
  bits_type, inf_bits = _width_facts(dtype)
  smallest_normal_bits = int(np.array(jnp.finfo(dtype).smallest_normal, dtype).view(bits_type))
  return lax.bitcast_convert_type(x, bits_type), bits_type, inf_bits, smallest_normal_bits


def ordinal(x: jax.Array, largest_first: bool) -> jax.Array:
  """Types of up to 16 bits: an integer of at most 17 bits ordered as dmljax orders ``x``, as a float32 (exact).

  Floats: the magnitude bits (every NaN clamped to one class above +inf), negated for negative non-NaN values,
  so -0.0 and +0.0 are both 0. Integers: the value.
  """
  if not dtypes.is_float(np.dtype(x.dtype)):
    value = x.astype(np.int32)
  else:
    bits, bits_type, inf_bits, _ = _float_bits(x)
    wide = bits.astype(np.int32)
    magnitude = wide & np.int32(np.iinfo(bits_type).max)
    negative = (wide < 0) & (magnitude <= inf_bits)
    value = jnp.minimum(magnitude, np.int32(inf_bits + 1)) * (1 - 2 * negative.astype(np.int32))
  return (value if largest_first else -value).astype(np.float32)


def one_step_below(x: jax.Array, largest_first: bool) -> jax.Array:
  """float32/bfloat16: magnitude bits - 1 (subnormals flushed, NaN onto +inf), sign kept except for NaN and zero."""
  dtype = np.dtype(x.dtype)
  bits, bits_type, inf_bits, smallest_normal_bits = _float_bits(x)
  sign = np.array(np.iinfo(bits_type).min, bits_type)
  magnitude = bits & ~sign
  magnitude = magnitude & _mask(magnitude >= smallest_normal_bits, bits_type)
  stepped = jnp.minimum(magnitude - (magnitude != 0).astype(bits_type), np.array(inf_bits, bits_type))
  signed = stepped | (bits & sign & _mask((magnitude <= inf_bits) & (stepped != 0), bits_type))
  if not largest_first:
    signed = signed ^ (sign & _mask(signed != 0, bits_type))
  return lax.bitcast_convert_type(signed, dtype)


def ordinal_inverse(key: jax.Array, dtype: np.dtype, largest_first: bool) -> tuple[jax.Array, jax.Array]:
  """The ``dtype`` input whose :func:`ordinal` is ``key``, and where no other input has that key.

  Integers: every key. Floats: every key but zero's (+0.0 and -0.0) and NaN's (every NaN); the
  value there is unspecified.
  """
  dtype = np.dtype(dtype)
  value = key.astype(np.int32)
  if not largest_first:
    value = -value
  if not dtypes.is_float(dtype):
    return value.astype(dtype), jnp.ones(key.shape, bool)
  _, inf_bits = _width_facts(dtype)
  sign = np.int32(1 << (dtype.itemsize * 8 - 1))
  bits = jnp.abs(value) | (sign & _mask(value < 0, np.dtype(np.int32)))
  unsigned = bits.astype(np.dtype(f"uint{dtype.itemsize * 8}"))
  exact = (value != 0) & (value != inf_bits + 1)
  return lax.bitcast_convert_type(unsigned, dtype), exact


def one_step_below_inverse(key: jax.Array, largest_first: bool) -> tuple[jax.Array, jax.Array]:
  """The input whose :func:`one_step_below` is ``key``, and where no other input has that key.

  Every key but zero's (+-0.0 and every subnormal) and NaN's (every NaN); the value there is unspecified.
  """
  dtype = np.dtype(key.dtype)
  bits_type, inf_bits = _width_facts(dtype)
  sign = np.array(np.iinfo(bits_type).min, bits_type)
  signed = lax.bitcast_convert_type(key, bits_type)
  if not largest_first:
    signed = signed ^ (sign & _mask(signed != 0, bits_type))
  stepped = signed & ~sign
  exact = (stepped != 0) & (stepped != inf_bits)
  return lax.bitcast_convert_type((stepped + np.array(1, bits_type)) | (signed & sign), dtype), exact
