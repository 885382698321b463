"""TPU: XLA's TPU ``TopK`` on keys that every comparison orders as dmljax does, fused with the key pass.

XLA compiles ``lax.top_k`` of a float32 or bfloat16 operand with ``k`` up to 256 to a ``TopK`` custom
call; in the optimized HLO its comparator computation is XLA's total order (the operands bitcast to
integers, negative ones' magnitude bits flipped, compared as signed integers; ties to the lower index),
and the key's elementwise computation is fused into the call, so the row is read once. The TPU kernel
is not public. So the keys are ones on which the total order and the IEEE comparison agree
(:mod:`kernel_keys`): :func:`kernel_keys.ordinal` for types of up to 16 bits (exact under any
comparison) and :func:`kernel_keys.one_step_below` for float32 (exact unless the kernel flushed
subnormal keys, which would tie +-2**-126 with zero).

32-bit integers have 2**32 keys, more than any float32 comparison short of the total order tells
apart: for them this module uses the float32 whose total order is the key's order
(:func:`rank_keys.key_as_total_order_float`), exact as long as the kernel applies the comparator
XLA gives it.
"""

from __future__ import annotations

import jax
import numpy as np
from jax import lax

from dmljax._src import rank_keys
from dmljax._src.strategies import kernel_keys
from dmljax._src.strategies.case import Case, gathered

MAX_K = 256
# Shorter rows are sorted (by XLA's TPU compiler too), and a sort can carry the values: :func:`sort.sorted_with_values`.
MIN_ROW = 256


def short_row(case: Case) -> bool:
  return case.n < MIN_ROW


def handles(case: Case) -> bool:
  return case.bits <= 32


def applies(case: Case) -> bool:
  return case.k <= MAX_K and handles(case)


def key(x: jax.Array, largest_first: bool) -> jax.Array:
  if kernel_keys.has_ordinal(x.dtype):
    return kernel_keys.ordinal(x, largest_first)
  if x.dtype == np.float32:
    return kernel_keys.one_step_below(x, largest_first)
  return rank_keys.key_as_total_order_float(rank_keys.selection_key(x, largest_first))


@gathered
def select(x: jax.Array, case: Case) -> jax.Array:
  return lax.top_k(key(x, case.largest_first), case.k)[1]
