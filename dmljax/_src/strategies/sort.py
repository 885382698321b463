"""Selections that sort: the fallback for short rows on accelerators, and rows longer than int32 can index.

* :func:`sorted_keys`: ``lax.top_k`` on the integer rank key. XLA has no TopK kernel for integer
  operands on GPUs or TPUs, so it sorts the row by key (descending, ties to the lower index): exact
  on every platform, and what the native call does for short rows too.
* :func:`wide_rows`: ``lax.top_k`` returns int32 indices, so rows longer than int32 can index take a
  stable sort by the reversed key instead, with indices of :func:`index_dtype`.
"""

from __future__ import annotations

import jax
import numpy as np
from jax import lax

from dmljax._src import dtypes, rank_keys
from dmljax._src.strategies.case import Case

# lax.top_k returns int32 indices; longer rows take the stable sort (tests lower this to cover that path).
LAX_TOP_K_LARGEST_INDEX = int(np.iinfo(np.int32).max)


def index_dtype(size: int) -> np.dtype:
  """The type of the indices into rows of ``size``: int32 where it can index them."""
  if size - 1 > LAX_TOP_K_LARGEST_INDEX:
    return np.dtype(np.int64) if dtypes.x64_enabled() else np.dtype(np.uint32)
  return np.dtype(np.int32)


def top_k_of_key(key: jax.Array, k: int) -> jax.Array:
  """Indices of the ``k`` largest integer keys, ties to the lower index: a sort on GPUs and TPUs."""
  return lax.top_k(key, k)[1]


def sorted_keys(x: jax.Array, case: Case) -> jax.Array:
  return top_k_of_key(rank_keys.selection_key(x, case.largest_first), case.k)


def wide_rows(x: jax.Array, case: Case) -> jax.Array:
  key = rank_keys.selection_key(x, case.largest_first)
  iota = lax.broadcasted_iota(index_dtype(case.n), key.shape, key.ndim - 1)
  _, order = lax.sort((~key, iota), dimension=key.ndim - 1, is_stable=True, num_keys=1)
  return lax.slice_in_dim(order, 0, case.k, axis=key.ndim - 1)
