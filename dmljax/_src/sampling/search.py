"""The whole-row search: where the shortest prefix of a row that reaches a target ends, without a sort.

The filters run it only for the rows whose candidates cannot decide (see :mod:`.filters`).

The order is descending value, ties by ascending index (NaN dropped beforehand), through the library's
order key as an unsigned integer (:func:`dmljax._src.rank_keys.unsigned_ascending_key`). A prefix is held as
its *cut* ``(t, j)``: the entries whose key is above ``t``, and those equal to ``t`` of index at most ``j``
(:func:`through`). A :class:`Target` says per row what a prefix must reach (``k`` entries for top-k, ``p``
of the probability mass in exact units for top-p), exactly and, as a cheap guide, approximately in float.

Two loops, each compiled once whatever the target:

1. **Guide** (a pass a key bit: 32 for float32 and narrower logits, 64 for float64): a bisection over the
   key's bits with float sums finds a threshold ``g``, right up to the float sums' rounding.
2. **Exact** (one loop body, a probe per row per pass): the threshold ``t``, the largest key whose entries
   ``key >= t`` reach the target, is the one where those reach and the entries ``key > t`` do not. Each pass
   checks both for a probe ``t`` in exact integer sums, and in the same pass finds the keys just below and
   just above ``t``: a row whose probe is low or high moves to the next key (the guide is usually a key or
   two off, if at all), or after :data:`STEPS` moves bisects its bracket of keys instead. Once ``t`` is found,
   a row with several entries equal to ``t`` searches, in the same loop, how many of them (lowest index
   first) the prefix needs: two probes a pass, the first at the lowest such index (so two ties take one
   pass), then thirds of the remaining range.

Every decision compares exact integer sums, so a row split over devices gives the same cut: each pass is a
local reduction and a sum of a few int32 per row across devices.

Rows and per-row values broadcast: the target's arrays (and so the cut) may have leading axes the rows
lack (a parameter mapped by ``jax.vmap`` over shared logits), and the rows are never copied per value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import rank_keys, shardings

Parts = tuple[jax.Array, ...]
KeyOf = Callable[[jax.Array], jax.Array]  # rows -> unsigned order keys (NaN dropped)

STEPS = 4  # probes a row moves by one distinct key before it bisects its bracket
_THRESHOLD, _INDEX, _DONE = 0, 1, 2
_MAX_PASSES = 400  # far above what any row needs (about 70 + 2 log3 V): a bound, not a budget


def order_key(clean: jax.Array) -> jax.Array:
  """dmljax's order of NaN-free rows as unsigned integers (the library's one order key)."""
  return rank_keys.unsigned_ascending_key(clean)


def through(key: jax.Array, t: jax.Array, j: jax.Array) -> jax.Array:
  """The entries of the prefix of cut ``(t, j)`` (``t`` and ``j`` of shape ``(..., 1)``)."""
  index = lax.broadcasted_iota(jnp.int32, key.shape, key.ndim - 1)
  return (key > t) | ((key == t) & (index <= j))


def everything(shape: tuple[int, ...], length: int, key_dtype: np.dtype) -> tuple[jax.Array, jax.Array]:
  """The cut whose prefix is the whole row: every key is at least 0."""
  return jnp.zeros((*shape, 1), key_dtype), jnp.full((*shape, 1), length - 1, jnp.int32)


@dataclasses.dataclass(frozen=True)
class Target:
  """What a prefix must reach, per row.

  Attributes:
    parts: rows -> each entry's exact measure as int32 parts (one part for a count; the limbs of a weight's
      units for a probability mass), whose sums along a row cannot overflow int32.
    reached: the per-row sums of the parts (one array per part) -> whether they reach the target.
    guide: rows -> each entry's measure as a float (summed in float: a cheap, approximate ``reached``).
    guide_target: per row, what the guide's sums must reach.
  """

  parts: Callable[[jax.Array], Parts]
  reached: Callable[[Parts], jax.Array]
  guide: Callable[[jax.Array], jax.Array]
  guide_target: jax.Array


def _fresh(rows: jax.Array, step: jax.Array) -> jax.Array:
  """``rows``, as a value XLA cannot hoist out of the loop: what a pass derives from it (keys, weights) is
  recomputed inside the pass's fused reduction instead of being kept as whole-row arrays across passes."""
  return lax.optimization_barrier((rows, step))[0]


def _guess(rows: jax.Array, key_of: KeyOf, target: Target, batch: tuple[int, ...]) -> jax.Array:
  """The largest ``t`` whose entries ``key >= t`` reach the guide's target, a key bit per pass."""
  udt = jax.eval_shape(key_of, rows).dtype
  width = 8 * udt.itemsize

  def step(i: jax.Array, t: jax.Array) -> jax.Array:
    candidate = t | lax.shift_left(np.array(1, udt), (np.int32(width - 1) - i).astype(udt))
    fresh = _fresh(rows, i)
    measure = target.guide(fresh)
    total = jnp.sum(jnp.where(key_of(fresh) >= candidate[..., None], measure, np.array(0, measure.dtype)), axis=-1)
    return jnp.where(total >= target.guide_target, candidate, t)

  return lax.fori_loop(0, width, step, shardings.varying_as(jnp.zeros(batch, udt), rows, target.guide_target))


