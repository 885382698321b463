"""REDUCE's MAX and MIN: an element of the input, bit for bit, and the fused CPU reduction they run on.

MAX and MIN of floats are IEEE 754-2019 ``maximum`` and ``minimum``: a NaN if the block holds one (the NaN whose
bits, read as an unsigned integer, are the largest), else the largest or smallest value, +0.0 above -0.0. They
are computed on integer keys alone (:func:`rank_keys.ieee_maximum_key`), so no platform's float maximum (which
may skip NaNs, flush subnormals or widen a narrow float) and no split over devices changes the bits; a second
pass runs only where a NaN of the reversed sign won (:func:`_largest_nan_fix`). Integers are reduced as they
are. The gradient shares the cotangent equally among tied extremes, as ``jnp.max``'s.

:func:`tree` is the fused CPU reduction (MAX, MIN and REDUCE's wrapping integer sums run on it): the rows halved
with elementwise maxima, fused with the keys into one vectorised loop, on one device; XLA's reduction elsewhere.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import axes as axes_lib
from dmljax._src import dtypes, platform, rank_keys, rowwise, shardings, value_bits


def extreme(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """REDUCE's MAX (``find_max``) or MIN over ``axes`` of a float or integer ``x``, keeping dims."""
  if dtypes.is_float(np.dtype(x.dtype)):
    return _extreme(x, axes, find_max)
  return _integer_extreme(x, axes, find_max)


def tree_max(
  x: jax.Array, axes: tuple[int, ...], key: Callable[[jax.Array], jax.Array], *, wrapping_key: bool = False
) -> jax.Array:
  """The largest ``key(x)`` over ``axes``, keeping dims (``key``: elementwise, to an integer); see :func:`tree`."""
  return tree(x, axes, key, jnp.maximum, jnp.max, wrapping_key=wrapping_key)


