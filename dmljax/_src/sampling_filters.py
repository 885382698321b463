"""The filters' and the draw's array computations (inputs already validated and broadcast to the rows).

Masks are computed from values alone, never differentiated (the callers stop gradients); rows are the
last axis, parameters have the batch shape (the leading axes).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import sampling_mass as mass
from dmljax._src import sampling_noise, sampling_search, selection


def work_dtype(dtype: np.dtype) -> np.dtype:
  """float64 for float64 logits, float32 for every narrower float."""
  return np.dtype(np.float64) if np.dtype(dtype).itemsize == 8 else np.dtype(np.float32)


def drop_nan(x: jax.Array) -> jax.Array:
  return jnp.where(jnp.isnan(x), np.array(-np.inf, x.dtype), x)


def effective_k(k: jax.Array, length: int) -> jax.Array:
  """k, with k <= 0 and k >= length (every entry) both ``length``."""
  return jnp.where((k <= 0) | (k >= length), np.int32(length), k)


def _count_reaches(k: jax.Array) -> sampling_search.Reaches:
  return lambda mask: jnp.sum(mask, axis=-1, dtype=jnp.int32) >= k


def top_k_keep(clean: jax.Array, k: jax.Array, max_k: int | None) -> jax.Array:
  """Which entries of NaN-free rows ``top_k_mask`` keeps (``k`` already effective: 1 to V)."""
  length = clean.shape[-1]

  def search() -> jax.Array:
    return sampling_search.prefix_mask(sampling_search.unsigned_order_key(clean), _count_reaches(k))

  if max_k is None or max_k >= length:
    return search()
  values, indices = selection.top_k_last_axis(clean, max_k, True)
  last = jnp.clip(k - 1, 0, max_k - 1)[..., None]
  value = jnp.take_along_axis(values, last, axis=-1)
  index = jnp.take_along_axis(indices, last, axis=-1)
  position = lax.broadcasted_iota(jnp.int32, clean.shape, clean.ndim - 1)
  by_candidates = (clean > value) | ((clean == value) & (position <= index))
  fits = k <= max_k
  return lax.cond(jnp.all(fits), lambda: by_candidates, lambda: jnp.where(fits[..., None], by_candidates, search()))


def top_p_keep(clean: jax.Array, p: jax.Array) -> jax.Array:
  """Which entries of NaN-free rows ``top_p_mask`` keeps (``p``: float32, NaN already 1)."""
  length = clean.shape[-1]
  bits = mass.limb_bits(length)
  count = mass.limb_count(length, bits)
  limbs = mass.split(mass.weights(clean.astype(work_dtype(clean.dtype))), bits)
  total = mass.normalize(tuple(jnp.sum(limb, axis=-1, dtype=jnp.int32) for limb in limbs), bits, count)
  tau = mass.target(total, jnp.clip(p, np.float32(0), np.float32(1)), bits, count)

  def reaches(mask: jax.Array) -> jax.Array:
    return mass.at_least(mass.normalize(mass.masked_sums(limbs, mask), bits, count), tau)

  kept = sampling_search.prefix_mask(sampling_search.unsigned_order_key(clean), reaches)
  return kept | (p >= 1)[..., None]


def relative_weights(work: jax.Array) -> jax.Array:
  """exp(x - max) per entry, 1 where x equals the row's largest entry."""
  top = jnp.max(work, axis=-1, keepdims=True)
  return jnp.where(work == top, np.array(1, work.dtype), jnp.exp(work - top))


def min_p_keep(clean: jax.Array, min_p: jax.Array) -> jax.Array:
  """Which entries of NaN-free rows ``min_p_mask`` keeps (``min_p``: float32, NaN already 0)."""
  work = clean.astype(work_dtype(clean.dtype))
  bound = jnp.minimum(min_p, np.float32(1)).astype(work.dtype)[..., None]
  return relative_weights(work) >= bound


def _first_of_ties(perturbed: jax.Array, indices: jax.Array, length: int) -> jax.Array:
  """The lowest index among the entries holding the row's largest value."""
  top = jnp.max(perturbed, axis=-1, keepdims=True)
  return jnp.min(jnp.where(perturbed == top, indices, np.int32(length)), axis=-1)


def draw_full(key: jax.Array, filtered: jax.Array) -> jax.Array:
  """Gumbel-max over whole rows of filtered work-type logits (-inf: dropped)."""
  index = lax.broadcasted_iota(jnp.int32, filtered.shape, filtered.ndim - 1)
  perturbed = filtered + sampling_noise.gumbel_at(key, index).astype(filtered.dtype)
  return jnp.argmax(perturbed, axis=-1).astype(jnp.int32)


def draw_candidates(
  key: jax.Array,
  clean: jax.Array,
  k: jax.Array,
  p: jax.Array | None,
  min_p: jax.Array | None,
  max_k: int,
) -> tuple[jax.Array, jax.Array]:
  """The draw when every row's ``k`` is at most ``max_k``: filters and noise over ``max_k`` candidates only.

  Returns the sampled and the greedy tokens. The candidates are the row's first ``max_k`` in the
  order, so the first ``k`` of them are top-k's entries, top-p's prefix is a prefix of them (its
  exact units are running sums along the candidates), and the noise at their indices is the noise
  the whole-row draw would add there.
  """
  length = clean.shape[-1]
  values, indices = selection.top_k_last_axis(clean, max_k, True)
  keep = lax.broadcasted_iota(jnp.int32, values.shape, values.ndim - 1) < k[..., None]
  work = jnp.where(keep, values, np.array(-np.inf, values.dtype))
  if p is not None:
    bits = mass.limb_bits(length)
    count = mass.limb_count(length, bits)
    limbs = mass.split(mass.weights(work), bits)
    total = mass.normalize(tuple(jnp.sum(limb, axis=-1, dtype=jnp.int32) for limb in limbs), bits, count)
    tau = mass.target(total, jnp.clip(p, np.float32(0), np.float32(1)), bits, count)
    before = mass.prefix_units(limbs, bits, count)
    short = ~mass.at_least(tuple(b for b in before), tuple(t[..., None] for t in tau))
    keep = keep & (short | (p >= 1)[..., None])
    work = jnp.where(keep, work, np.array(-np.inf, work.dtype))
  if min_p is not None:
    keep = keep & (relative_weights(work) >= jnp.minimum(min_p, np.float32(1)).astype(work.dtype)[..., None])
    work = jnp.where(keep, work, np.array(-np.inf, work.dtype))
  perturbed = work + sampling_noise.gumbel_at(key, indices).astype(work.dtype)
  return _first_of_ties(perturbed, indices, length), indices[..., 0]
