r"""The one decision: which entries of each row the filters keep, on the row's candidates when they can tell.

Every filter keeps a *prefix* of the row in dmljax's order of the raw logits (descending value, ties by ascending
index, NaN dropped; a temperature changes the weights, never this order): top-k the first ``k`` entries, top-p (on
what top-k kept) the shortest prefix whose probability reaches ``p``, min-p the entries whose weight is at least the
bound. :func:`decide` decides every row, for the
masks and for ``sample`` alike:

1. the row's first ``C`` entries in that order are selected once (:func:`dmljax.top_k`'s selection, no sort;
   ``C`` is ``max_k`` when given, else :data:`CANDIDATES`);
2. per row, the top-k/top-p prefix is *within* the candidates (top-k with ``k <= C``; top-p when the
   candidates' exact units reach ``p`` of the row's, or of the top-k entries'), *the whole row* (every filter
   off: ``k <= 0`` or ``k >= V``, ``p >= 1``), or unknown; the kept set is within the candidates when that
   prefix is, or when min-p's bound falls among them and the prefix is known to reach past them;
3. only the rows whose prefix is unknown, among those that need it (a mask needs every row's; ``sample``
   only the sampled rows whose kept set is not within the candidates: greedy rows never), are searched whole
   (:mod:`.search`, or the CPU kernel's call: :mod:`.kernel`), one row at a time in a loop over the rows that
   need it (:mod:`.each_row`; its trip count stays one scalar under ``jax.vmap``: :mod:`dmljax._src.rowwise`), so
   it costs nothing when no row needs it and one row's work for each row that does. What crosses the loop is a cut
   per row; a row whose top-p total is its whole row's is summed the same way, one row a pass.

Per-row parameters may carry leading axes the logits lack (``jax.vmap`` over a parameter with shared logits):
everything per row broadcasts, and the whole-row passes read the one copy of the logits.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import selection, shardings
from dmljax._src.sampling import each_row, kernel, mass, search

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
  top: jax.Array  # (..., 1): the largest logit, NaN dropped (may have leading axes the logits lack)
  divisor: jax.Array | None  # (..., 1) in the work type: the temperature, or None

  @property
  def work(self) -> np.dtype:
    return work_dtype(self.logits.dtype)

  @property
  def length(self) -> int:
    return int(self.logits.shape[-1])

  def whole(self, rows: jax.Array | None = None) -> jax.Array:
    """The rows (or a fresh copy of them), NaN dropped, broadcast to every row the per-row values have."""
    clean = drop_nan(self.logits if rows is None else rows)
    return jnp.broadcast_to(clean, (*self.top.shape[:-1], clean.shape[-1]))

  def key(self, rows: jax.Array | None = None) -> jax.Array:
    return search.order_key(self.whole(rows))

  def z(self, values: jax.Array) -> jax.Array:
    """Relative logits of ``values`` (entries of these rows, NaN dropped, any trailing length)."""
    return mass.relative(values.astype(self.work), self.top.astype(self.work), self.divisor)

  def weights(self, rows: jax.Array | None = None) -> jax.Array:
    return mass.weights(self.z(self.whole(rows)))

  def at(self, at: each_row.At) -> Rows:
    """The one row at a position of the batch (:mod:`.each_row`)."""
    return Rows(at.row(self.logits), at(self.top, 1), at(self.divisor, 1))


def through(rows: Rows, cut: Cut, fresh: jax.Array | None = None) -> jax.Array:
  return search.through(rows.key(fresh), *cut)


@dataclasses.dataclass(frozen=True)
class Candidates:
  """A row's first ``count`` entries in the order: their values (the logits' type), indices and weights."""

  values: jax.Array
  indices: jax.Array
  weights: jax.Array

  @staticmethod
  def of(logits: jax.Array, count: int, batch: tuple[int, ...], divisor: jax.Array | None) -> tuple[Rows, Candidates]:
    """The rows (their largest logit is the first candidate) and their candidates, broadcast to ``batch``."""
    values, indices = selection.top_k_last_axis(drop_nan(logits), min(count, logits.shape[-1]), True)
    shape = (*batch, values.shape[-1])
    values, indices = jnp.broadcast_to(values, shape), jnp.broadcast_to(indices, shape)
    rows = Rows(logits, values[..., :1], divisor)
    return rows, Candidates(values, indices, mass.weights(rows.z(values)))

  @property
  def count(self) -> int:
    return int(self.values.shape[-1])

  def cut_at(self, position: jax.Array) -> Cut:
    """The cut whose prefix ends with the candidate at ``position`` (per row)."""
    pick = lambda a: jnp.take_along_axis(a, position[..., None], axis=-1)  # noqa: E731
    return search.order_key(pick(self.values)), pick(self.indices)


class Filters(NamedTuple):
  """The filters to apply (``None``: not applied), mapped by :mod:`.params`: ``k`` int32 in ``[1, V]`` (``V``
  keeps all), ``p`` float32 (NaN as 1), ``bound`` min-p's ratio in ``[0, 1]``."""

  k: jax.Array | None = None
  p: jax.Array | None = None
  bound: jax.Array | None = None


