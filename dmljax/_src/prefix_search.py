"""The shortest prefix of a row, in the library's order, that satisfies a monotone condition: found without a sort.

The order is the one top-k uses: larger rank key first, equal keys by ascending index. A prefix of
that order is the set ``{key > t} | {key == t and index <= c}`` of its last entry ``(t, c)``. Given
a condition ``reaches(prefix_mask)`` that holds for the whole row, fails for the empty prefix and
never turns false as a prefix grows (a count reaching ``k``, a probability mass reaching ``p``),
the shortest prefix for which it holds is found bit by bit, most significant first:

1. ``t`` is the largest key with ``reaches(key >= t)`` (one step per key bit);
2. ``c`` is the largest index with ``not reaches({key > t} | {key == t and index < c})`` (one step per
   index bit).

Every step is one elementwise pass and one reduction over the row, with a per-row result: on a
vocabulary split across devices only ``reaches``'s per-row sums cross devices. There is no sort.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

Reaches = Callable[[jax.Array], jax.Array]


def shortest_prefix(key: jax.Array, reaches: Reaches) -> jax.Array:
  """The mask (shaped as ``key``) of the shortest prefix of every row (last axis) for which ``reaches`` holds.

  Args:
    key: int32 or int64 rank keys, larger first.
    reaches: mask ``(..., n)`` -> bool ``(...)``; monotone, true for the whole row, false for no entry.
  """
  dtype = np.dtype(key.dtype)
  width = dtype.itemsize * 8
  n = key.shape[-1]
  index = lax.broadcasted_iota(np.dtype(np.int32), key.shape, key.ndim - 1)

  # Signed keys, most significant bit first: the start is the smallest key (sign bit set, the rest
  # clear), and toggling bit b of a prefix whose lower bits are clear raises it: for the sign bit
  # 1 -> 0, for the others 0 -> 1.
  def key_step(i: jax.Array, t: jax.Array) -> jax.Array:
    bit = lax.shift_left(np.array(1, dtype), np.array(width - 1, dtype) - i.astype(dtype))
    candidate = t ^ bit
    return jnp.where(reaches(key >= candidate[..., None]), candidate, t)

  t = lax.fori_loop(0, width, key_step, jnp.full(key.shape[:-1], np.iinfo(dtype).min, dtype))
  above = key > t[..., None]
  tied = key == t[..., None]
  index_bits = max(1, n.bit_length())

  def index_step(i: jax.Array, c: jax.Array) -> jax.Array:
    candidate = c | lax.shift_left(np.int32(1), np.int32(index_bits - 1) - i.astype(np.int32))
    short = ~reaches(above | (tied & (index < candidate[..., None])))
    return jnp.where(short, candidate, c)

  c = lax.fori_loop(0, index_bits, index_step, jnp.zeros(key.shape[:-1], np.int32))
  return above | (tied & (index <= c[..., None]))
