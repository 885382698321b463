r"""Which entries each filter keeps: decided on a row's first candidates, whole-row search only where they cannot.

Every filter keeps a *prefix* of the row in dmljax's order (descending value, ties by ascending index, NaN
dropped), held as its *cut* ``(t, j)``: the entries whose order key is above ``t``, and those equal to ``t`` of
index at most ``j`` (:func:`.search.through`). The route:

1. the row's first ``C`` entries in that order are selected once (:func:`dmljax.top_k`'s selection; ``C`` is
   ``max_k`` when given, else :data:`CANDIDATES`), with no sort of the row;
2. each filter checks exactly whether its prefix ends among them: top-k when ``k <= C``; top-p when the
   candidates' exact probability units reach ``p`` of the row's (or of the top-k entries', when top-k came
   first and ended among them); min-p when the last candidate's weight is below the bound;
3. only if some row is not decided does the whole-row search run (:mod:`.search`), under one
   :func:`jax.lax.cond` whose predicate is one scalar, also under ``jax.vmap`` (:mod:`.rowwise`): it costs
   nothing when every row is decided, and what crosses the ``cond`` is a cut per row, never a whole row.

Inputs are already validated and mapped (:mod:`.params`): ``k`` int32 in ``[1, V]``, ``p`` float32 (NaN as 1),
``bound`` min-p's float32 ratio in [0, 1].
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import selection
from dmljax._src.sampling import mass, reductions, search

CANDIDATES = 64  # candidates looked at first when the caller gives no max_k
Cut = tuple[jax.Array, jax.Array]  # (t, j), each (..., 1): unsigned order key and int32 index


def work_dtype(dtype: np.dtype) -> np.dtype:
  """float64 for float64 logits, float32 for every narrower float."""
  return np.dtype(np.float64) if np.dtype(dtype).itemsize == 8 else np.dtype(np.float32)


def drop_nan(x: jax.Array) -> jax.Array:
  return jnp.where(jnp.isnan(x), np.array(-np.inf, x.dtype), x)


@dataclasses.dataclass(frozen=True)
class Rows:
  """Rows of logits (NaN included) with what the filters derive from them, recomputed wherever it is needed.

  Nothing of the rows' size is kept: keys and weights are functions of the logits (or of the fresh copy a
  search pass gets), fused into the reductions that read them.
  """

  logits: jax.Array
  top: jax.Array  # (..., 1): the largest logit, NaN dropped
  divisor: jax.Array | None  # (..., 1) in the work type: the temperature, or None

  @property
  def work(self) -> np.dtype:
    return work_dtype(self.logits.dtype)

  @property
  def length(self) -> int:
    return int(self.logits.shape[-1])

  def key(self, rows: jax.Array | None = None) -> jax.Array:
    return search.unsigned_order_key(drop_nan(self.logits if rows is None else rows))

  def z(self, values: jax.Array) -> jax.Array:
    """Relative logits of ``values`` (entries of these rows, NaN dropped, any trailing length)."""
    return mass.relative(values.astype(self.work), self.top.astype(self.work), self.divisor)

  def weights(self, rows: jax.Array | None = None) -> jax.Array:
    return mass.weights(self.z(drop_nan(self.logits if rows is None else rows)))


def through(rows: Rows, cut: Cut, fresh: jax.Array | None = None) -> jax.Array:
  return search.through(rows.key(fresh), *cut)


def _choose(decided: jax.Array, by_candidates: Cut, search_rows: Callable[[], Cut]) -> Cut:
  """``by_candidates`` where every row is decided; otherwise the search's cut for the undecided rows."""

  def fallback() -> Cut:
    found = search_rows()
    return tuple(jnp.where(decided[..., None], c, s) for c, s in zip(by_candidates, found, strict=True))  # type: ignore[return-value]

  return lax.cond(jnp.all(decided), lambda: by_candidates, fallback)


