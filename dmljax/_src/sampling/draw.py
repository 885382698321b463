r"""The draw: an exponential race over what the filters kept, on the candidates or on whole rows; the greedy token.

With relative logits :math:`z_i = (x_i - m) / T` (0 at the row's largest entries, so +inf logits share the draw
equally and a temperature tending to 0 sends every other entry to -inf rather than overflowing) and weights
:math:`w_i = e^{z_i}`, the token is :math:`\arg\max_i w_i / E_i` over the kept entries, the lowest index among
equal maxima, with :math:`E_i` the exponential noise of :mod:`.noise` at (key, row, i): a draw from the softmax of
the kept :math:`z` (it is Gumbel-max, :math:`\arg\max_i (z_i + g_i)` with :math:`g_i = -\log E_i`, without a
second logarithm per entry). The noise depends on the entry's index alone, so the candidates' draw and the whole
row's draw pick the same token.

The kept entries are the filters' (:mod:`.filters`), which rank the raw logits whatever the temperature; only the
weights are scaled. Rows whose logits are all NaN or -inf draw index 0; temperature 0 (or a traced negative or NaN
one) takes the row's first entry in the order, NaN dropped (greedy). Temperature +inf gives every finite entry
weight 1 and every -inf one weight 0 (a uniform draw among the finite kept entries), unless the row's largest
logit is +inf: then its +inf entries weigh 1 and every other entry 0, as at any temperature.

The noise's key words may carry leading axes the logits lack (``jax.vmap`` over keys with shared logits): the
race broadcasts, and the logits are read once per key, never copied.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import shardings
from dmljax._src.sampling import each_row, filters, kernel, noise

CHUNK = 512  # kept entries raced a pass, where the kernel lists them


def _first_of_maxima(score: jax.Array, indices: jax.Array, fill: int) -> jax.Array:
  """The lowest of ``indices`` with the best score (``fill`` where none is: a NaN best).

  Two single-output reductions over the scores, each a vectorized pass on XLA:CPU (a fused (value, index)
  reduction computes the scores in a scalar loop there, several times slower): the best score, then the lowest
  index that has it.
  """
  top = jnp.max(score, axis=-1, keepdims=True)
  return jnp.min(jnp.where(score == top, indices, np.int32(fill)), axis=-1)


def _score(
  w: jax.Array, keep: jax.Array, key: tuple[jax.Array, jax.Array], rows: jax.Array, index: jax.Array
) -> jax.Array:
  """The race's scores: ``w / E`` where kept, -1 elsewhere (below every kept score)."""
  score = w / noise.exponential_at(key, rows, index).astype(w.dtype)
  return jnp.where(keep, score, np.array(-1, w.dtype))


def _divisor(temperature: jax.Array, work: np.dtype) -> tuple[jax.Array, jax.Array]:
  """Which rows are sampled (temperature > 0; the others are greedy), and their temperature as a divisor."""
  hot = temperature > 0
  return hot, jnp.where(hot, temperature, np.float32(1)).astype(work)[..., None]


def _whole_row_draw(
  logits: jax.Array,
  decision: filters.Decision,
  divisor: jax.Array,
  bound: jax.Array | None,
  key: tuple[jax.Array, jax.Array],
  row: jax.Array,
) -> jax.Array:
  """The race over every kept entry of whole rows."""

  keep = filters.kept(logits, decision, bound, divisor)
  data = filters.Rows(logits, decision.values[..., :1], divisor)
  index = lax.broadcasted_iota(jnp.int32, keep.shape, keep.ndim - 1)
  return _first_of_maxima(_score(data.weights(), keep, key, row, index), index, logits.shape[-1] - 1)


