r"""The draw: an exponential race over what the filters kept, on the candidates or on whole rows; the greedy token.

With relative logits :math:`z_i = (x_i - m) / T` (0 at the row's largest entries, so +inf logits share the draw
equally and a temperature tending to 0 sends every other entry to -inf rather than overflowing) and weights
:math:`w_i = e^{z_i}`, the token is :math:`\arg\max_i w_i / E_i` over the kept entries, the lowest index among
equal maxima, with :math:`E_i` the exponential noise of :mod:`.noise` at (key, row, i): a draw from the softmax of
the kept :math:`z` (it is Gumbel-max, :math:`\arg\max_i (z_i + g_i)` with :math:`g_i = -\log E_i`, without a
second logarithm per entry: a tenth of the time on CPU). The noise depends on the entry's index alone, so the
candidates' draw and the whole row's draw pick the same token.

Rows whose logits are all NaN or -inf draw index 0; temperature 0 (or a traced negative or NaN one) takes the
row's first entry in the order, NaN dropped (greedy).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src.sampling import filters, noise


def _first_of_maxima(perturbed: jax.Array, indices: jax.Array, length: int) -> jax.Array:
  top = jnp.max(perturbed, axis=-1, keepdims=True)
  return jnp.min(jnp.where(perturbed == top, indices, np.int32(length)), axis=-1)


def _perturbed(w: jax.Array, keep: jax.Array, stream: tuple[jax.Array, jax.Array], indices: jax.Array) -> jax.Array:
  """The race's scores: ``w / E`` where kept, -1 elsewhere (below every kept score)."""
  score = w / noise.exponential_at(stream, indices).astype(w.dtype)
  return jnp.where(keep, score, np.array(-1, w.dtype))


def draw_rows(
  words: jax.Array,
  rows: jax.Array,
  logits: jax.Array,
  temperature: jax.Array,
  k: jax.Array | None,
  p: jax.Array | None,
  bound: jax.Array | None,
  *,
  count: int,
) -> jax.Array:
  """One token per row (row-wise: ``words`` (..., W) the row's key data, ``rows`` (...) the row's number)."""
  length = logits.shape[-1]
  work = filters.work_dtype(logits.dtype)
  hot = temperature > 0
  divisor = jnp.where(hot, temperature, np.float32(1)).astype(work)[..., None]
  data, chosen = filters.Candidates.of(logits, 1 if k is None and p is None and bound is None else count, divisor)
  stream = noise.streams(words, rows)
  chain = filters.Chain(k, p, bound)

  def whole_rows() -> jax.Array:
    keep = (lambda: jnp.ones(logits.shape, jnp.bool_)) if chain.empty else filters.chain_on_rows(data, chain)
    index = lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
    return jnp.argmax(_perturbed(data.weights(), keep(), stream, index), axis=-1).astype(jnp.int32)

  if chain.empty:
    sampled = whole_rows()
  else:
    keep, within = filters.chain_on_candidates(data, chosen, chain)
    by_candidates = _first_of_maxima(_perturbed(chosen.weights, keep, stream, chosen.indices), chosen.indices, length)

    def fallback() -> jax.Array:
      return jnp.where(within, by_candidates, whole_rows())

    sampled = lax.cond(jnp.all(within), lambda: by_candidates, fallback)
  greedy = chosen.indices[..., 0]
  sampled = jnp.where(data.top[..., 0] == -np.inf, np.int32(0), sampled)  # all NaN or -inf: index 0
  return jnp.where(hot, sampled, greedy)