@dataclasses.dataclass(frozen=True)
class Candidates:
  """A row's first ``count`` entries in the order: their values (the logits' type), indices and weights."""

  values: jax.Array
  indices: jax.Array
  weights: jax.Array

  @staticmethod
  def of(logits: jax.Array, count: int, divisor: jax.Array | None = None) -> tuple[Rows, Candidates]:
    """The rows (their largest logit is the first candidate) and their candidates."""
    values, indices = selection.top_k_last_axis(drop_nan(logits), min(count, logits.shape[-1]), True)
    rows = Rows(logits, values[..., :1], divisor)
    return rows, Candidates(values, indices, mass.weights(rows.z(values)))

  @property
  def count(self) -> int:
    return int(self.values.shape[-1])

  def cut_at(self, position: jax.Array) -> Cut:
    """The cut whose prefix ends with the candidate at ``position`` (per row)."""
    pick = lambda a: jnp.take_along_axis(a, position[..., None], axis=-1)  # noqa: E731
    return search.unsigned_order_key(pick(self.values)), pick(self.indices)


def count_cut(rows: Rows, k: jax.Array) -> Cut:
  """The whole-row search for the first ``k`` entries."""
  return search.cut(rows.logits, rows.key, lambda _, mask: reductions.row_sum(mask) >= k)


def mass_cut(rows: Rows, p: jax.Array, prior: Cut | None = None) -> Cut:
  """The whole-row search for the shortest prefix reaching ``p`` of the mass (of the ``prior`` cut's entries).

  The threshold is bisected on float sums of the weights first (one cheap pass a key bit), then checked in
  exact units (:func:`.search.cut`).
  """
  units = mass.Units(rows.length, rows.work)
  zero = np.array(0, rows.work)

  def w(fresh: jax.Array) -> jax.Array:
    weights = rows.weights(fresh)
    return weights if prior is None else jnp.where(through(rows, prior, fresh), weights, zero)

  need = mass.required(mass.sums(mass.entry_limbs(w(rows.logits), units), None, units), p, units)
  target = reductions.row_sum(w(rows.logits)) * jnp.clip(p, np.float32(0), np.float32(1)).astype(rows.work)

  def reaches(fresh: jax.Array, mask: jax.Array) -> jax.Array:
    # Units of the masked weights, computed inside each pass and fused into its one reduction.
    return mass.reaches(mass.sums(mass.entry_limbs(jnp.where(mask, w(fresh), zero), units), None, units), need, units)

  def roughly(fresh: jax.Array, mask: jax.Array) -> jax.Array:
    return reductions.row_sum(jnp.where(mask, w(fresh), zero)) >= target

  return search.cut(rows.logits, rows.key, reaches, roughly)


def _row_total(rows: Rows, chosen: Candidates, candidates_total: mass.Limbs, wanted: jax.Array) -> mass.Limbs:
  """The row's total units where ``wanted``, else ``candidates_total``: one fused pass over the rows, skipped when
  no wanted row needs it. A row whose last candidate weighs no unit needs none: every entry after it weighs no more
  (a row after ``top_k_mask``, or with fewer finite entries than candidates, is such a row)."""
  units = mass.Units(rows.length, rows.work)
  last = mass.entry_limbs(chosen.weights[..., -1], units)
  needed = wanted & functools.reduce(jnp.logical_or, [limb != 0 for limb in last])

  def with_row_total() -> mass.Limbs:
    row = mass.sums(mass.entry_limbs(rows.weights(), units), None, units)
    return tuple(jnp.where(needed, r, c) for c, r in zip(candidates_total, row, strict=True))

  return lax.cond(jnp.any(needed), with_row_total, lambda: candidates_total)


def _first_reaching(prefix: mass.Limbs, need: mass.Limbs, units: mass.Units) -> tuple[jax.Array, jax.Array]:
  """Per row: the first candidate position whose inclusive prefix reaches ``need``, and whether any does."""
  reached = mass.reaches(prefix, tuple(n[..., None] for n in need), units)
  count = reached.shape[-1]
  first = np.int32(count) - jnp.sum(reached, axis=-1, dtype=jnp.int32)  # reaching is monotone along the prefix
  return jnp.minimum(first, np.int32(count - 1)), reached[..., -1]


def top_k_keep(logits: jax.Array, k: jax.Array, *, count: int) -> jax.Array:
  """Which entries ``top_k_mask`` keeps."""
  rows, chosen = Candidates.of(logits, count)
  by_candidates = chosen.cut_at(jnp.clip(k - 1, 0, chosen.count - 1))
  return through(rows, _choose(k <= chosen.count, by_candidates, lambda: count_cut(rows, k)))