class Decision(NamedTuple):
  """What :func:`decide` found, per row (nothing of the row's size)."""

  values: jax.Array  # (..., C) the candidates, in order
  indices: jax.Array  # (..., C)
  weights: jax.Array  # (..., C)
  keep: jax.Array  # (..., C) the kept candidates (meaningful where ``within``)
  within: jax.Array  # (...) the kept set lies among the candidates
  cut_t: jax.Array  # (..., 1) the top-k/top-p prefix's cut (the whole row's where both are off)
  cut_j: jax.Array  # (..., 1)


def _count_target(rows: Rows, k: jax.Array) -> search.Target:
  shape = (*k.shape, rows.length)
  return search.Target(
    parts=lambda fresh: (jnp.ones(shape, jnp.int32),),
    reached=lambda sums: sums[0] >= k,
    guide=lambda fresh: jnp.ones(shape, rows.work),
    guide_target=k.astype(rows.work),
  )


def _mass_target(rows: Rows, p: jax.Array, prior: Cut | None) -> search.Target:
  """Reaching ``p`` of the mass of the ``prior`` cut's entries (of the whole row when ``None``), in exact units
  (:mod:`.mass`), guided by float sums of the weights."""
  units = mass.Units(rows.length, rows.work)
  zero = np.array(0, rows.work)

  def w(fresh: jax.Array) -> jax.Array:
    weights = rows.weights(fresh)
    return weights if prior is None else jnp.where(through(rows, prior, fresh), weights, zero)

  need = mass.required(mass.sums(mass.entry_limbs(w(rows.logits), units), None, units), p, units)
  return search.Target(
    parts=lambda fresh: mass.entry_limbs(w(fresh), units),
    reached=lambda sums: mass.reaches(mass.normalize(sums, units.bits, units.sum_limbs), need, units),
    guide=w,
    guide_target=jnp.sum(w(rows.logits), axis=-1) * jnp.clip(p, np.float32(0), np.float32(1)).astype(rows.work),
  )


def _weighs(chosen: Candidates, units: mass.Units) -> jax.Array:
  """Whether the row's last candidate weighs a unit: a row whose last does not needs no pass for its total, as every
  entry after it weighs no more (a row after ``top_k_mask``, or with fewer finite entries than candidates)."""
  last = mass.entry_limbs(chosen.weights[..., -1], units)
  return functools.reduce(jnp.logical_or, [limb != 0 for limb in last])


def _first_reaching(prefix: mass.Limbs, need: mass.Limbs, units: mass.Units) -> tuple[jax.Array, jax.Array]:
  """Per row: the first candidate position whose inclusive prefix reaches ``need``, and whether any does."""
  reached = mass.reaches(prefix, tuple(n[..., None] for n in need), units)
  count = reached.shape[-1]
  first = np.int32(count) - jnp.sum(reached, axis=-1, dtype=jnp.int32)  # reaching is monotone along the prefix
  return jnp.minimum(first, np.int32(count - 1)), reached[..., -1]


def batch_of(logits: jax.Array, *per_row: jax.Array | None) -> tuple[int, ...]:
  """The rows' shape: the logits' leading axes, broadcast with every per-row value's shape."""
  return tuple(jnp.broadcast_shapes(logits.shape[:-1], *(np.shape(a) for a in per_row if a is not None)))