def _sums(key: jax.Array, parts: Parts, cuts: tuple[tuple[jax.Array, jax.Array], ...]) -> tuple[Parts, ...]:
  """Each part summed over the prefix of each cut: one fused multi-output reduction."""
  zero = np.int32(0)
  operands = tuple(jnp.where(through(key, *cut), part, zero) for cut in cuts for part in parts)
  shape = jnp.broadcast_shapes(*(o.shape for o in operands))
  operands = tuple(jnp.broadcast_to(o, shape) for o in operands)
  raw = lax.reduce(
    operands, (zero,) * len(operands), lambda a, b: tuple(x + y for x, y in zip(a, b, strict=True)), (len(shape) - 1,)
  )
  n = len(parts)
  return tuple(tuple(raw[i * n : (i + 1) * n]) for i in range(len(cuts)))


def _around(key: jax.Array, t: jax.Array) -> tuple[jax.Array, ...]:
  """Per row: the largest key below ``t`` (0 if none), the smallest above (all ones if none), how many
  entries equal ``t`` and the lowest index of one (the row's length if none): one fused pass."""
  shape = jnp.broadcast_shapes(key.shape, t.shape)
  key = jnp.broadcast_to(key, shape)
  length = shape[-1]
  index = lax.broadcasted_iota(jnp.int32, shape, len(shape) - 1)
  low, high = np.array(0, key.dtype), np.array(np.iinfo(key.dtype).max, key.dtype)
  equal = key == t
  below, above, ties, first = lax.reduce(
    (
      jnp.where(key < t, key, low),
      jnp.where(key > t, key, high),
      equal.astype(jnp.int32),
      jnp.where(equal, index, np.int32(length)),
    ),
    (low, high, np.int32(0), np.int32(length)),
    lambda a, b: (jnp.maximum(a[0], b[0]), jnp.minimum(a[1], b[1]), a[2] + b[2], jnp.minimum(a[3], b[3])),
    (len(shape) - 1,),
  )
  return below, above, ties, first


def cut(rows: jax.Array, key_of: KeyOf, target: Target) -> tuple[jax.Array, jax.Array]:
  """The shortest prefix of each row (descending key, ties by ascending index) whose measure reaches the
  target, as its cut ``(t, j)`` (each of shape ``(..., 1)``). The whole row must reach the target."""
  batch = tuple(np.shape(target.guide_target))
  length = rows.shape[-1]
  last = np.int32(length - 1)
  udt = jax.eval_shape(key_of, rows).dtype
  guess = _guess(rows, key_of, target, batch)

  def wrong(state: tuple[jax.Array, ...]) -> jax.Array:
    return (state[0] < _MAX_PASSES) & jnp.any(state[1] != _DONE)

  def move(state: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    step, phase, t, lo, hi, j_lo, j_hi, j_a, j_b = state
    fresh = _fresh(rows, step)
    key = key_of(fresh)
    parts = target.parts(fresh)
    threshold = phase == _THRESHOLD
    probe_a = (t[..., None], jnp.where(threshold, last, j_a)[..., None])  # key >= t, or the index probe
    probe_b = (t[..., None], jnp.where(threshold, np.int32(-1), j_b)[..., None])  # key > t, or the second
    sums_a, sums_b = _sums(key, parts, (probe_a, probe_b))
    reach_a, reach_b = target.reached(sums_a), target.reached(sums_b)
    below, above, ties, first = _around(key, t[..., None])

    # Threshold: found where key >= t reaches and key > t does not; else move down (key >= t falls short:
    # the threshold is at most the next key below) or up (key > t reaches: at least the next key above).
    found = threshold & reach_a & ~reach_b
    down, up = threshold & ~reach_a, threshold & reach_b
    hi = jnp.where(down, below, hi)
    lo = jnp.where(up, above, lo)
    moved = jnp.where(step < STEPS, jnp.where(down, below, above), lo + (hi - lo) // np.array(2, udt))
    t = jnp.where(down | up, moved, t)

    # Index: j_lo does not reach, j_hi does; the probes j_a <= j_b lie in (j_lo, j_hi].
    indexing = phase == _INDEX
    j_lo, j_hi = (
      jnp.where(indexing & ~reach_a, jnp.where(reach_b, j_a, j_b), j_lo),
      jnp.where(indexing & reach_a, j_a, jnp.where(indexing & reach_b, j_b, j_hi)),
    )
    several = found & (ties > 1)  # the lowest equal entry alone may reach: probe it first
    j_lo = jnp.where(several, first - 1, j_lo)
    j_hi = jnp.where(found, last, j_hi)
    span = j_hi - j_lo
    j_a = jnp.where(several, first, j_lo + jnp.maximum(span // 3, 1))
    j_b = jnp.where(several, first + (last - first) // 2, jnp.maximum(j_a, j_lo + (2 * span) // 3))
    phase = jnp.where(
      found & (ties == 1), _DONE, jnp.where(several, _INDEX, jnp.where(indexing & (span <= 1), _DONE, phase))
    )
    return step + 1, phase, t, lo, hi, j_lo, j_hi, j_a, j_b

  zeros = jnp.zeros(batch, jnp.int32)
  per_row = (zeros, guess, jnp.zeros(batch, udt), jnp.full(batch, np.iinfo(udt).max, udt), zeros, zeros, zeros, zeros)
  # Inside shard_map: typed as varying as what the passes compute from the rows (the loop's carry keeps one type).
  state: tuple[jax.Array, ...] = (jnp.int32(0), *(shardings.varying_as(a, rows, target.guide_target) for a in per_row))
  _, _, t, _, _, _, j, _, _ = lax.while_loop(wrong, move, state)
  return t[..., None], j[..., None]
