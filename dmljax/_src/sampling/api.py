r"""Token sampling: exact top-k, top-p and min-p filters with runtime parameters, and the draw.

Each filter works along the last axis of ``logits`` (any number of leading axes: the *rows*) and
returns the logits with the dropped entries set to -inf, same shape and dtype, so filters compose
and feed ``jax.random.categorical``. The order is dmljax's: descending value, ties by ascending
index; -0.0 equals +0.0. NaN logits are never kept (they come back as -inf) and never drawn.

Parameters (``k``, ``p``, ``min_p``, ``temperature``) are data, not static arguments: a Python
number or an array with one value per row (any shape that broadcasts to ``logits.shape[:-1]``),
traced or not; one compiled program serves every value. No filter sorts a row: each decides on the
row's first candidates (:mod:`.filters`) and searches whole rows only where those cannot decide.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from dmljax._src import rowwise
from dmljax._src.errors import Problems
from dmljax._src.sampling import draw, filters, noise, params, rows


def _masked(logits: jax.Array, keep: jax.Array) -> jax.Array:
  return jnp.where(keep & ~jnp.isnan(logits), logits, np.array(-np.inf, logits.dtype))


def _values(logits: jax.Array) -> jax.Array:
  return jax.lax.stop_gradient(logits)


def _count(max_k: int | None) -> int:
  return filters.CANDIDATES if max_k is None else max_k


def _keep(
  logits: jax.Array, k: jax.Array | None, p: jax.Array | None, bound: jax.Array | None, *, count: int
) -> jax.Array:
  """Which entries a mask keeps: the one decision (:func:`.filters.decide`) for every row, then its whole rows."""
  decision = filters.decide(logits, filters.Filters(k, p, bound), count=count)
  return filters.kept(logits, decision, bound, None)


@functools.partial(jax.jit, static_argnames=("max_k",))
def _top_k_mask(logits: jax.Array, k: jax.Array, max_k: int | None) -> jax.Array:
  return _masked(logits, rowwise.call(_keep, _values(logits), k, None, None, count=_count(max_k)))


@functools.partial(jax.jit, static_argnames=("max_k",))
def _top_p_mask(logits: jax.Array, p: jax.Array, max_k: int | None) -> jax.Array:
  return _masked(logits, rowwise.call(_keep, _values(logits), None, params.probability(p), None, count=_count(max_k)))


@jax.jit
def _min_p_mask(logits: jax.Array, min_p: jax.Array) -> jax.Array:
  return _masked(logits, rowwise.call(_keep, _values(logits), None, None, params.ratio(min_p), count=1))


def top_k_mask(logits: ArrayLike, k: ArrayLike, *, max_k: int | None = None) -> jax.Array:
  r"""The logits with every entry outside each row's first ``k`` set to -inf.

  For every row :math:`x` (the last axis), keeps the :math:`\min(k, V)` entries that come first in
  dmljax's order (descending value; among equal values, -0.0 and +0.0 included, the lower index
  first) and sets the others to -inf. Exactly that many are kept, ties at the boundary included.
  NaN entries are never kept (they come back as -inf). ``k <= 0`` or ``k >= V`` keeps every
  non-NaN entry (the filter is off); ``k`` of any integer width is clipped, never wrapped.

  ``k`` is data: a Python int or an integer array (one per row), traced or not, and one compiled
  program serves every value. The row's first ``max_k`` entries (64 by default) are selected once
  (:func:`dmljax.top_k`, no sort) and decide every row whose ``k`` is at most that (or off); only if
  some row's ``k`` is larger does a threshold search over its whole row run (32 passes of one count
  per row for float32 and narrower logits, then a few exact ones).

  Args:
    logits: floating-point array, rank >= 1; the last axis is the vocabulary.
    k: the number of entries to keep: a Python int or an integer array broadcastable to
      ``logits.shape[:-1]``.
    max_k: optional static Python int: how many candidates to look at first (default 64); a
      bound on the ``k`` values usually passed.

  Returns:
    An array of ``logits``' shape and dtype: kept entries unchanged (bit for bit), the others -inf.

  Raises:
    DescriptorError: for non-float or rank-0 logits (or logits whose batch is split over explicit mesh axes), a
      float or wrongly shaped ``k``, or a bad ``max_k``.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> dml.sampling.top_k_mask(jnp.array([1., 3., 3., 2.]), 2).tolist()
    [-inf, 3.0, 3.0, -inf]
  """
  p = Problems("top_k_mask")
  array = params.logits_array(p, logits)
  length = 1 if array is None else array.shape[-1]
  kk = params.k_parameter(p, "k", k, params.batch_of(array), length)
  bound = params.candidate_count(p, max_k)
  p.raise_if_any()
  assert array is not None and kk is not None
  return _top_k_mask(array, kk, bound)


def top_p_mask(logits: ArrayLike, p: ArrayLike, *, max_k: int | None = None) -> jax.Array:
  r"""The logits with every entry outside each row's nucleus (the shortest prefix reaching ``p``) set to -inf.

  The row's probabilities are its softmax, computed in float32 (float64 for float64 logits).
  Walking the row in dmljax's order (descending value, ties by ascending index), the filter keeps
  the shortest prefix whose probability sum is at least ``p``, and always at least one entry.

  The sum is that of the float32 softmax, long tails included, at every vocabulary size: each
  weight :math:`w_i = e^{x_i - \max x}` is counted in units of :math:`2^{-(24 + \lceil\log_2 V\rceil + 2)}`
  (rounded down) and the sums are exact integers, so a prefix's probability is off by less than
  :math:`2^{-26}` and no summation order (a row split over devices) changes an answer. ``p`` is
  rounded up to a multiple of :math:`2^{-24}`. The kept set is the float32 softmax's nucleus unless
  ``p`` lies within :math:`2^{-21}` of the cumulative probability where the nucleus ends. A row
  whose largest logit is +inf gives all its probability to its +inf entries, equally.

  The row's first ``max_k`` entries (64 by default) are selected first: when their probability
  reaches ``p``, they decide the row; otherwise a threshold search over the whole row decides it.

  Out-of-range values are rules, not errors: ``p >= 1`` (or NaN) keeps every non-NaN entry, ``p <= 0``
  keeps the first entry only. NaN entries are never kept.

  Args:
    logits: floating-point array, rank >= 1; the last axis is the vocabulary.
    p: the probability to reach: a Python float or a float array broadcastable to ``logits.shape[:-1]``.
    max_k: optional static Python int: how many candidates to look at first (default 64).

  Returns:
    An array of ``logits``' shape and dtype: kept entries unchanged (bit for bit), the others -inf.

  Raises:
    DescriptorError: for non-float or rank-0 logits (or logits whose batch is split over explicit mesh axes), a
      non-float or wrongly shaped ``p``, or a bad ``max_k``.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> logits = jnp.log(jnp.array([0.1, 0.5, 0.3, 0.1]))
    >>> jnp.isfinite(dml.sampling.top_p_mask(logits, 0.7)).tolist()
    [False, True, True, False]
  """
  problems = Problems("top_p_mask")
  array = params.logits_array(problems, logits)
  pp = params.real_parameter(problems, "p", p, params.batch_of(array))
  params.require_mass_length(problems, array, "top_p_mask")
  bound = params.candidate_count(problems, max_k)
  problems.raise_if_any()
  assert array is not None and pp is not None
  return _top_p_mask(array, pp, bound)


def min_p_mask(logits: ArrayLike, min_p: ArrayLike) -> jax.Array:
  r"""The logits with every entry less likely than ``min_p`` times the row's likeliest set to -inf.

  Keeps the entries whose relative weight :math:`e^{x_i - \max x}` (float32; float64 for float64
  logits) is at least ``min_p``: the entries whose probability is at least ``min_p`` times the
  row's largest (a ratio, not a difference). The row's largest entries are always kept
  (``min_p`` above 1 counts as 1); ``min_p <= 0`` (or NaN) keeps every non-NaN entry. NaN entries
  are never kept.

  Args:
    logits: floating-point array, rank >= 1; the last axis is the vocabulary.
    min_p: a Python float or a float array broadcastable to ``logits.shape[:-1]``.

  Returns:
    An array of ``logits``' shape and dtype: kept entries unchanged (bit for bit), the others -inf.

  Raises:
    DescriptorError: for non-float or rank-0 logits (or logits whose batch is split over explicit mesh axes), or
      a non-float or wrongly shaped ``min_p``.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> logits = jnp.log(jnp.array([0.05, 0.5, 0.3, 0.15]))
    >>> jnp.isfinite(dml.sampling.min_p_mask(logits, 0.5)).tolist()
    [False, True, True, False]
  """
  problems = Problems("min_p_mask")
  array = params.logits_array(problems, logits)
  mp = params.real_parameter(problems, "min_p", min_p, params.batch_of(array))
  problems.raise_if_any()
  assert array is not None and mp is not None
  return _min_p_mask(array, mp)


@functools.partial(jax.jit, static_argnames=("max_k",))
def _sample(
  key: jax.Array,
  logits: jax.Array,
  temperature: jax.Array,
  k: jax.Array | None,
  p: jax.Array | None,
  min_p: jax.Array | None,
  offset: jax.Array,
  max_k: int | None,
) -> jax.Array:
  batch = logits.shape[:-1]
  words = jnp.broadcast_to(noise.stream_key(key), (*batch, 2))
  numbers = rows.numbers(batch, offset)
  probability = None if p is None else params.probability(p)
  ratio = None if min_p is None else params.ratio(min_p)
  clean = jax.lax.stop_gradient(logits)
  unfiltered = k is None and p is None and ratio is None
  count = 1 if unfiltered else _count(max_k)
  decision = rowwise.call(draw.decide, clean, temperature, k, probability, ratio, count=count)
  return rowwise.call(draw.draw, clean, words, numbers, temperature, ratio, decision)


def sample(
  key: ArrayLike,
  logits: ArrayLike,
  *,
  temperature: ArrayLike = 1.0,
  top_k: ArrayLike | None = None,
  top_p: ArrayLike | None = None,
  min_p: ArrayLike | None = None,
  max_k: int | None = None,
  row_offset: ArrayLike | None = None,
) -> jax.Array:
  r"""One token index per row, drawn from the filtered softmax of ``logits / temperature``.

  *Which entries are kept.* :func:`top_k_mask`, :func:`top_p_mask` and :func:`min_p_mask` apply in
  that order (``None``: not applied; top-p's probabilities are those of what top-k kept), and they
  rank the raw logits, never the scaled ones: the order is dmljax's order of ``logits`` (descending
  value, ties by ascending index, NaN dropped) at every temperature, so top-k keeps the same
  entries whatever the temperature. The probabilities top-p sums and min-p compares are those of the
  scaled logits :math:`z = (x - \max x) / T` (float32; float64 for float64 logits; :math:`z = 0`
  at the row's largest entries). For :math:`0 < T < \infty` ranking :math:`x` or :math:`z` is the
  same wherever the scaled values differ; where scaling makes distinct logits equal (``T = +inf``,
  or a temperature so large that :math:`(x - \max x) / T` rounds to 0 or is flushed as a subnormal)
  the larger logit still comes first.

  *The draw.* One index per row with probability ``softmax(z)`` over what is kept: an exponential
  race (Gumbel-max), :math:`\arg\max_i e^{z_i} / E_i` with the lowest index among equal maxima,
  where the noise :math:`E_i = -\log(1 - v_i)` comes from Threefry-2x32 (JAX's default PRNG's block
  function) at the counter (row number, index) under the sampling stream's key (the block of the
  key at the counter ("samp", "ling"), which no ``jax.random`` function evaluates: the stream shares
  nothing with ``split``, ``fold_in`` or ``jax.random.uniform`` of the same key), with :math:`v_i`
  resolved to 56 bits near 0 (tokens far down the tail are drawn as often as their probability
  says), so the token is the same whether the row is whole, split over devices, or narrowed to its
  first candidates. A temperature tending to 0 tends to the greedy token in every dtype; +inf logits
  share the draw equally at every temperature. Temperature 0 is greedy: the row's first entry in
  dmljax's order once NaNs are dropped (the largest logit, lowest index among equals); a traced
  temperature below 0 or NaN is greedy too. Temperature +inf draws uniformly among the kept +inf
  entries of a row that has +inf logits (they weigh 1, every finite entry 0, as at any temperature),
  and among the finite kept entries of any other row (each weighs 1). A row whose logits are all
  NaN or -inf gives index 0. NaN and -inf entries are never drawn.

  *Row numbers.* Rows are numbered in row-major order of ``logits.shape[:-1]`` from ``row_offset``
  (modulo :math:`2^{32}`). On one device and wherever JAX partitions the batch itself (``jax.jit``
  with inputs sharded over automatic mesh axes) every row gets its global number: the same key
  gives the same tokens, sharded or not. (A batch split over explicit mesh axes is refused; the
  vocabulary may be split there.) Inside ``jax.shard_map`` a device sees only its block;
  pass ``row_offset`` = the global number of its first row (``jax.lax.axis_index("batch") * rows``)
  for exactly the one-device tokens. Without it the blocks are numbered by the device's position
  along the manual mesh axes the logits vary over (every manual axis with ``check_vma=False``), so
  no two devices holding different blocks draw the same noise.

  Every parameter is data (a Python number, or an array broadcastable to ``logits.shape[:-1]``),
  traced or not: one compiled program serves every value. The step runs on the row's first
  ``max_k`` entries (64 by default; one :func:`dmljax.top_k`, no sort) whenever they decide it
  (greedy rows always; ``top_k <= max_k``, or top-p's nucleus or min-p's cut ending among them);
  only the sampled rows they do not decide are drawn from their whole row (searched first where a
  filter is on), with the same answer. ``jax.vmap`` over keys with shared logits decides once and
  reads the logits once per key, never a copy of them per key.

  Args:
    key: one PRNG key (``jax.random.key(seed)``; a raw ``jax.random.PRNGKey`` is accepted). For a
      batch of keys, ``jax.vmap`` over the call.
    logits: floating-point array, rank >= 1; the last axis is the vocabulary.
    temperature: a number >= 0 or a float array broadcastable to ``logits.shape[:-1]``.
    top_k: ``None`` or the ``k`` of :func:`top_k_mask`.
    top_p: ``None`` or the ``p`` of :func:`top_p_mask`.
    min_p: ``None`` or the ``min_p`` of :func:`min_p_mask`.
    max_k: optional static Python int: how many candidates to look at first (default 64).
    row_offset: optional keyword: one integer, the number of the first row (a Python int in
      ``[0, 2**32)`` or an integer array scalar, traced or not; a traced one is taken modulo
      ``2**32``). ``None`` (the default): 0, or inside ``shard_map`` the block's position (above).

  Returns:
    int32 array of shape ``logits.shape[:-1]``.

  Raises:
    DescriptorError: for a key that is not one PRNG key, non-float or rank-0 logits, a
      temperature below 0 (given as a concrete value), a float ``top_k``, a non-float ``top_p`` or
      ``min_p``, a parameter that does not broadcast to the rows, a bad ``max_k``, a
      ``row_offset`` that is not one integer in ``[0, 2**32)``, or logits whose batch is split over
      explicit mesh axes.

  Example:
    >>> import dmljax as dml, jax, jax.numpy as jnp
    >>> logits = jnp.array([[0., 5., 1.], [2., 2., 0.]])
    >>> dml.sampling.sample(jax.random.key(0), logits, temperature=0.0).tolist()
    [1, 0]
    >>> dml.sampling.sample(jax.random.key(0), logits, top_k=1).tolist()
    [1, 0]
  """
  problems = Problems("sample")
  prng = params.prng_key(problems, key)
  array = params.logits_array(problems, logits)
  batch = params.batch_of(array)
  length = 1 if array is None else array.shape[-1]
  t = params.real_parameter(problems, "temperature", temperature, batch)
  params.require_non_negative(problems, "temperature", temperature)
  kk = None if top_k is None else params.k_parameter(problems, "top_k", top_k, batch, length)
  pp = None if top_p is None else params.real_parameter(problems, "top_p", top_p, batch)
  if top_p is not None:
    params.require_mass_length(problems, array, "sample with top_p")
  mp = None if min_p is None else params.real_parameter(problems, "min_p", min_p, batch)
  bound = params.candidate_count(problems, max_k)
  offset = None if row_offset is None else params.row_offset(problems, row_offset)
  problems.raise_if_any()
  assert prng is not None and array is not None and t is not None
  if offset is None:
    offset = rows.shard_offset(array)
  return _sample(prng, array, t, kk, pp, mp, offset, bound)