def tree(
  x: jax.Array,
  axes: tuple[int, ...],
  key: Callable[[jax.Array], jax.Array],
  combine: Callable[[jax.Array, jax.Array], jax.Array],
  reduce: Callable[..., jax.Array],
  *,
  wrapping_key: bool = False,
) -> jax.Array:
  """``reduce`` of ``key(x)`` over ``axes``, keeping dims, for an integer ``key`` and an associative, commutative
  ``combine`` (``reduce``'s elementwise form) that gives the same bits in any order: maximum, minimum, or
  wrapping integer addition. With the maximum and minimum, halves may overlap; with addition they may not.

  On CPU, reduced axes next to each other are reduced as one axis, by the elementwise maximum of its two
  halves (overlapping by one element when the length is odd: the maximum does not mind an element counted
  twice), over and over; ``key`` is applied to the two halves of ``x`` themselves, so that each key feeds one
  maximum. XLA fuses the keys and the first halvings into one vectorised loop over the input, which writes
  a small fraction of it (at most a quarter); an integer reduction of a long axis is a reduce-window tree in
  XLA:CPU instead, which neither vectorises nor fuses its operand. The last few (at most 16) elements of a
  trailing axis are reduced as a reduction. Other platforms, reduced axes apart, and an explicit sharding of
  a reduced axis take XLA's reduction of ``key(x)``; so does a program of several devices, chosen when it is
  lowered (:func:`shardings.by_program_devices`: automatic axes are known only when XLA partitions the program),
  since halves of a split axis lie on different devices, where the halving would move the input (XLA's reduction
  moves partial results only).

  ``wrapping_key``: ``key`` computes with wrapping integer arithmetic (an add or subtract that may overflow).
  XLA:CPU's maximum or minimum reduction of 8-bit integers is wrong where such arithmetic is fused into it:
  ``jnp.max(x - 3)`` of 4096 or more int8 ``x`` holding -128 gives -3, where the wrapped -131 is 125 (16-bit
  and wider integers, and elementwise maxima, are right; tests/test_reduce_extreme.py pins it). Every
  reduction of such 8-bit keys here (the plain one and the halving's last) reduces them as int32.
  """

  def reduced(k: jax.Array, over: tuple[int, ...]) -> jax.Array:
    """XLA's reduction of the keys ``k`` over the axes ``over``, keeping dims."""
    if wrapping_key and k.dtype.itemsize == 1:
      return reduce(k.astype(jnp.int32), over, keepdims=True).astype(k.dtype)
    return reduce(k, over, keepdims=True)

  def plain(x: jax.Array) -> jax.Array:
    return reduced(key(x), axes)

  overlap = combine in (jnp.maximum, jnp.minimum)
  if not axes or axes != tuple(range(axes[0], axes[-1] + 1)) or shardings.splits_explicitly(x, axes):
    return plain(x)
  first, last = axes[0], axes[-1]

  def halve(rows: jax.Array, leaf: Callable[[jax.Array], jax.Array]) -> jax.Array:
    """(outer, n, inner) -> (outer, inner): the largest ``leaf(rows)`` over axis 1."""
    n, inner = rows.shape[1:]
    if inner == 1 and rows.shape[0] < 64 and n >= 1 << 16:
      # Few long rows: each split into parts, so the fused loop has rows enough to spread over the cores.
      parts = math.gcd(n, 64)
      if parts > 1:
        rows = halve(rows.reshape(rows.shape[0] * parts, n // parts, 1), leaf).reshape(-1, parts, 1)
        n, leaf = parts, lambda k: k
    stop = 16 if inner == 1 else 1
    while n > stop and (overlap or n % 2 == 0):
      half = (n + 1) // 2
      rows = combine(leaf(rows[:, :half]), leaf(rows[:, n - half :]))
      n, leaf = half, lambda k: k
    rows = leaf(rows)
    return reduced(rows, (1,))[:, 0] if n > 1 else rows[:, 0]

  def halving(x: jax.Array) -> jax.Array:
    shape = x.shape
    rows = x.reshape(math.prod(shape[:first]), math.prod(shape[first : last + 1]), math.prod(shape[last + 1 :]))
    return halve(rows, key).reshape(axes_lib.reduced_shape(shape, axes))

  def cpu(x: jax.Array) -> jax.Array:
    return shardings.by_program_devices(x, one_device=halving, several=plain)

  return platform.branch(x, cpu=cpu, default=plain)


# Float types whose slices XLA:CPU moves as they are (a NaN's payload kept).
_SLICED_AS_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _tree_max_of_bits(
  x: jax.Array, axes: tuple[int, ...], key: Callable[[jax.Array], jax.Array], *, wrapping_key: bool = False
) -> jax.Array:
  """:func:`_tree_max` of ``key(bits)``, ``bits`` the float ``x``'s bits as a signed integer of its width.

  float16/32/64 are sliced as they are and each slice made bits where it is read: XLA:CPU fuses that into
  the halvings at every size, where a bitcast of the whole input read through many slices is written out
  once it is large. Other types are made bits first: XLA:CPU may carry a bfloat16 or float8 slice through
  float32, which quiets a signalling NaN.
  """
  dtype = np.dtype(x.dtype)
  idt = np.dtype(f"int{rank_keys.layout(dtype).width}")
  if dtype in _SLICED_AS_FLOATS:
    return tree_max(x, axes, lambda s: key(lax.bitcast_convert_type(s, idt)), wrapping_key=wrapping_key)
  return tree_max(lax.bitcast_convert_type(x, idt), axes, key, wrapping_key=wrapping_key)


def _largest_nan_fix(x: jax.Array, best: jax.Array, *, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """The element of :func:`rank_keys.ieee_maximum_key` ``best``, or where it is a NaN, the input's NaN with the
  largest bits.

  The key orders the NaNs of the sign bit that it moves to the top (MAX: the negative NaNs; MIN: the positive
  ones, whose sign the key flipped) against their bits. Only where such a NaN won somewhere (a scalar
  predicate, so ``lax.cond`` runs one branch) does a second pass pick, in every sequence that holds a NaN, the
  NaN whose bits are the largest unsigned integer.
  """
  dtype = np.dtype(x.dtype)
  lay = rank_keys.layout(dtype)
  out = rank_keys.bits_of_ieee_maximum_key(best, dtype, find_max=find_max)
  nans = rank_keys.nan_magnitudes(dtype)
  if nans > 0:
    # Bits stay integers throughout: a select of bfloat16 or float8 values may run through float32 on CPU,
    # which quiets a signalling NaN.
    w, idt = lay.width, best.dtype
    sign = rank_keys.int_constant(1 << (w - 1), idt)
    reversed_nans = best >= rank_keys.int_constant((1 << (w - 1)) - nans, idt)

    def nan_key(b: jax.Array) -> jax.Array:
      nan = (b & rank_keys.int_constant((1 << (w - 1)) - 1, idt)) > rank_keys.int_constant(lay.top, idt)
      return jnp.where(nan, b ^ sign, sign)  # the bits as unsigned, in signed order; non-NaNs lowest

    def largest_nan(x: jax.Array, best: jax.Array, out: jax.Array) -> jax.Array:
      chosen = _tree_max_of_bits(x, axes, nan_key) ^ sign
      nan_row = best > rank_keys.int_constant((1 << (w - 1)) - 1 - 2 * nans, idt)
      return jnp.where(nan_row, chosen, out)

    out = lax.cond(jnp.any(reversed_nans), largest_nan, lambda x, best, out: out, x, best, out)
  return lax.bitcast_convert_type(out, dtype)


def _float_extreme_by_ties(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """MAX/MIN of the float types without a :func:`rank_keys.ieee_maximum_key` (the ``fnuz`` float8 types, float8_e8m0fnu
  and float4_e2m1fn), by :func:`rank_keys.extreme_key` and then the largest bits among the elements that hold it.

  Ties are the two zeros (float4_e2m1fn): MAX takes +0.0 (its bits with the sign flipped for the tie), MIN -0.0.
  """
  lay = rank_keys.layout(np.dtype(x.dtype))
  key = rank_keys.extreme_key(x, find_max)
  best = tree_max(key, axes, lambda k: k)
  bits = value_bits.to_bits(x)
  flip = np.zeros((), bits.dtype)
  if find_max and lay.signed and not lay.nan_at_sign:
    flip = np.array(1 << (lay.width - 1), bits.dtype)
  zero = rank_keys.extreme_key(jnp.zeros((), x.dtype), find_max)
  tie = jnp.where(key == best, bits ^ jnp.where(key == zero, flip, np.zeros((), bits.dtype)), np.zeros((), bits.dtype))
  chosen = jnp.max(tie, axes, keepdims=True)
  chosen = chosen ^ jnp.where(best == zero, flip, np.zeros((), bits.dtype))
  return value_bits.from_bits(chosen, x.dtype)


def _float_extreme(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """MAX/MIN of floats: an element of the input, bit for bit, that is the extreme.

  IEEE 754-2019 ``maximum``/``minimum``: a NaN if the block holds one (the NaN whose bits, read as an unsigned
  integer, are the largest), else the largest/smallest value, with +0.0 above -0.0 (MAX of both zeros is
  +0.0, MIN -0.0). Integer arithmetic alone: no platform's float max (which may skip NaNs, treat
  subnormals as zero, or run a narrow float through float32) and no split over devices can change the bits.
  One pass over the input (:func:`rank_keys.ieee_maximum_key`, reduced by :func:`tree_max`); a second one only where a
  NaN of the reversed sign wins (:func:`_largest_nan_fix`).
  """
  if not axes:
    return x
  if not rank_keys.has_ieee_maximum_key(np.dtype(x.dtype)):
    return _float_extreme_by_ties(x, axes, find_max)
  key = functools.partial(rank_keys.ieee_maximum_key, dtype=np.dtype(x.dtype), find_max=find_max)
  best = _tree_max_of_bits(x, axes, key, wrapping_key=True)  # the key's last step wraps
  # Under vmap the predicate of the second pass's lax.cond stays one scalar (rowwise): it still runs only where a
  # reversed NaN won somewhere, never as a select of both branches.
  return rowwise.call_reducing(_largest_nan_fix, x, best, axes=axes, find_max=find_max)


def trailing(x: jax.Array, axes: tuple[int, ...]) -> bool:
  """Whether ``axes`` are the trailing axes of ``x`` (where :func:`tree` beats XLA:CPU's integer reduction)."""
  return bool(axes) and axes == tuple(range(x.ndim - len(axes), x.ndim))


def _integer_extreme(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """MAX/MIN of integers; 4- and 2-bit ones reduced as 8-bit integers (XLA:CPU has no all-reduce for them)."""
  wide = value_bits.to_bits(x)
  if not trailing(wide, axes):  # XLA's own reduction over leading axes is the faster one there
    out = jnp.max(wide, axes, keepdims=True) if find_max else jnp.min(wide, axes, keepdims=True)
  elif find_max:
    out = tree(wide, axes, lambda k: k, jnp.maximum, jnp.max)
  else:
    out = tree(wide, axes, lambda k: k, jnp.minimum, jnp.min)
  return value_bits.from_bits(out, x.dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _extreme(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """MAX/MIN keeping dims; ties share the tangent equally (as ``jnp.max``), through a select.

  ``jnp.max``'s rule multiplies by a 0/1 mask, which gives -0.0 for a negative
  cotangent eagerly but +0.0 once XLA rewrites it as a select under jit; a
  select gives the same bits both ways.
  """
  return _float_extreme(x, axes, find_max)


@_extreme.defjvp
def _extreme_jvp(
  axes: tuple[int, ...], find_max: bool, primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
  (x,), (t,) = primals, tangents
  out = _extreme(x, axes, find_max)
  hit = (x == out) | (jnp.isnan(x) & jnp.isnan(out))  # a NaN result comes from the NaNs
  # float16/bfloat16 (and narrower) tangents accumulate in float32 and round once, as the other reductions do.
  work = np.dtype(np.float32) if np.dtype(t.dtype).itemsize < 4 else np.dtype(t.dtype)
  count = jnp.sum(hit, axes, keepdims=True, dtype=work)
  shared = jnp.sum(jnp.where(hit, t.astype(work), jnp.zeros((), work)), axes, keepdims=True) / count
  return out, shared.astype(t.dtype)