def top_p_keep(logits: jax.Array, p: jax.Array, *, count: int) -> jax.Array:
  """Which entries ``top_p_mask`` keeps."""
  rows, chosen = Candidates.of(logits, count)
  units = mass.Units(rows.length, rows.work)
  prefix = mass.inclusive_prefix(mass.entry_limbs(chosen.weights, units), units)
  total = _row_total(rows, chosen, tuple(limb[..., -1] for limb in prefix), jnp.ones(logits.shape[:-1], jnp.bool_))
  first, decided = _first_reaching(prefix, mass.required(total, p, units), units)
  found = _choose(decided, chosen.cut_at(first), lambda: mass_cut(rows, p))
  return through(rows, found) | (p >= 1)[..., None]


def min_p_keep(logits: jax.Array, bound: jax.Array) -> jax.Array:
  """Which entries ``min_p_mask`` keeps: weight at least ``bound`` (elementwise: no candidates needed)."""
  rows, _ = Candidates.of(logits, 1)  # the largest entry, without a whole-row temporary
  return rows.weights() >= bound.astype(rows.work)[..., None]


@dataclasses.dataclass(frozen=True)
class Chain:
  """``sample``'s filters (``None``: not applied), applied in the order top-k, top-p, min-p."""

  k: jax.Array | None
  p: jax.Array | None
  bound: jax.Array | None

  @property
  def empty(self) -> bool:
    return self.k is None and self.p is None and self.bound is None


def chain_on_candidates(rows: Rows, chosen: Candidates, chain: Chain) -> tuple[jax.Array, jax.Array]:
  """The chain's kept candidates, and per row whether the kept set is certainly among the candidates."""
  length = rows.length
  units = mass.Units(length, rows.work)
  shape = chosen.values.shape
  position = lax.broadcasted_iota(jnp.int32, shape, len(shape) - 1)
  keep = jnp.ones(shape, jnp.bool_)
  whole_row = jnp.ones(shape[:-1], jnp.bool_)  # top-k off (k = V): top-p's mass is the whole row's
  within = jnp.full(shape[:-1], length <= chosen.count)
  known = jnp.ones(shape[:-1], jnp.bool_)  # whether the prefix kept so far is known, inside or past the candidates
  if chain.k is not None:
    keep = position < chain.k[..., None]
    within = within | (chain.k <= chosen.count)
    whole_row = chain.k >= length
  if chain.p is not None:
    limbs = mass.entry_limbs(jnp.where(keep, chosen.weights, np.array(0, rows.work)), units)
    prefix = mass.inclusive_prefix(limbs, units)
    kept_total = tuple(limb[..., -1] for limb in prefix)
    total = _row_total(rows, chosen, kept_total, ~within & whole_row & (chain.p < 1))
    first, reached = _first_reaching(prefix, mass.required(total, chain.p, units), units)
    keep = keep & ((position <= first[..., None]) | (chain.p >= 1)[..., None])
    known = within | whole_row
    within = within | (whole_row & reached & (chain.p < 1))
  if chain.bound is not None:
    bound = chain.bound.astype(rows.work)[..., None]
    keep = keep & (chosen.weights >= bound)
    within = within | (known & (chosen.weights[..., -1] < bound[..., 0]))
  return keep, within


def chain_on_rows(rows: Rows, chain: Chain) -> Callable[[], jax.Array]:
  """The chain on whole rows, by the whole-row searches: returns a function giving the kept mask (so that the
  mask is computed where it is used, fused into the draw)."""
  cut_k = None if chain.k is None else count_cut(rows, chain.k)
  cut_p = None if chain.p is None else mass_cut(rows, chain.p, cut_k)

  def keep() -> jax.Array:
    kept = jnp.ones(rows.logits.shape, jnp.bool_)
    if cut_k is not None:
      kept = through(rows, cut_k)
    if cut_p is not None and chain.p is not None:
      kept = kept & (through(rows, cut_p) | (chain.p >= 1)[..., None])
    if chain.bound is not None:
      kept = kept & (rows.weights() >= chain.bound.astype(rows.work)[..., None])
    return kept

  return keep
