"""The whole-row search: the shortest prefix of a row, in dmljax's order, that reaches a target, without a sort.

The filters run it only for the rows their candidates do not decide (see :mod:`.filters`).

The order is descending value, ties by ascending index (NaN dropped beforehand), through the
library's order key (:func:`dmljax._src.rank_keys.ascending_key`). ``reaches(mask)`` says, per
row, whether the entries of a mask reach the target (a count for top-k, exact probability units
for top-p); it must be monotone (a superset of a reaching set reaches).

Two bisections, each pass one fused reduction over the row (the first may be guided by a cheaper
approximate test, then checked exactly: :func:`prefix_mask`):

1. over the bits of the key (32 passes for float32 keys, 64 for float64): the largest threshold
   ``t`` whose entries ``key >= t`` reach the target; the prefix is then every entry above ``t``
   and some of the entries equal to ``t``;
2. over the index (``ceil(log2 V)`` passes): how many of the entries equal to ``t`` (lowest indices
   first) the prefix needs; only when some row has three or more entries equal to ``t`` (one entry on ``t``
   is the prefix's last; of two, one pass says whether the lower-index one alone reaches).

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
from dmljax._src.sampling import reductions


def unsigned_order_key(clean: jax.Array) -> jax.Array:
  """dmljax's ascending order key of NaN-free rows, as an unsigned integer with the same order."""
  key = rank_keys.ascending_key(clean)
  unsigned = np.dtype(np.uint64) if key.dtype.itemsize == 8 else np.dtype(np.uint32)
  top = np.array(1 << (8 * unsigned.itemsize - 1), unsigned)
  return lax.bitcast_convert_type(key, unsigned) ^ top


Reaches = Callable[[jax.Array, jax.Array], jax.Array]  # (rows, mask) -> per row: does the mask reach?
KeyOf = Callable[[jax.Array], jax.Array]  # rows -> unsigned order keys


def _fresh(rows: jax.Array, step: jax.Array) -> jax.Array:
  """``rows``, as a value XLA cannot hoist out of the loop: what a pass derives from it (keys, weights) is
  recomputed inside the pass's fused reduction instead of being kept as whole-row arrays across passes."""
  return lax.optimization_barrier((rows, step))[0]


def threshold(rows: jax.Array, key_of: KeyOf, reaches: Reaches) -> jax.Array:
  """The largest ``t`` (per row, shape ``(..., 1)``) whose entries ``key >= t`` reach: one bisection step a key bit."""
  udt = jax.eval_shape(key_of, rows).dtype
  width = 8 * udt.itemsize
  one = np.array(1, udt)

  def step(i: jax.Array, t: jax.Array) -> jax.Array:
    bit = (np.int32(width - 1) - i).astype(udt)
    candidate = t | lax.shift_left(one, bit)
    fresh = _fresh(rows, i)
    return jnp.where(reaches(fresh, key_of(fresh) >= candidate[..., None]), candidate, t)

  return lax.fori_loop(0, width, step, jnp.zeros(rows.shape[:-1], udt))[..., None]


def last_index(rows: jax.Array, key_of: KeyOf, t: jax.Array, reaches: Reaches) -> jax.Array:
  """Given the threshold key ``t``, the highest index ``j`` among the entries equal to ``t`` that the prefix takes."""
  batch, length = rows.shape[:-1], rows.shape[-1]
  index_bits = max(1, (length - 1).bit_length())

  # The largest j for which the entries above t and the equal ones of index < j do not reach: the prefix
  # takes the equal entries of index <= j.
  def index_step(i: jax.Array, j: jax.Array) -> jax.Array:
    candidate = j | lax.shift_left(np.int32(1), np.int32(index_bits - 1) - i)
    fresh = _fresh(rows, i)
    key = key_of(fresh)
    index = lax.broadcasted_iota(jnp.int32, key.shape, key.ndim - 1)
    enough = reaches(fresh, (key > t) | ((key == t) & (index < candidate[..., None])))
    return jnp.where(enough, j, candidate)

  def among_ties() -> jax.Array:
    return lax.fori_loop(0, index_bits, index_step, jnp.zeros(batch, jnp.int32))[..., None]

  def no_ties() -> jax.Array:
    return jnp.full((*batch, 1), length - 1, jnp.int32)  # the one entry equal to t is the prefix's last

  def pairs() -> jax.Array:
    # At most two entries on t in every row: the prefix takes the lower-index one alone if that reaches, else both
    # (one integer pass for that index, one pass of reaches).
    fresh = _fresh(rows, jnp.int32(-1))
    key = key_of(fresh)
    index = lax.broadcasted_iota(jnp.int32, key.shape, key.ndim - 1)
    first = reductions.row_min(jnp.where(key == t, index, np.int32(length)))[..., None]
    enough = reaches(fresh, (key > t) | ((key == t) & (index <= first)))
    return jnp.where(enough[..., None], first, np.int32(length - 1))

  # A row whose threshold key is held by one entry needs no second search, one held by two a single check: the
  # index bisection runs only when some row has three or more entries on t.
  most = jnp.max(reductions.row_sum(key_of(rows) == t))
  return lax.switch(jnp.clip(most - 1, 0, 2), (no_ties, pairs, among_ties))


