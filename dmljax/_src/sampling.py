r"""Sampling filters for decoding and routing: top-k, top-p (nucleus) and min-p masks, and :func:`sample`.

Each filter works on the last axis of ``logits`` and returns the logits with the entries it drops set
to ``-inf``, same shape and dtype, so filters compose and feed ``jax.random.categorical``. Their order
is :func:`dmljax.top_k`'s: larger logits first, equal logits (``-0.0`` and ``+0.0`` too) by ascending
index. A NaN logit is dropped by every filter (it becomes ``-inf``).

No filter sorts the vocabulary: each finds its boundary entry by a bit-by-bit search over the
entries' order keys (one pass and one per-row reduction per bit), so on a vocabulary split across
devices only per-row numbers cross between them. Top-p sums probabilities exactly, in integers,
so the boundary does not depend on how the row is split or summed.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from dmljax._src import dtypes, exact_sum, prefix_search, rank_keys
from dmljax._src.errors import Problems

_TINY32 = np.float32(np.finfo(np.float32).tiny)


def _has_negative_infinity(dtype: np.dtype) -> bool:
  with np.errstate(all="ignore"):
    return bool(np.isneginf(np.array(-np.inf).astype(dtype)))


def _logits(p: Problems, logits: Any, *, exact_sums: bool = False) -> jax.Array | None:
  """The logits array: floating with ``-inf``, at least one axis, a non-empty last axis."""
  x = dtypes.as_array(p, "logits", logits)
  if x is None:
    return None
  dtype = np.dtype(x.dtype)
  ok = p.require(
    dtypes.is_float(dtype) and _has_negative_infinity(dtype),
    "logits must have a floating dtype that has -inf (dropped entries are set to -inf)",
    f"logits.dtype={dtype.name}",
  )
  ok &= p.require(x.ndim >= 1, "logits must have at least one axis (the last is the vocabulary)", "logits.shape=()")
  if ok:
    ok &= p.require(x.shape[-1] >= 1, "logits' last axis (the vocabulary) must not be empty", f"logits.shape={x.shape}")
  if ok and exact_sums:
    ok &= p.require(
      x.shape[-1] <= exact_sum.MAX_TERMS,
      f"logits' last axis must have at most {exact_sum.MAX_TERMS} entries (the limit of the exact probability sums)",
      f"logits.shape={x.shape}",
    )
  return x if ok else None


def _per_row(p: Problems, field: str, value: Any, batch: tuple[int, ...] | None, *, integer: bool) -> jax.Array | None:
  """A scalar or an array broadcastable to the batch shape: integers (``integer``) or real numbers."""
  if isinstance(value, bool) or (integer and isinstance(value, float)):
    kind = "an integer" if integer else "a real number"
    p.add(f"{field} must be {kind} or an array of them", f"{field}={value!r}")
    return None
  if integer and isinstance(value, int):
    value = int(np.clip(value, np.iinfo(np.int32).min, np.iinfo(np.int32).max))
  array = dtypes.as_array(p, field, value)
  if array is None:
    return None
  dtype = np.dtype(array.dtype)
  ok = p.require(
    dtypes.is_integer(dtype) if integer else (dtypes.is_float(dtype) or dtypes.is_integer(dtype)),
    f"{field} must have an integer dtype" if integer else f"{field} must have a real (floating or integer) dtype",
    f"{field}.dtype={dtype.name}",
  )
  if batch is not None:
    try:
      fits = np.broadcast_shapes(array.shape, batch) == batch
    except ValueError:
      fits = False
    ok &= p.require(
      fits,
      f"{field} must be a scalar or broadcastable to the logits' batch shape {batch}",
      f"{field}.shape={array.shape}",
    )
  if ok and not integer and not isinstance(array, jax.core.Tracer):
    ok &= p.require(not bool(jnp.any(jnp.isnan(array))), f"{field} must not be NaN", f"{field}={value!r}")
  return array if ok else None


def _broadcast(p: jax.Array, batch: tuple[int, ...], dtype: Any) -> jax.Array:
  return jnp.broadcast_to(p.astype(dtype), batch)


def _drop_nan(x: jax.Array) -> jax.Array:
  return jnp.where(jnp.isnan(x), jnp.array(-np.inf, x.dtype), x)


def _dropped(z: jax.Array, keep: jax.Array) -> jax.Array:
  return jnp.where(keep, z, jnp.array(-np.inf, z.dtype))


def _exps(z: jax.Array) -> jax.Array:
  """float32 ``exp(logit - max)``, the row's largest entries exactly 1 (also where the max is infinite).

  Values below float32's smallest normal are zero, whatever the platform's subnormal handling.
  """
  work = np.float64 if z.dtype == np.float64 else np.float32
  w = z.astype(work)
  top = jnp.max(w, axis=-1, keepdims=True)
  e = jnp.exp((w - top).astype(np.float32))
  e = jnp.where(w == top, np.float32(1), e)
  return jnp.where(e < _TINY32, np.float32(0), e)


def _top_k(z: jax.Array, k: jax.Array) -> jax.Array:
  """:func:`top_k_mask` on NaN-free logits, ``k`` an integer array of the batch shape."""
  n = z.shape[-1]
  disabled = k <= 0
  if n <= np.iinfo(k.dtype).max:
    disabled = disabled | (k >= np.array(n, k.dtype))
  count = jnp.where(disabled, np.int32(n), k.astype(np.int32))

  def reaches(prefix: jax.Array) -> jax.Array:
    return jnp.sum(prefix, axis=-1, dtype=np.int32) >= count

  return _dropped(z, prefix_search.shortest_prefix(rank_keys.ascending_key(z), reaches))


def _top_p(z: jax.Array, p: jax.Array) -> jax.Array:
  """:func:`top_p_mask` on NaN-free logits, ``p`` float32 of the batch shape."""
  layout = exact_sum.layout(z.shape[-1])
  terms = exact_sum.limb_terms(_exps(z), layout)
  total = exact_sum.masked_sum(terms, jnp.ones(z.shape, bool), layout)
  everything = (p >= 1) | jnp.isnan(p)
  target = exact_sum.scaled_ceil(total, jnp.where(everything | (p < 0), np.float32(0), p), layout)
  # At least one unit: the first entry (probability 1 / total, never zero) always belongs.
  target = target.at[..., 0].max(jnp.where(jnp.any(target != 0, axis=-1), np.int32(0), np.int32(1)))

  def reaches(prefix: jax.Array) -> jax.Array:
    return exact_sum.greater_equal(exact_sum.masked_sum(terms, prefix, layout), target)

  keep = prefix_search.shortest_prefix(rank_keys.ascending_key(z), reaches)
  keep = keep | (everything[..., None] & (z > jnp.array(-np.inf, z.dtype)))
  return _dropped(z, keep)


def _min_p(z: jax.Array, min_p: jax.Array) -> jax.Array:
  """:func:`min_p_mask` on NaN-free logits, ``min_p`` float32 of the batch shape."""
  floor = jnp.where(jnp.isnan(min_p) | (jnp.abs(min_p) < _TINY32), np.float32(0), jnp.minimum(min_p, np.float32(1)))
  return _dropped(z, _exps(z) >= floor[..., None])


def _first(z: jax.Array) -> jax.Array:
  """The first entry of every row in the order (NaN-free logits): the lowest index of the largest key, int32."""
  key = rank_keys.ascending_key(z)
  peak = jnp.max(key, axis=-1, keepdims=True)
  index = jax.lax.broadcasted_iota(np.dtype(np.int32), key.shape, key.ndim - 1)
  return jnp.min(jnp.where(key == peak, index, np.int32(z.shape[-1])), axis=-1)


def top_k_mask(logits: ArrayLike, k: ArrayLike) -> jax.Array:
  r"""Keeps the ``k`` largest logits of every row (last axis) and sets the others to ``-inf``.

  Exactly :math:`\min(k, V)` entries are kept, ``V`` the vocabulary size: the first ones in
  :func:`dmljax.top_k`'s order (larger first; among equal logits at the boundary, the lower
  indices). ``k <= 0`` disables the filter (every entry is kept), as in common serving stacks.
  NaN logits are dropped (set to ``-inf``); kept entries keep their bits. No sort: a search over
  the entries' order keys, one reduction per key bit and per index bit.

  Args:
    logits: floating array ``(..., V)``, with ``-inf`` in its type.
    k: a Python int or an integer array broadcastable to the batch shape ``logits.shape[:-1]``;
      it may be traced, so one compiled program serves every value.

  Returns:
    The logits, same shape and dtype, with the dropped entries ``-inf``.

  Raises:
    DescriptorError: for logits that are not floating, have no axis or an empty last axis, or a
      ``k`` that is not integer or does not broadcast to the batch shape.

  Example:
    >>> import dmljax.sampling as ds, jax.numpy as jnp
    >>> ds.top_k_mask(jnp.array([[1., 3., 3., 2.], [0., 1., 2., 3.]]), jnp.array([2, 3])).tolist()
    [[-inf, 3.0, 3.0, -inf], [-inf, 1.0, 2.0, 3.0]]
  """
  p = Problems("top_k_mask")
  x = _logits(p, logits)
  count = _per_row(p, "k", k, None if x is None else x.shape[:-1], integer=True)
  p.raise_if_any()
  assert x is not None and count is not None
  return _top_k(_drop_nan(x), jnp.broadcast_to(count, x.shape[:-1]))


def top_p_mask(logits: ArrayLike, p: ArrayLike) -> jax.Array:
  r"""Keeps the shortest prefix of every row whose probability reaches ``p`` (nucleus filtering).

  Probabilities are the softmax of the logits in float32: :math:`e_i = \exp(x_i - \max x)` rounded
  to float32 (values below the smallest normal float32 count as 0), over their sum. In
  :func:`dmljax.top_k`'s order (larger first, ties by lower index) the filter keeps the shortest
  prefix with :math:`\sum_{\mathrm{prefix}} e_i \ge p \sum_i e_i`, at least one entry. The sums and
  the comparison are exact (integer arithmetic on the float32 :math:`e_i`), so the boundary does not
  depend on summation order, platform reductions or how the vocabulary is split across devices.
  ``p >= 1`` (or NaN, when traced) keeps every entry that is not ``-inf``; ``p <= 0`` keeps the first
  entry only. ``p`` is rounded to float32. NaN logits are dropped (set to ``-inf``).

  Args:
    logits: floating array ``(..., V)``, with ``-inf`` in its type, ``V <= 2**25 - 1``.
    p: a float or a real array broadcastable to the batch shape; it may be traced.

  Returns:
    The logits, same shape and dtype, with the dropped entries ``-inf``.

  Raises:
    DescriptorError: for bad logits (as :func:`top_k_mask`, or a last axis over ``2**25 - 1``), or a
      ``p`` that is not real, is NaN or does not broadcast to the batch shape.

  Example:
    >>> import dmljax.sampling as ds, jax.numpy as jnp, numpy as np
    >>> logits = jnp.log(jnp.array([0.1, 0.5, 0.15, 0.25]))
    >>> np.isfinite(ds.top_p_mask(logits, 0.7)).tolist()
    [False, True, False, True]
  """
  problems = Problems("top_p_mask")
  x = _logits(problems, logits, exact_sums=True)
  mass = _per_row(problems, "p", p, None if x is None else x.shape[:-1], integer=False)
  problems.raise_if_any()
  assert x is not None and mass is not None
  return _top_p(_drop_nan(x), _broadcast(mass, x.shape[:-1], np.float32))


def min_p_mask(logits: ArrayLike, min_p: ArrayLike) -> jax.Array:
  r"""Keeps the entries whose probability is at least ``min_p`` times the row's largest probability.

  With :math:`e_i = \exp(x_i - \max x)` in float32 (as :func:`top_p_mask`), that is the entries
  with :math:`e_i \ge \mathrm{min\_p}`. The row's largest entries (:math:`e_i = 1`) are always kept:
  ``min_p`` above 1 counts as 1; ``min_p <= 0`` (or NaN, when traced) keeps every entry. ``min_p``
  is rounded to float32. NaN logits are dropped (set to ``-inf``).

  Args:
    logits: floating array ``(..., V)``, with ``-inf`` in its type.
    min_p: a float or a real array broadcastable to the batch shape; it may be traced.

  Returns:
    The logits, same shape and dtype, with the dropped entries ``-inf``.

  Raises:
    DescriptorError: for bad logits (as :func:`top_k_mask`), or a ``min_p`` that is not real, is NaN
      or does not broadcast to the batch shape.

  Example:
    >>> import dmljax.sampling as ds, jax.numpy as jnp
    >>> ds.min_p_mask(jnp.log(jnp.array([0.5, 0.3, 0.05, 0.15])), 0.2).tolist()[1] > -1e9
    True
  """
  p = Problems("min_p_mask")
  x = _logits(p, logits)
  floor = _per_row(p, "min_p", min_p, None if x is None else x.shape[:-1], integer=False)
  p.raise_if_any()
  assert x is not None and floor is not None
  return _min_p(_drop_nan(x), _broadcast(floor, x.shape[:-1], np.float32))


def _check_key(p: Problems, key: Any) -> None:
  dtype = getattr(key, "dtype", None)
  shape = getattr(key, "shape", None)
  typed = dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)
  ok = (typed and shape == ()) or (not typed and dtype == np.uint32 and shape == (2,))
  p.require(
    ok,
    "key must be one PRNG key: jax.random.key(seed) (shape ()) or jax.random.PRNGKey(seed) (uint32, shape (2,))",
    f"key of dtype {dtype} and shape {shape}",
  )


def sample(
  key: ArrayLike,
  logits: ArrayLike,
  *,
  temperature: ArrayLike = 1.0,
  top_k: ArrayLike | None = None,
  top_p: ArrayLike | None = None,
  min_p: ArrayLike | None = None,
) -> jax.Array:
  r"""Draws one index per row (last axis) after temperature and the top-k, top-p and min-p filters.

  The logits (in float32, float64 for float64 logits) are divided by ``temperature``, then
  :func:`top_k_mask`, :func:`top_p_mask` and :func:`min_p_mask` apply in that order (``None``: not
  applied), then ``jax.random.categorical`` draws. ``temperature == 0`` is greedy: the row's first
  entry in :func:`dmljax.top_k`'s order (the lowest index of the largest logit). Anything traced that
  is not positive (a negative or NaN temperature) is greedy too. NaN logits are dropped; a row whose
  logits are all NaN or ``-inf`` gives index 0. The same key and inputs give the same indices,
  whether the vocabulary is split across devices or not.

  Args:
    key: one PRNG key (``jax.random.key(seed)`` or ``jax.random.PRNGKey(seed)``).
    logits: floating array ``(..., V)``, with ``-inf`` in its type.
    temperature: a non-negative float, or a real array broadcastable to the batch shape.
    top_k: as :func:`top_k_mask`'s ``k``, or ``None``.
    top_p: as :func:`top_p_mask`'s ``p``, or ``None``.
    min_p: as :func:`min_p_mask`'s ``min_p``, or ``None``.

  Returns:
    int32 indices, shape ``logits.shape[:-1]``.

  Raises:
    DescriptorError: for a bad key, bad logits or a bad option (a concrete negative ``temperature``
      included), all listed at once.

  Example:
    >>> import dmljax.sampling as ds, jax, jax.numpy as jnp
    >>> logits = jnp.array([[0., 5., 5., 1.], [2., 0., 0., 0.]])
    >>> ds.sample(jax.random.key(0), logits, temperature=0.0).tolist()
    [1, 0]
    >>> int(ds.sample(jax.random.key(0), logits[0], top_k=1))
    1
  """
  p = Problems("sample")
  _check_key(p, key)
  x = _logits(p, logits, exact_sums=top_p is not None)
  batch = None if x is None else x.shape[:-1]
  heat = _per_row(p, "temperature", temperature, batch, integer=False)
  if heat is not None and not isinstance(heat, jax.core.Tracer):
    p.require(not bool(jnp.any(heat < 0)), "temperature must be >= 0", f"temperature={temperature!r}")
  count = None if top_k is None else _per_row(p, "top_k", top_k, batch, integer=True)
  mass = None if top_p is None else _per_row(p, "top_p", top_p, batch, integer=False)
  floor = None if min_p is None else _per_row(p, "min_p", min_p, batch, integer=False)
  p.raise_if_any()
  assert x is not None and batch is not None and heat is not None
  z = _drop_nan(x)
  work = np.float64 if z.dtype == np.float64 else np.float32
  t = _broadcast(heat, batch, work)
  hot = t > 0
  scaled = z.astype(work) / jnp.where(hot, t, jnp.array(1, work))[..., None]
  if count is not None:
    scaled = _top_k(scaled, jnp.broadcast_to(count, batch))
  if mass is not None:
    scaled = _top_p(scaled, _broadcast(mass, batch, np.float32))
  if floor is not None:
    scaled = _min_p(scaled, _broadcast(floor, batch, np.float32))
  drawn = jax.random.categorical(key, scaled, axis=-1).astype(np.int32)
  return jnp.where(hot, drawn, _first(z))
