"""The shortest prefix of a row, in dmljax's order, that reaches a target: found without sorting the row.

The order is descending value, ties by ascending index (NaN dropped beforehand), through the
library's order key (:func:`dmljax._src.rank_keys.ascending_key`). ``reaches(mask)`` says, per
row, whether the entries of a mask reach the target (a count for top-k, exact probability units
for top-p); it must be monotone (a superset of a reaching set reaches).

Two bisections, each pass one fused reduction over the row:

1. over the bits of the key (32 passes for float32 keys, 64 for float64): the largest threshold
   ``t`` whose entries ``key >= t`` reach the target; the prefix is then every entry above ``t``
   and some of the entries equal to ``t``;
2. over the index (``ceil(log2 V)`` passes): how many of the entries equal to ``t`` (lowest indices
   first) the prefix needs; skipped when no row has two entries equal to ``t`` (then that one entry is
   the prefix's last).

Every decision is an integer comparison of sums that are exact, so a row split over devices gives
the same prefix: each pass is a local reduction and a sum of a few int32 per row across devices.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import rank_keys

Reaches = Callable[[jax.Array], jax.Array]


def unsigned_order_key(clean: jax.Array) -> jax.Array:
  """dmljax's ascending order key of NaN-free rows, as an unsigned integer with the same order."""
  key = rank_keys.ascending_key(clean)
  unsigned = np.dtype(np.uint64) if key.dtype.itemsize == 8 else np.dtype(np.uint32)
  top = np.array(1 << (8 * unsigned.itemsize - 1), unsigned)
  return lax.bitcast_convert_type(key, unsigned) ^ top


def prefix_mask(key: jax.Array, reaches: Reaches) -> jax.Array:
  """The entries of the shortest prefix (in descending ``key`` order, ties by ascending index) that reaches.

  The whole row must reach (``reaches`` of all-true is true for every row).
  """
  udt = key.dtype
  width = 8 * udt.itemsize
  batch, length = key.shape[:-1], key.shape[-1]
  one = np.array(1, udt)

  def threshold_step(i: jax.Array, t: jax.Array) -> jax.Array:
    bit = (np.int32(width - 1) - i).astype(udt)
    candidate = t | lax.shift_left(one, bit)
    return jnp.where(reaches(key >= candidate[..., None]), candidate, t)

  t = lax.fori_loop(0, width, threshold_step, jnp.zeros(batch, udt))[..., None]
  above, equal = key > t, key == t
  index = lax.broadcasted_iota(jnp.int32, key.shape, key.ndim - 1)
  index_bits = max(1, (length - 1).bit_length())

  # The largest j for which the entries above t and the equal ones of index < j do not reach: the prefix
  # takes the equal entries of index <= j.
  def index_step(i: jax.Array, j: jax.Array) -> jax.Array:
    candidate = j | lax.shift_left(np.int32(1), np.int32(index_bits - 1) - i)
    enough = reaches(above | (equal & (index < candidate[..., None])))
    return jnp.where(enough, j, candidate)

  def among_ties() -> jax.Array:
    return lax.fori_loop(0, index_bits, index_step, jnp.zeros(batch, jnp.int32))[..., None]

  def no_ties() -> jax.Array:
    return jnp.full((*batch, 1), length - 1, jnp.int32)  # the one entry equal to t is the prefix's last

  # A row whose threshold key is held by one entry needs no second search: skip it when no row has ties there.
  ties = jnp.any(jnp.sum(equal, axis=-1, dtype=jnp.int32) > 1)
  j = lax.cond(ties, among_ties, no_ties)
  return above | (equal & (index <= j))
