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

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import shardings
from dmljax._src.sampling import filters, noise


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

  def whole_rows() -> jax.Array:
    per_row = (decision, divisor, bound, key, row)
    lead = batch[: len(batch) - (logits.ndim - 1)]  # axes the logits lack: a batch of keys (or of parameters)
    if not lead:
      drawn = _whole_row_draw(logits, *per_row)
    else:  # one member of the batch at a time: the work space is the logits' size, not that times the batch
      flat = jax.tree.map(lambda a: a.reshape(-1, *a.shape[len(lead) :]), per_row)
      drawn = lax.map(lambda member: _whole_row_draw(logits, *member), flat).reshape(batch)
    return jnp.where(within, by_candidates, drawn)

  sampled = lax.cond(jnp.any(hot & ~within), *shardings.typed_branches(whole_rows, lambda: by_candidates))
  sampled = jnp.where(decision.values[..., 0] == -np.inf, np.int32(0), sampled)
  return jnp.where(hot, sampled, decision.indices[..., 0])  # greedy: the first entry in the order
