"""The first (or last) position of the largest rank key: one variadic reduction.

GPUs reduce (key, flat index) pairs in one pass, as ``jnp.argmax`` does: the larger key wins (or the
smaller one), and equal keys go to the lower index (``last``: the higher one). The rule is a total order
on the pairs, so the reduction may combine them in any order. Used for top-1 selections on GPUs and for
argmin/argmax on GPUs and TPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec

from dmljax._src import rank_keys, shardings, symbolic
from dmljax._src.strategies.case import Case, gathered


def flat_index(shape: tuple[Any, ...], axes: Sequence[int], dtype: np.dtype) -> jax.Array:
  """The row-major flat position over ``axes`` (ascending) of every element of an array of ``shape``."""
  flat = jnp.zeros(shape, dtype)
  stride = 1
  for a in reversed(sorted(axes)):
    flat = flat + lax.broadcasted_iota(dtype, shape, a) * symbolic.constant(stride, dtype)
    stride *= shape[a]
  return flat


def peak_of_pairs(key: jax.Array, index: jax.Array, axes: Sequence[int], *, last: bool) -> tuple[jax.Array, jax.Array]:
  """The largest ``key`` over ``axes`` and the lowest (``last``: highest) ``index`` holding it; ``axes`` removed."""
  info = np.iinfo(index.dtype)

  def better(a: tuple[jax.Array, jax.Array], b: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    (key_a, index_a), (key_b, index_b) = a, b
    closer = index_b > index_a if last else index_b < index_a
    take_b = (key_b > key_a) | ((key_b == key_a) & closer)
    return lax.select(take_b, key_b, key_a), lax.select(take_b, index_b, index_a)

  init = (np.array(np.iinfo(key.dtype).min, key.dtype), np.array(info.min if last else info.max, index.dtype))
  dims = tuple(sorted(axes))

  def reduce(key: jax.Array, index: jax.Array) -> tuple[jax.Array, jax.Array]:
    peak, at = lax.reduce((key, index), init, better, dims)
    return peak, at

  explicit = shardings.explicit_spec(key)
  if explicit is None:
    return reduce(key, index)
  # A variadic reduction's result type names no sharding on explicit axes: name the kept axes' one.
  mesh, spec = explicit
  kept = NamedSharding(mesh, PartitionSpec(*(entry for d, entry in enumerate(spec) if d not in dims)))
  peak, at = jax.sharding.auto_axes(reduce, out_sharding=(kept, kept))(key, index)
  return peak, at


def peak_index(key: jax.Array, axes: Sequence[int], index_dtype: np.dtype, *, last: bool) -> jax.Array:
  """The lowest (``last``: highest) flat index over ``axes`` at which ``key`` is largest; ``axes`` removed."""
  return peak_of_pairs(key, flat_index(key.shape, axes, index_dtype), axes, last=last)[1]


def handles(case: Case) -> bool:
  return case.k == 1


@gathered
def select(x: jax.Array, case: Case) -> jax.Array:
  key = rank_keys.selection_key(x, case.largest_first)
  return peak_index(key, (key.ndim - 1,), np.dtype(np.int32), last=False)[..., None]
