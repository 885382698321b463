"""Float keys for XLA's TopK kernels that order every input as dmljax does, whatever the kernel compares.

XLA's TopK kernels take float32 or bfloat16 operands. The GPU kernel compares them with IEEE ``>``
and ``==`` (:mod:`gpu_kernel`); the TPU one is given XLA's total-order comparator (:mod:`tpu_kernel`).
The two orders differ only on NaNs, -0.0 and, where subnormals are flushed, subnormals, so a key
with no NaN and no -0.0 (zero is always +0.0, or always -0.0 in a negated key) is ordered the same
by both:

* :func:`ordinal`: types of up to 16 bits (every float8 and 4-bit type too). Their rank key
  (:mod:`dmljax._src.rank_keys`), as a float32, is an integer of at most 17 bits: never NaN, subnormal
  or -0.0, so exact under any comparison.
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

Both are views of the one rank key (:mod:`dmljax._src.rank_keys`), and each gives back the input it came
from wherever no other input has it (:func:`ordinal_inverse`, :func:`one_step_below_inverse`, through
:func:`rank_keys.value_of_key`): every integer, every float but the classes the rank key merges (the two
zeros, several NaNs) and, for :func:`one_step_below`, subnormals, so a selection of keys can return those
inputs without reading them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import rank_keys

SAME_WIDTH = (np.dtype(np.float32), np.dtype(jnp.bfloat16))


def has_ordinal(dtype: np.dtype) -> bool:
  """Types whose every key is an integer float32 holds exactly: up to 16 bits."""
  return rank_keys.layout(np.dtype(dtype)).width <= 16


def ordinal(x: jax.Array, largest_first: bool) -> jax.Array:
  """Types of up to 16 bits: the rank key (its bitwise not for the smallest first), as a float32 (exact).

  The key has at most 17 bits, so the float32 is an integer: never NaN, subnormal or -0.0.
  """
  return rank_keys.selection_key(x, largest_first).astype(np.float32)


def ordinal_inverse(key: jax.Array, dtype: np.dtype, largest_first: bool) -> tuple[jax.Array, jax.Array]:
  """The ``dtype`` input whose :func:`ordinal` is ``key``, and where no other input has that key."""
  rank = key.astype(np.int32)
  return rank_keys.value_of_key(rank if largest_first else ~rank, np.dtype(dtype))


def _signed_type(dtype: np.dtype) -> np.dtype:
  return np.dtype(f"int{np.dtype(dtype).itemsize * 8}")


def _smallest_normal_key(dtype: np.dtype) -> int:
  return int(np.array(jnp.finfo(dtype).smallest_normal, dtype).view(_signed_type(dtype)))


def one_step_below(x: jax.Array, largest_first: bool) -> jax.Array:
  """float32/bfloat16: the rank key's magnitude - 1 (subnormals as zero, so NaN lands on +inf), its sign, as a float.

  The rank key's magnitude is the input's magnitude bits, and every NaN's is +inf's + 1; zero stays +0.0.
  """
  dtype = np.dtype(x.dtype)
  key = rank_keys.ascending_key(x)  # int32
  negative = rank_keys.mask_where(key < 0, np.dtype(np.int32))
  magnitude = (key ^ negative) - negative
  magnitude = magnitude & rank_keys.mask_where(magnitude >= _smallest_normal_key(dtype), np.dtype(np.int32))
  stepped = magnitude - (magnitude != 0).astype(np.int32)
  flip = negative if largest_first else ~negative
  sign = rank_keys.int_constant(1 << (dtype.itemsize * 8 - 1), np.dtype(np.int32))
  bits = stepped | (sign & flip & rank_keys.mask_where(stepped != 0, np.dtype(np.int32)))
  return lax.bitcast_convert_type(bits.astype(_signed_type(dtype)), dtype)


def one_step_below_inverse(key: jax.Array, largest_first: bool) -> tuple[jax.Array, jax.Array]:
  """The input whose :func:`one_step_below` is ``key``, and where no other input has that key.

  Every key but zero's (+-0.0 and every subnormal) and NaN's (every NaN); the value there is unspecified.
  """
  dtype = np.dtype(key.dtype)
  bits = lax.bitcast_convert_type(key, _signed_type(dtype)).astype(np.int32)
  sign_bit = 1 << (dtype.itemsize * 8 - 1)
  negative = (bits & rank_keys.int_constant(sign_bit, np.dtype(np.int32))) != 0
  stepped = bits & np.int32(sign_bit - 1)
  magnitude = stepped + (stepped != 0).astype(np.int32)
  rank = jnp.where(negative != (not largest_first), -magnitude, magnitude)
  value, exact = rank_keys.value_of_key(rank, dtype)
  subnormal_or_zero = magnitude < _smallest_normal_key(dtype)
  return value, exact & ~subnormal_or_zero
