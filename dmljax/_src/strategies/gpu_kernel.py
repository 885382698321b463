"""CUDA: XLA's GPU ``TopK`` kernel on keys its comparison orders as dmljax does, then a gather of the values.

XLA compiles ``lax.top_k`` of a float32 or bfloat16 operand to its own kernel (custom call
``__gpu$TopK``) where ``k <= 16``, the row has at least 1024 elements and ``k/n < 0.85`` (XLA's
``TopkSpecializer``). The kernel (XLA's ``xla/stream_executor/cuda/topk_kernel_cuda_common.cu.h``,
``Descending::cmp``) ranks ``lhs`` first when ``lhs.key == rhs.key ? lhs.idx < rhs.idx : lhs.key >
rhs.key``: the IEEE ``>`` and ``==`` of the keys, ties to the lower index, which is dmljax's tie rule.
-0.0 and +0.0 tie there, but a NaN is neither greater than nor equal to anything, so NaNs land
anywhere (openxla/xla#48119). Its sm_90 code in jaxlib 0.10.2's CUDA plugin compares with
``FSETP.GT``/``FSETP.NEU`` without ``.FTZ``: subnormal keys are compared exactly. Other shapes become a
sort with the total-order comparator, and rows of more than 2**20 elements in a single row are split
and merged with it; the keys of :mod:`kernel_keys` are ordered alike by both comparisons.

The keys: :func:`kernel_keys.one_step_below` for float32 and bfloat16 (the key has the input's width,
so the extra pass writes no more than it reads), :func:`kernel_keys.ordinal` for the other types of up
to 16 bits. The kernel addresses a row with a 32-bit offset, so arrays of 2**31 elements or more take
another strategy.
"""

from __future__ import annotations

import jax
from jax import lax

from dmljax._src.strategies import kernel_keys
from dmljax._src.strategies.case import Case, gathered

MAX_K = 16
MIN_ROW = 1024
MAX_SIZE = (1 << 31) - 1


def handles(case: Case) -> bool:
  """Types with a kernel key (every type of up to 16 bits, float32, bfloat16), arrays the kernel's offsets reach."""
  keyed = case.dtype in kernel_keys.SAME_WIDTH or kernel_keys.has_ordinal(case.dtype)
  return keyed and case.size <= MAX_SIZE


def pays(case: Case) -> bool:
  """Where XLA uses its TopK kernel (elsewhere it sorts)."""
  return case.k <= MAX_K and case.n >= MIN_ROW


def key(x: jax.Array, largest_first: bool) -> jax.Array:
  if x.dtype in kernel_keys.SAME_WIDTH:
    return kernel_keys.one_step_below(x, largest_first)
  return kernel_keys.ordinal(x, largest_first)


@gathered
def select(x: jax.Array, case: Case) -> jax.Array:
  return lax.top_k(key(x, case.largest_first), case.k)[1]
