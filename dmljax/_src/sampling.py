r"""Token sampling: exact top-k, top-p and min-p filters with runtime parameters, and the draw.

Each filter works along the last axis of ``logits`` (any number of leading axes: the *rows*) and
returns the logits with the dropped entries set to -inf, same shape and dtype, so filters compose
and feed ``jax.random.categorical``. The order is dmljax's: descending value, ties by ascending
index; -0.0 equals +0.0. NaN logits are never kept (they come back as -inf) and never drawn.

Parameters (``k``, ``p``, ``min_p``, ``temperature``) are data, not static arguments: a Python
number or an array with one value per row (any shape that broadcasts to ``logits.shape[:-1]``),
traced or not; one compiled program serves every value. No filter sorts a row: see the sampling
page of the docs for the threshold search they run and why it is exact on sharded rows too.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from dmljax._src import dtypes, sampling_filters
from dmljax._src.errors import Problems

_BATCH = "logits.shape[:-1]"


def _logits(p: Problems, logits: Any) -> jax.Array | None:
  array = dtypes.as_array(p, "logits", logits)
  if array is None:
    return None
  ok = p.require(
    dtypes.is_float(array.dtype),
    "logits must be a floating-point array (float16, bfloat16, float32 or float64)",
    f"logits.dtype={dtypes.dtype_name(array.dtype)}",
  )
  ok &= p.require(
    array.ndim >= 1, "logits must have rank >= 1 (the last axis is the vocabulary)", f"logits.shape={array.shape}"
  )
  ok &= p.require(
    array.ndim == 0 or array.shape[-1] >= 1, "logits' last axis must not be empty", f"logits.shape={array.shape}"
  )
  return array if ok else None


def _row_parameter(p: Problems, field: str, value: Any, batch: tuple[int, ...] | None, integer: bool) -> Any:
  """``value`` as an int32 (``integer``) or float32 array of the batch shape, or ``None`` after recording why not."""
  kind = (
    "an integer (a Python int or an integer array)" if integer else "a real number (a Python float or a float array)"
  )
  if isinstance(value, (bool, np.bool_)):
    p.add(f"{field} must be {kind}", f"{field}={value!r}")
    return None
  dtype = getattr(value, "dtype", None)
  if dtype is None:
    if integer and not isinstance(value, (int, np.integer)):
      p.add(f"{field} must be {kind}, not a float", f"{field}={value!r}")
      return None
    if not integer and not isinstance(value, (int, float, np.integer, np.floating)):
      p.add(f"{field} must be {kind}", f"{field} of type {type(value).__name__}")
      return None
    shape: tuple[int, ...] = ()
  else:
    good = dtypes.is_integer(dtype) if integer else dtypes.is_float(dtype)
    if not p.require(good, f"{field} must be {kind}", f"{field}.dtype={dtypes.dtype_name(dtype)}"):
      return None
    shape = tuple(np.shape(value))
  if batch is None:
    return None
  try:
    fits = np.broadcast_shapes(shape, batch) == batch
  except ValueError:
    fits = False
  if not p.require(
    fits,
    f"{field} must be a scalar or an array that broadcasts to the batch shape {_BATCH} (= {batch})",
    f"{field}.shape={shape}",
  ):
    return None
  return jnp.broadcast_to(jnp.asarray(value, jnp.int32 if integer else jnp.float32), batch)


def _concrete(value: Any) -> np.ndarray | None:
  if isinstance(value, jax.core.Tracer):
    return None
  try:
    return np.asarray(value, np.float64)
  except (TypeError, ValueError):
    return None


def _prng_key(p: Problems, key: Any) -> jax.Array | None:
  dtype = getattr(key, "dtype", None)
  if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
    if p.require(
      np.shape(key) == (),
      "key must be one PRNG key (for a batch of keys, jax.vmap over sample)",
      f"key.shape={np.shape(key)}",
    ):
      return jnp.asarray(key)
    return None
  if dtype is not None and np.dtype(dtype) == np.uint32 and np.shape(key) == (2,):
    return jax.random.wrap_key_data(jnp.asarray(key))  # a raw key of jax.random.PRNGKey
  if dtype is None:
    p.add("key must be a PRNG key, as jax.random.key(seed) makes", f"key={type(key).__name__}")
  else:
    p.add(
      "key must be a PRNG key, as jax.random.key(seed) makes",
      f"key.dtype={dtypes.dtype_name(dtype)} (shape {np.shape(key)})",
    )
  return None


def _batch(array: jax.Array | None) -> tuple[int, ...] | None:
  return None if array is None else tuple(array.shape[:-1])


def _masked(logits: jax.Array, keep: jax.Array) -> jax.Array:
  return jnp.where(keep & ~jnp.isnan(logits), logits, np.array(-np.inf, logits.dtype))


@functools.partial(jax.jit, static_argnames=("max_k",))
def _top_k_mask(logits: jax.Array, k: jax.Array, max_k: int | None) -> jax.Array:
  clean = sampling_filters.drop_nan(jax.lax.stop_gradient(logits))
  k = sampling_filters.effective_k(k, logits.shape[-1])
  return _masked(logits, sampling_filters.top_k_keep(clean, k, max_k))


@jax.jit
def _top_p_mask(logits: jax.Array, p: jax.Array) -> jax.Array:
  clean = sampling_filters.drop_nan(jax.lax.stop_gradient(logits))
  return _masked(logits, sampling_filters.top_p_keep(clean, jnp.where(jnp.isnan(p), np.float32(1), p)))


@jax.jit
def _min_p_mask(logits: jax.Array, min_p: jax.Array) -> jax.Array:
  clean = sampling_filters.drop_nan(jax.lax.stop_gradient(logits))
  return _masked(logits, sampling_filters.min_p_keep(clean, jnp.where(jnp.isnan(min_p), np.float32(0), min_p)))


def _max_k(p: Problems, max_k: Any) -> int | None:
  if max_k is None:
    return None
  ok = isinstance(max_k, (int, np.integer)) and not isinstance(max_k, (bool, np.bool_)) and max_k >= 1
  p.require(ok, "max_k must be None or a static Python int >= 1 (a bound on the k values passed)", f"max_k={max_k!r}")
  return int(max_k) if ok else None


def top_k_mask(logits: ArrayLike, k: ArrayLike, *, max_k: int | None = None) -> jax.Array:
  r"""The logits with every entry outside each row's first ``k`` set to -inf.

  For every row :math:`x` (the last axis), keeps the :math:`\min(k, V)` entries that come first in
  dmljax's order (descending value; among equal values, -0.0 and +0.0 included, the lower index
  first) and sets the others to -inf. Exactly that many are kept, ties at the boundary included.
  NaN entries are never kept (they come back as -inf). ``k <= 0`` or ``k >= V`` keeps every
  non-NaN entry (the filter is off).

  ``k`` is data: a Python int or an integer array (one per row), traced or not, and one compiled
  program serves every value. Without ``max_k`` the kept set is found by a threshold search over
  the order key (32 passes of one fused count per row for float32 and narrower logits, and up to
  log2(V) more where the threshold value is tied; no sort). With a static bound ``max_k``, the
  row's first ``max_k`` entries are selected once (:func:`dmljax.top_k`) and the first ``k`` of
  them are kept; a row whose ``k`` exceeds ``max_k`` at run time still gets the exact answer, by
  the threshold search.

  Args:
    logits: floating-point array, rank >= 1; the last axis is the vocabulary.
    k: the number of entries to keep: a Python int or an integer array broadcastable to
      ``logits.shape[:-1]``.
    max_k: optional static Python int, an upper bound on the ``k`` values usually passed.

  Returns:
    An array of ``logits``' shape and dtype: kept entries unchanged (bit for bit), the others -inf.

  Raises:
    DescriptorError: for non-float or rank-0 logits, a float or wrongly shaped ``k``, or a bad ``max_k``.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> dml.sampling.top_k_mask(jnp.array([1., 3., 3., 2.]), 2).tolist()
    [-inf, 3.0, 3.0, -inf]
  """
  p = Problems("top_k_mask")
  array = _logits(p, logits)
  kk = _row_parameter(p, "k", k, _batch(array), integer=True)
  bound = _max_k(p, max_k)
  p.raise_if_any()
  assert array is not None
  return _top_k_mask(array, kk, bound)


def top_p_mask(logits: ArrayLike, p: ArrayLike) -> jax.Array:
  r"""The logits with every entry outside each row's nucleus (the shortest prefix reaching ``p``) set to -inf.

  The row's probabilities are its softmax, computed in float32 (float64 for float64 logits).
  Walking the row in dmljax's order (descending value, ties by ascending index), the filter keeps
  the shortest prefix whose probability sum is at least ``p``, and always at least one entry.

  The sum is exact and independent of any summation order (so a row split over devices gives the
  same answer): the weight :math:`w_i = e^{x_i - \max x}` of each entry is computed in float32 and
  counted in units of :math:`2^{-24}` (rounded to nearest); a prefix of :math:`K` units out of the
  row's :math:`T` reaches ``p`` when :math:`K \cdot 2^{24} \ge \lceil p \cdot 2^{24} \rceil \cdot T`
  (``p`` rounded to float32 first), compared in exact integer arithmetic. A row whose largest logit
  is +inf gives all its probability to its +inf entries, equally.

  Out-of-range values are rules, not errors: ``p >= 1`` (or NaN) keeps every non-NaN entry, ``p <= 0``
  keeps the first entry only. NaN entries are never kept.

  Args:
    logits: floating-point array, rank >= 1; the last axis is the vocabulary.
    p: the probability to reach: a Python float or a float array broadcastable to ``logits.shape[:-1]``.

  Returns:
    An array of ``logits``' shape and dtype: kept entries unchanged (bit for bit), the others -inf.

  Raises:
    DescriptorError: for non-float or rank-0 logits, or a non-float or wrongly shaped ``p``.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> logits = jnp.log(jnp.array([0.1, 0.5, 0.3, 0.1]))
    >>> jnp.isfinite(dml.sampling.top_p_mask(logits, 0.7)).tolist()
    [False, True, True, False]
  """
  problems = Problems("top_p_mask")
  array = _logits(problems, logits)
  pp = _row_parameter(problems, "p", p, _batch(array), integer=False)
  problems.raise_if_any()
  assert array is not None
  return _top_p_mask(array, pp)


def min_p_mask(logits: ArrayLike, min_p: ArrayLike) -> jax.Array:
  r"""The logits with every entry less likely than ``min_p`` times the row's likeliest set to -inf.

  Keeps the entries whose relative weight :math:`e^{x_i - \max x}` (float32; float64 for float64
  logits) is at least ``min_p``: the entries whose probability is at least ``min_p`` times the
  row's largest. The row's largest entries are always kept (``min_p`` above 1 counts as 1);
  ``min_p <= 0`` (or NaN) keeps every non-NaN entry. NaN entries are never kept.

  Args:
    logits: floating-point array, rank >= 1; the last axis is the vocabulary.
    min_p: a Python float or a float array broadcastable to ``logits.shape[:-1]``.

  Returns:
    An array of ``logits``' shape and dtype: kept entries unchanged (bit for bit), the others -inf.

  Raises:
    DescriptorError: for non-float or rank-0 logits, or a non-float or wrongly shaped ``min_p``.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> logits = jnp.log(jnp.array([0.05, 0.5, 0.3, 0.15]))
    >>> jnp.isfinite(dml.sampling.min_p_mask(logits, 0.5)).tolist()
    [False, True, True, False]
  """
  problems = Problems("min_p_mask")
  array = _logits(problems, logits)
  mp = _row_parameter(problems, "min_p", min_p, _batch(array), integer=False)
  problems.raise_if_any()
  assert array is not None
  return _min_p_mask(array, mp)


@functools.partial(jax.jit, static_argnames=("max_k",))
def _sample(
  key: jax.Array,
  logits: jax.Array,
  temperature: jax.Array,
  k: jax.Array | None,
  p: jax.Array | None,
  min_p: jax.Array | None,
  max_k: int | None,
) -> jax.Array:
  length = logits.shape[-1]
  work = sampling_filters.work_dtype(logits.dtype)
  hot = temperature > 0  # NaN and negative (traced) temperatures are greedy
  divisor = jnp.where(hot, temperature, np.float32(1)).astype(work)[..., None]
  clean = sampling_filters.drop_nan(jax.lax.stop_gradient(logits).astype(work) / divisor)
  if p is not None:
    p = jnp.where(jnp.isnan(p), np.float32(1), p)
  if min_p is not None:
    min_p = jnp.where(jnp.isnan(min_p), np.float32(0), min_p)
  if k is not None:
    k = sampling_filters.effective_k(k, length)
  minus_inf = np.array(-np.inf, work)

  def whole_rows() -> tuple[jax.Array, jax.Array]:
    filtered = clean
    if k is not None:
      filtered = jnp.where(sampling_filters.top_k_keep(filtered, k, None), filtered, minus_inf)
    if p is not None:
      filtered = jnp.where(sampling_filters.top_p_keep(filtered, p), filtered, minus_inf)
    if min_p is not None:
      filtered = jnp.where(sampling_filters.min_p_keep(filtered, min_p), filtered, minus_inf)
    greedy = jnp.argmax(clean, axis=-1).astype(jnp.int32)
    return sampling_filters.draw_full(key, filtered), greedy

  if k is None or max_k is None or max_k >= length:
    sampled, greedy = whole_rows()
  else:
    bound, kk = max_k, k

    def candidates() -> tuple[jax.Array, jax.Array]:
      return sampling_filters.draw_candidates(key, clean, kk, p, min_p, bound)

    sampled, greedy = jax.lax.cond(jnp.all(kk <= bound), candidates, whole_rows)
  return jnp.where(hot, sampled, greedy)


def sample(
  key: ArrayLike,
  logits: ArrayLike,
  *,
  temperature: ArrayLike = 1.0,
  top_k: ArrayLike | None = None,
  top_p: ArrayLike | None = None,
  min_p: ArrayLike | None = None,
  max_k: int | None = None,
) -> jax.Array:
  r"""One token index per row, drawn from the filtered softmax of ``logits / temperature``.

  The logits are divided by ``temperature`` (in float32; float64 for float64 logits), then
  :func:`top_k_mask`, :func:`top_p_mask` and :func:`min_p_mask` apply in that order (``None``: not
  applied), and one index is drawn per row with probability ``softmax`` of what is left: a
  Gumbel-max draw, :math:`\arg\max_i (x_i + g_i)` with the lowest index among equal maxima, where
  the noise :math:`g_i` of each entry is a function of ``key``, the row number and the entry's index
  alone (so the token is the same whether the row is whole, split over devices, or narrowed to
  ``max_k`` candidates). Temperature 0 is greedy: the row's first entry in dmljax's order once NaNs
  are dropped (the largest logit, lowest index among equals); a traced temperature below 0 or NaN
  is greedy too. A row whose logits are all NaN or -inf gives index 0. NaN entries are never drawn.

  Every parameter is data (a Python number, or an array broadcastable to ``logits.shape[:-1]``),
  traced or not: one compiled program serves every value. With ``top_k`` and a static bound
  ``max_k``, the whole step (filters and draw) runs on the ``max_k`` first entries of each row
  (one :func:`dmljax.top_k`), falling back to whole rows, exactly, when some row's ``k`` is larger.

  Args:
    key: one PRNG key (``jax.random.key(seed)``; a raw ``jax.random.PRNGKey`` is accepted). For a
      batch of keys, ``jax.vmap`` over the call.
    logits: floating-point array, rank >= 1; the last axis is the vocabulary.
    temperature: a number >= 0 or a float array broadcastable to ``logits.shape[:-1]``.
    top_k: ``None`` or the ``k`` of :func:`top_k_mask`.
    top_p: ``None`` or the ``p`` of :func:`top_p_mask`.
    min_p: ``None`` or the ``min_p`` of :func:`min_p_mask`.
    max_k: optional static Python int, an upper bound on the ``top_k`` values usually passed.

  Returns:
    int32 array of shape ``logits.shape[:-1]``.

  Raises:
    DescriptorError: for a key that is not one PRNG key, non-float or rank-0 logits, a
      temperature below 0 (given as a concrete value), a float ``top_k``, a non-float ``top_p`` or
      ``min_p``, a parameter that does not broadcast to the rows, or a bad ``max_k``.

  Example:
    >>> import dmljax as dml, jax, jax.numpy as jnp
    >>> logits = jnp.array([[0., 5., 1.], [2., 2., 0.]])
    >>> dml.sampling.sample(jax.random.key(0), logits, temperature=0.0).tolist()
    [1, 0]
    >>> dml.sampling.sample(jax.random.key(0), logits, top_k=1).tolist()
    [1, 0]
  """
  problems = Problems("sample")
  prng = _prng_key(problems, key)
  array = _logits(problems, logits)
  batch = _batch(array)
  t = _row_parameter(problems, "temperature", temperature, batch, integer=False)
  concrete = _concrete(temperature)
  if concrete is not None and concrete.size:
    problems.require(
      bool(np.all(concrete >= 0)),
      "temperature must be >= 0 (0 is greedy)",
      f"temperature={temperature!r}" if concrete.ndim == 0 else f"temperature with minimum {np.min(concrete)!r}",
    )
  kk = None if top_k is None else _row_parameter(problems, "top_k", top_k, batch, integer=True)
  pp = None if top_p is None else _row_parameter(problems, "top_p", top_p, batch, integer=False)
  mp = None if min_p is None else _row_parameter(problems, "min_p", min_p, batch, integer=False)
  bound = _max_k(problems, max_k)
  problems.raise_if_any()
  assert prng is not None and array is not None
  return _sample(prng, array, t, kk, pp, mp, bound)