STEPS = 4  # distinct keys a guided threshold may be off by and still be corrected locally (:func:`cut`)


def _neighbours(key: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Per row: the largest key below ``t`` (0 if none) and the smallest above it (all ones if none), in one pass."""
  low, high = np.array(0, key.dtype), np.array(np.iinfo(key.dtype).max, key.dtype)
  below, above = lax.reduce(
    (jnp.where(key < t, key, low), jnp.where(key > t, key, high)),
    (low, high),
    lambda a, b: (jnp.maximum(a[0], b[0]), jnp.minimum(a[1], b[1])),
    (key.ndim - 1,),
  )
  return below[..., None], above[..., None]


def _corrected(rows: jax.Array, key_of: KeyOf, reaches: Reaches, guess: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``guess`` checked, then moved, a distinct key per step and at most :data:`STEPS` steps, to the threshold
  ``reaches`` itself finds; with per row whether it got there. The threshold ``t`` is the one key for which the
  entries ``key >= t`` reach and those ``key > t`` do not: a row where the first do not reach steps down to the
  next key below, a row where the second reach steps up to the next key above. Each step is two exact passes and
  one integer pass; the first only checks ``guess`` (one loop body: each pass is compiled once)."""

  def wrong(state: tuple[jax.Array, ...]) -> jax.Array:  # not yet checked, or some row off with steps left
    step, _, low_reaches, high_reaches = state
    return (step == 0) | ((step <= STEPS) & ~jnp.all(low_reaches & ~high_reaches))

  def move(state: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    step, t, low_reaches, high_reaches = state
    fresh = _fresh(rows, step)
    key = key_of(fresh)
    below, above = _neighbours(key, t)
    off_low, off_high = (step > 0) & ~low_reaches, (step > 0) & high_reaches
    t = jnp.where(off_low[..., None], below, jnp.where(off_high[..., None], above, t))
    fresh = _fresh(rows, step)
    key = key_of(fresh)
    return step + 1, t, reaches(fresh, key >= t), reaches(fresh, key > t)

  unknown = jnp.zeros(guess.shape[:-1], jnp.bool_)
  state: tuple[jax.Array, ...] = (jnp.int32(0), guess, unknown, unknown)
  _, t, low_reaches, high_reaches = lax.while_loop(wrong, move, state)
  return t, low_reaches & ~high_reaches


def cut(rows: jax.Array, key_of: KeyOf, reaches: Reaches, guide: Reaches | None = None) -> tuple[jax.Array, jax.Array]:
  """The shortest prefix (descending key order, ties by ascending index) that reaches, as its cut ``(t, j)``.

  The prefix is every entry with ``key > t`` and those with ``key == t`` and index ``<= j`` (both ``(..., 1)``).
  The whole row must reach. With a ``guide`` (a cheaper, approximate ``reaches``: float sums where ``reaches``
  sums exact units), the threshold is bisected with the guide, then checked with ``reaches`` in two passes (the
  entries ``key >= t`` reach, those ``key > t`` do not); a row where the check fails (the float sums' rounding
  put the guess a key or two off) is moved a key at a time to the right one (:func:`_corrected`), and only if
  some row is still not right after :data:`STEPS` keys is the threshold bisected again with ``reaches``. Either
  way the answer is ``reaches``' own.
  """
  if guide is None:
    t = threshold(rows, key_of, reaches)
  else:
    guess, right = _corrected(rows, key_of, reaches, threshold(rows, key_of, guide))
    t = lax.cond(jnp.all(right), lambda: guess, lambda: threshold(rows, key_of, reaches))
  return t, last_index(rows, key_of, t, reaches)


def through(key: jax.Array, t: jax.Array, j: jax.Array) -> jax.Array:
  """The entries of a cut ``(t, j)``'s prefix."""
  index = lax.broadcasted_iota(jnp.int32, key.shape, key.ndim - 1)
  return (key > t) | ((key == t) & (index <= j))