def _listed_draw(
  logits: jax.Array,
  decision: filters.Decision,
  divisor: jax.Array,
  bound: jax.Array | None,
  key: tuple[jax.Array, jax.Array],
  row: jax.Array,
) -> jax.Array:
  """The race of :func:`_whole_row_draw` over the kept entries the kernel lists (one row): :data:`CHUNK` of them a
  pass, in ascending index order, so that a row pays for its kept entries' noise, not for its whole row's. A row
  that keeps most of its entries is raced whole (the same token: the same scores of the same entries)."""
  length = logits.shape[-1]
  listed, count = kernel.kept(logits, decision.cut_t[:, 0], decision.cut_j[:, 0])
  data = filters.Rows(logits, decision.values[..., :1], divisor)
  size = min(CHUNK, length)
  slot = lax.broadcasted_iota(jnp.int32, (1, size), 1)
  low = np.array(-1, data.work)  # below every kept score: an entry of the list wins at once

  def chunk(state: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
    start, best, token = state
    start = jnp.minimum(start, np.int32(length - size))  # the last chunk overlaps the one before: ties keep it
    index = lax.dynamic_slice_in_dim(listed, start, size, axis=1)
    weights = data.weights(jnp.take_along_axis(logits, index, axis=-1))
    keep = start + slot < count[:, None]
    if bound is not None:
      keep = keep & (weights >= bound.astype(data.work)[..., None])
    score = _score(weights, keep, key, row, index)
    top = jnp.max(score, axis=-1)
    first = _first_of_maxima(score, index, length - 1)
    better = top > best  # the earlier chunk's lower index wins a tie
    return start + np.int32(size), jnp.where(better, top, best), jnp.where(better, first, token)

  def races(state: tuple[jax.Array, ...]) -> jax.Array:
    return state[0] < count[0]

  like = (logits, listed, divisor, key[0], row)
  start = (jnp.int32(0), jnp.full((1,), low), jnp.zeros((1,), jnp.int32))
  state = tuple(shardings.varying_as(a, *like) for a in start)
  raced = lambda: lax.while_loop(races, chunk, state)[2]  # noqa: E731
  whole = lambda: _whole_row_draw(logits, decision, divisor, bound, key, row)  # noqa: E731
  return lax.cond(count[0] * 2 > length, *shardings.typed_branches(whole, raced))


def decide(
  logits: jax.Array,
  temperature: jax.Array,
  k: jax.Array | None,
  p: jax.Array | None,
  bound: jax.Array | None,
  *,
  count: int,
) -> filters.Decision:
  """The filters' decision for ``sample`` (it does not depend on the key): greedy rows need no whole-row work."""
  hot, divisor = _divisor(temperature, filters.work_dtype(logits.dtype))
  return filters.decide(logits, filters.Filters(k, p, bound), count=count, divisor=divisor, wanted=hot)


def draw(
  logits: jax.Array,
  words: jax.Array,
  rows: jax.Array,
  temperature: jax.Array,
  bound: jax.Array | None,
  decision: filters.Decision,
) -> jax.Array:
  """One token per row: ``words`` (..., 2) the sampling stream's Threefry key (:func:`.noise.stream_key`),
  ``rows`` (...) the row's number (:mod:`.rows`)."""
  length = logits.shape[-1]
  batch = filters.batch_of(logits, words[..., 0], rows, temperature, bound, decision.within)
  hot, divisor = _divisor(jnp.broadcast_to(temperature, batch), filters.work_dtype(logits.dtype))
  bound = None if bound is None else jnp.broadcast_to(bound, batch)
  decision = filters.Decision(*(jnp.broadcast_to(a, (*batch, *a.shape[decision.within.ndim :])) for a in decision))
  within = decision.within
  stream = jnp.broadcast_to(words, (*batch, 2))
  key = (stream[..., 0], stream[..., 1])
  row = jnp.broadcast_to(rows, batch)
  by_candidates = _first_of_maxima(
    _score(decision.weights, decision.keep, key, row, decision.indices), decision.indices, length
  )

  def whole_rows(race: Callable[..., jax.Array]) -> Callable[[jax.Array], jax.Array]:
    def one(at: each_row.At) -> jax.Array:
      here = filters.Decision(*(at(a, a.ndim - len(batch)) for a in decision))
      return race(at.row(logits), here, at(divisor, 1), at(bound), (at(key[0]), at(key[1])), at(row))

    like = (logits, stream, row, divisor, bound, *decision)
    return lambda _: each_row.each(hot & ~within, one, by_candidates, name="row_draws", like=like)

  sampled = kernel.route(logits, kernel=whole_rows(_listed_draw), composition=whole_rows(_whole_row_draw))
  sampled = jnp.where(decision.values[..., 0] == -np.inf, np.int32(0), sampled)
  return jnp.where(hot, sampled, decision.indices[..., 0])  # greedy: the first entry in the order
