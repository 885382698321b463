"""Selections that sort: the fallback for short rows on accelerators, and rows longer than int32 can index.

* :func:`sorted_keys`: ``lax.top_k`` on the integer rank key. XLA has no TopK kernel for integer
  operands on GPUs or TPUs, so it sorts the row by key (descending, ties to the lower index): exact
  on every platform, and what the native call does for short rows too.
* :func:`sorted_with_values`: a stable sort of (reversed key, index, value): the values come out of the
  sort, with no gather after it. For short rows on TPUs, where the TopK is a sort too and a gather
  makes XLA copy the input into another memory first.
* :func:`wide_rows`: ``lax.top_k`` returns int32 indices, so rows longer than int32 can index take a
  stable sort by the reversed key instead, with indices of :func:`index_dtype`.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax import lax

from dmljax._src import dtypes, rank_keys, symbolic, value_bits
from dmljax._src.strategies.case import Case, Selected, gathered

# lax.top_k returns int32 indices; longer rows take the stable sort (tests lower this to cover that path).
LAX_TOP_K_LARGEST_INDEX = int(np.iinfo(np.int32).max)


def index_dtype(size: Any) -> np.dtype:
  """The type of the indices into rows of ``size``: int32 where it can index them (a symbolic size is assumed to be
  indexable by int32, as jax.lax assumes)."""
  if symbolic.decide(lambda: size - 1 > LAX_TOP_K_LARGEST_INDEX, otherwise=False):
    return np.dtype(np.int64) if dtypes.x64_enabled() else np.dtype(np.uint32)
  return np.dtype(np.int32)


def handles(case: Case) -> bool:
  """Every type, row and ``k``."""
  del case
  return True


def top_k_of_key(key: jax.Array, k: int) -> jax.Array:
  """Indices of the ``k`` largest integer keys, ties to the lower index: a sort on GPUs and TPUs."""
  return lax.top_k(key, k)[1]


@gathered
def sorted_keys(x: jax.Array, case: Case) -> jax.Array:
  return top_k_of_key(rank_keys.selection_key(x, case.largest_first), case.k)


def _stable_sort(x: jax.Array, case: Case, index_type: np.dtype) -> Selected:
  key = rank_keys.selection_key(x, case.largest_first)
  axis = key.ndim - 1
  iota = lax.broadcasted_iota(index_type, key.shape, axis)
  # The values ride along as their bits: XLA:CPU sorts bfloat16 operands as float32, which quiets NaNs.
  _, order, values = lax.sort((~key, iota, value_bits.to_bits(x)), dimension=axis, is_stable=True, num_keys=1)
  values = value_bits.from_bits(lax.slice_in_dim(values, 0, case.k, axis=axis), x.dtype)
  return values, lax.slice_in_dim(order, 0, case.k, axis=axis)


def sorted_with_values(x: jax.Array, case: Case) -> Selected:
  return _stable_sort(x, case, np.dtype(np.int32))


def wide_rows(x: jax.Array, case: Case) -> Selected:
  return _stable_sort(x, case, index_dtype(case.n))