class _Settled(NamedTuple):
  """What the candidates tell once top-p's total is known (:func:`decide`)."""

  keep: jax.Array
  within: jax.Array
  known_cut: Cut  # the cut where the candidates tell it, else the whole row's
  searching: jax.Array  # the rows the whole-row search decides


def decide(
  logits: jax.Array,
  filters: Filters,
  *,
  count: int,
  divisor: jax.Array | None = None,
  wanted: jax.Array | None = None,
) -> Decision:
  """Decides every row: on its candidates where they tell, else (where ``wanted``: every row by default) by the
  whole-row search. ``divisor`` (..., 1), a temperature, scales the weights the filters sum and compare
  (:math:`e^{(x - m) / T}`), never the order: the prefixes are those of the raw logits' order at every
  temperature."""
  batch = batch_of(logits, *filters, None if divisor is None else divisor[..., 0], wanted)
  k, p, bound = (None if f is None else jnp.broadcast_to(f, batch) for f in filters)
  divisor = None if divisor is None else jnp.broadcast_to(divisor, (*batch, 1))
  rows, chosen = Candidates.of(logits, count, batch, divisor)
  length, c = rows.length, chosen.count
  units = mass.Units(length, rows.work)
  position = lax.broadcasted_iota(jnp.int32, chosen.values.shape, len(batch))
  true = jnp.ones(batch, jnp.bool_)
  wanted = true if wanted is None else jnp.broadcast_to(wanted, batch)
  every_entry = length <= c  # every entry is a candidate: every row is decided on them

  top_k = jnp.ones(chosen.values.shape, jnp.bool_)
  k_within, k_off = ~true, true  # the top-k prefix ends among the candidates / is the whole row
  if k is not None:
    top_k = position < k[..., None]
    k_within, k_off = (k <= c) | every_entry, k >= length
  whole = search.everything(batch, length, jax.eval_shape(rows.key).dtype)
  kept_total: mass.Limbs = ()
  needs_total = ~true  # the rows whose top-p total is the whole row's, summed over it
  if p is not None:
    limbs = mass.entry_limbs(jnp.where(top_k, chosen.weights, np.array(0, rows.work)), units)
    prefix = mass.inclusive_prefix(limbs, units)
    kept_total = tuple(limb[..., -1] for limb in prefix)
    if not every_entry:
      needs_total = wanted & ~k_within & k_off & (p < 1) & _weighs(chosen, units)

  def settle(total: mass.Limbs) -> _Settled:
    keep = top_k
    cut_within = k_within  # the top-k/top-p prefix ends among the candidates
    cut_off = k_off  # ... or is the whole row
    beyond = ~k_within  # ... or is known to reach past the last candidate
    if p is not None:
      p_off = p >= 1
      known = k_within | k_off  # top-p's total (of the top-k entries) is known, or is the row's
      first, reached = _first_reaching(prefix, mass.required(total, p, units), units)
      keep = keep & ((position <= first[..., None]) | p_off[..., None])
      cut_within = k_within | (known & reached & ~p_off)
      cut_off = k_off & p_off
      beyond = (p_off & ~k_within) | (known & ~reached & ~p_off)
    within = cut_within | every_entry
    by_candidates = chosen.cut_at(jnp.sum(keep, axis=-1, dtype=jnp.int32) - 1)  # keep is a prefix of >= 1 entry
    if bound is not None:
      ratio = bound.astype(rows.work)
      keep = keep & (chosen.weights >= ratio[..., None])
      within = within | (beyond & (chosen.weights[..., -1] < ratio))
    searching = wanted & ~within & ~cut_within & ~cut_off
    return _Settled(keep, within, _where(cut_within, by_candidates, whole), searching)

  if (k is None and p is None) or every_entry:
    settled = settle(kept_total)
    return Decision(chosen.values, chosen.indices, chosen.weights, settled.keep, settled.within, *settled.known_cut)
  like = (rows.logits, rows.top, rows.divisor, k, p)

  def composition(_: jax.Array) -> tuple[mass.Limbs, Cut]:
    """The row totals (one pass over each row that needs its own), then the search of each row that needs it."""

    def row_total(at: each_row.At) -> mass.Limbs:
      return mass.sums(mass.entry_limbs(rows.at(at).weights(), units), None, units)

    total = kept_total if p is None else each_row.each(needs_total, row_total, kept_total, name="row_totals", like=like)
    settled = settle(total)
    counting = settled.searching & ~k_off & ~k_within  # top-k's prefix is searched too

    def search_row(at: each_row.At) -> Cut:
      return _searched(rows.at(at), Filters(at(k), at(p)), at(counting))

    return total, each_row.each(settled.searching, search_row, settled.known_cut, name="row_searches", like=like)

  def by_kernel(_: jax.Array) -> tuple[mass.Limbs, Cut]:
    """Each row that needs its total searched by the kernel at once (the cut costs it little more than the total),
    then each row of top-k's search that needs no total."""

    def cut_row(at: each_row.At, what: jax.Array) -> tuple[mass.Limbs, Cut]:
      one = rows.at(at)
      pi = jnp.zeros((1,), jnp.int32) if p is None else mass.numerator(at(p))
      kk = jnp.ones((1,), jnp.int32) if k is None else at(k)
      weights = None if p is None else one.weights()
      t, j, total = kernel.cut(one.logits, weights, kk, pi, what, units)
      return total, (t[:, None], j[:, None])

    def total_row(at: each_row.At) -> tuple[mass.Limbs, Cut]:
      return cut_row(at, jnp.full((1,), kernel.MASS, jnp.int32))

    total, found = kept_total, whole
    if p is not None:
      total, found = each_row.each(needs_total, total_row, (kept_total, whole), name="kernel_totals", like=like)
    settled = settle(total)
    cut = _where(settled.searching & needs_total, found, settled.known_cut)

    def search_row(at: each_row.At) -> Cut:
      massing = jnp.zeros((1,), jnp.int32) if p is None else jnp.where(at(p) < 1, kernel.MASS, 0)
      return cut_row(at, kernel.COUNT + massing)[1]

    return total, each_row.each(settled.searching & ~needs_total, search_row, cut, name="kernel_searches", like=like)

  total, cut = kernel.route(rows.logits, kernel=by_kernel, composition=composition)
  settled = settle(total)
  return Decision(chosen.values, chosen.indices, chosen.weights, settled.keep, settled.within, *cut)


