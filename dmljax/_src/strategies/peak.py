"""The first (or last) position of the largest rank key: one variadic reduction.

GPUs reduce (key, flat index) pairs in one pass, as ``jnp.argmax`` does: the larger key wins (or the
smaller one), and equal keys go to the lower index (``last``: the higher one). The rule is a total order
on the pairs, so the reduction may combine them in any order. Used for top-1 selections on GPUs and for
argmin/argmax on GPUs and TPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import rank_keys
from dmljax._src.strategies.case import Case, gathered


def flat_index(shape: tuple[int, ...], axes: Sequence[int], dtype: np.dtype) -> jax.Array:
  """The row-major flat position over ``axes`` (ascending) of every element of an array of ``shape``."""
  flat = jnp.zeros(shape, dtype)
  stride = 1
  for a in reversed(sorted(axes)):
    flat = flat + lax.broadcasted_iota(dtype, shape, a) * np.array(stride, dtype)
    stride *= shape[a]
  return flat


def peak_index(
  key: jax.Array, axes: Sequence[int], index_dtype: np.dtype, *, last: bool, smallest: bool = False
) -> jax.Array:
  """The lowest (``last``: highest) flat index over ``axes`` at which ``key`` is largest (``smallest``: smallest).

  ``axes`` are removed from the result.
  """
  info = np.iinfo(index_dtype)

  def better(a: tuple[jax.Array, jax.Array], b: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    (key_a, index_a), (key_b, index_b) = a, b
    closer = index_b > index_a if last else index_b < index_a
    beats = key_b < key_a if smallest else key_b > key_a
    take_b = beats | ((key_b == key_a) & closer)
    return lax.select(take_b, key_b, key_a), lax.select(take_b, index_b, index_a)

  bounds = np.iinfo(key.dtype)
  init = (
    np.array(bounds.max if smallest else bounds.min, key.dtype),
    np.array(info.min if last else info.max, index_dtype),
  )
  flat = flat_index(key.shape, axes, index_dtype)
  _, index = lax.reduce((key, flat), init, better, tuple(sorted(axes)))
  return index


def handles(case: Case) -> bool:
  return case.k == 1


@gathered
def select(x: jax.Array, case: Case) -> jax.Array:
  key = rank_keys.selection_key(x, case.largest_first)
  return peak_index(key, (key.ndim - 1,), np.dtype(np.int32), last=False)[..., None]