def _searched(rows: Rows, filters: Filters, counting: jax.Array) -> Cut:
  """The top-k/top-p cut of whole rows, by the search: top-k's (searched where ``counting``, else the whole row),
  then top-p's among what top-k kept."""
  k, p, _ = filters
  batch = counting.shape
  whole = search.everything(batch, rows.length, jax.eval_shape(rows.key).dtype)
  cut_k: Cut | None = None
  if k is not None:
    cut_k = lax.cond(
      jnp.any(counting),
      *shardings.typed_branches(
        lambda: _where(counting, search.cut(rows.logits, rows.key, _count_target(rows, k)), whole),
        lambda: whole,
      ),
    )
  if p is None:
    assert cut_k is not None
    return cut_k
  prior = whole if cut_k is None else cut_k

  def by_mass() -> Cut:
    return _where(p >= 1, prior, search.cut(rows.logits, rows.key, _mass_target(rows, p, cut_k)))

  return lax.cond(jnp.any(p < 1), *shardings.typed_branches(by_mass, lambda: prior))


def _where(condition: jax.Array, a: Cut, b: Cut) -> Cut:
  return tuple(jnp.where(condition[..., None], x, y) for x, y in zip(a, b, strict=True))  # type: ignore[return-value]


def kept(rows_logits: jax.Array, decision: Decision, bound: jax.Array | None, divisor: jax.Array | None) -> jax.Array:
  """The whole rows' kept entries: the cut's prefix, and min-p's bound (NaN entries are never kept)."""
  rows = Rows(rows_logits, decision.values[..., :1], divisor)
  keep = through(rows, (decision.cut_t, decision.cut_j))
  if bound is not None:
    keep = keep & (rows.weights() >= bound.astype(rows.work)[..., None])
  return keep & ~jnp.isnan(jnp.broadcast_to(rows_logits, keep.shape))
