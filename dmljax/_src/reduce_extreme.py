"""REDUCE's MAX and MIN: an element of the input, bit for bit.

MAX and MIN of floats are IEEE 754-2019 ``maximum`` and ``minimum``: a NaN if the block holds one (the NaN whose
bits, read as an unsigned integer, are the largest), else the largest or smallest value, +0.0 above -0.0. They
are computed on integer keys alone (:func:`rank_keys.ieee_maximum_key`), so no platform's float maximum (which
may skip NaNs, flush subnormals or widen a narrow float) and no split over devices changes the bits; a second
pass runs only where a NaN of the reversed sign won (:func:`_largest_nan_fix`). Integers are reduced as they
are, 8-bit ones as 16-bit integers outside the CPU kernel (:mod:`narrow_integers`). The gradient shares the
cotangent equally among tied extremes, as ``jnp.max``'s.

The composition runs on the halving (:mod:`halving`: the rows halved with elementwise maxima, fused with the keys
into one vectorised loop, on one CPU device; XLA's reduction elsewhere); on one CPU device the compiled kernel
(:mod:`reduction_kernels`) replaces it, as :func:`cpu_route.choose` decides.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import (
  cpu_route,
  dtypes,
  halving,
  narrow_integers,
  rank_keys,
  reduction_kernels,
  rowwise,
  symbolic,
  value_bits,
)


def extreme(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """REDUCE's MAX (``find_max``) or MIN over ``axes`` of a float or integer ``x``, keeping dims."""
  if dtypes.is_float(np.dtype(x.dtype)):
    return _extreme(x, axes, find_max)
  return _integer_extreme(x, axes, find_max)


# Float types whose slices XLA:CPU moves as they are (a NaN's payload kept).
_SLICED_AS_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _tree_max_of_bits(x: jax.Array, axes: tuple[int, ...], key: Callable[[jax.Array], jax.Array]) -> jax.Array:
  """:func:`halving.tree_max` of ``key(bits)``, ``bits`` the float ``x``'s bits as a signed integer of its width.

  float16/32/64 are sliced as they are and each slice made bits where it is read: XLA:CPU fuses that into
  the halvings at every size, where a bitcast of the whole input read through many slices is written out
  once it is large. Other types are made bits first: XLA:CPU may carry a bfloat16 or float8 slice through
  float32, which quiets a signalling NaN.
  """
  dtype = np.dtype(x.dtype)
  idt = np.dtype(f"int{rank_keys.layout(dtype).width}")
  if dtype in _SLICED_AS_FLOATS:
    return halving.tree_max(x, axes, lambda s: key(lax.bitcast_convert_type(s, idt)))
  return halving.tree_max(lax.bitcast_convert_type(x, idt), axes, key, shared_input=True)


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
  best = halving.tree_max(key, axes, lambda k: k, shared_input=True)
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
  """MAX/MIN of floats: the compiled CPU kernel where it runs (:func:`_by_kernel`), else :func:`_float_composition`."""
  return _by_kernel(x, axes, find_max, _float_composition)


def _float_composition(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """MAX/MIN of floats in XLA: an element of the input, bit for bit, that is the extreme.

  IEEE 754-2019 ``maximum``/``minimum``: a NaN if the block holds one (the NaN whose bits, read as an unsigned
  integer, are the largest), else the largest/smallest value, with +0.0 above -0.0 (MAX of both zeros is
  +0.0, MIN -0.0). Integer arithmetic alone: no platform's float max (which may skip NaNs, treat
  subnormals as zero, or run a narrow float through float32) and no split over devices can change the bits.
  One pass over the input (:func:`rank_keys.ieee_maximum_key`, reduced by :func:`halving.tree_max`); a second one
  only where a NaN of the reversed sign wins (:func:`_largest_nan_fix`).
  """
  if not axes:
    return x
  if not rank_keys.has_ieee_maximum_key(np.dtype(x.dtype)):
    return _float_extreme_by_ties(x, axes, find_max)
  key = functools.partial(rank_keys.ieee_maximum_key, dtype=np.dtype(x.dtype), find_max=find_max)
  best = _tree_max_of_bits(x, axes, key)
  # Under vmap the predicate of the second pass's lax.cond stays one scalar (rowwise): it still runs only where a
  # reversed NaN won somewhere, never as a select of both branches.
  return rowwise.call_reducing(_largest_nan_fix, x, best, axes=axes, find_max=find_max)


def _integer_extreme(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """MAX/MIN of integers: the compiled CPU kernel where it runs (:func:`_by_kernel`), else the composition."""
  return _by_kernel(x, axes, find_max, _integer_composition)


def _integer_composition(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """MAX/MIN of integers in XLA; 4- and 2-bit ones reduced as 8-bit integers (XLA:CPU has no all-reduce for them).

  8-bit integers as 16-bit ones (:func:`narrow_integers.widened`), by the halving (:func:`halving.tree`) over any
  axes it takes, each half widened where it is read (about as fast as XLA:CPU's own 8-bit reduction, YNNPACK's,
  which would take in the caller's arithmetic and lose its wrap: :mod:`narrow_integers`), by XLA's reduction of the
  widened values elsewhere. Wider ones by XLA's own reduction over leading axes, where it is the faster one, and by
  the halving over trailing axes.
  """
  wide = value_bits.to_bits(x)
  combine, reduce = (jnp.maximum, jnp.max) if find_max else (jnp.minimum, jnp.min)
  if narrow_integers.is_narrow(np.dtype(wide.dtype)):
    out = halving.tree(wide, axes, narrow_integers.widened, combine, reduce).astype(wide.dtype)
  elif halving.trailing(wide, axes):
    out = halving.tree(wide, axes, lambda k: k, combine, reduce)
  else:
    out = reduce(wide, axes, keepdims=True)
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
  hit = _hits(x, out)
  # float16/bfloat16 (and narrower) tangents accumulate in float32 and round once, as the other reductions do.
  work = np.dtype(np.float32) if np.dtype(t.dtype).itemsize < 4 else np.dtype(t.dtype)
  count = _count_hits(x, out, axes).astype(work)
  shared = jnp.sum(jnp.where(hit, t.astype(work), jnp.zeros((), work)), axes, keepdims=True) / count
  return out, shared.astype(t.dtype)


def _hits(x: jax.Array, out: jax.Array) -> jax.Array:
  """Where ``x`` holds the extreme ``out`` (a NaN result comes from the NaNs)."""
  return (x == out) | (jnp.isnan(x) & jnp.isnan(out))


def _count_hits(x: jax.Array, out: jax.Array, axes: tuple[int, ...]) -> jax.Array:
  """How many elements of every block hold its extreme ``out`` (int32, keeping dims).

  On one CPU device by the halving, the comparison made where each block is read: a sum of the comparisons in
  XLA:CPU's reduction would write them out whole (as float32, or int32) first, to read them again.
  """

  def plain(x: jax.Array) -> jax.Array:
    return jnp.sum(_hits(x, out), axes, keepdims=True, dtype=np.int32)

  def one_device(x: jax.Array) -> jax.Array:
    def key(values: jax.Array, extreme: jax.Array) -> jax.Array:
      return _hits(values, extreme).astype(np.int32)

    total = functools.partial(jnp.sum, dtype=np.int32)
    return halving.Reduction(key, jnp.add, total, True).halved((x, jnp.broadcast_to(out, x.shape)), axes)

  return cpu_route.choose(x, axes, default=plain, one_device=one_device)


Composition = Callable[[jax.Array, tuple[int, ...], bool], jax.Array]
# Many short rows cost the kernel a fold of its vector lanes each (10x jnp.max at 65536 rows of 16 float32):
# rows under 64 elements keep the composition, unless the whole input is small (256 KiB), where the kernel's
# single call beats XLA's fixed costs (0.2x jnp.max at 256 rows of 8).
_KERNEL_SHORTEST_ROW = 64
_KERNEL_ANY_ROW_BYTES = 1 << 18


def _by_kernel(x: jax.Array, axes: tuple[int, ...], find_max: bool, composition: Composition) -> jax.Array:
  """MAX/MIN keeping dims: where :func:`cpu_route.choose` takes a kernel (CPU, a program of one device, the library
  loaded), the compiled kernel (:func:`reduction_kernels.reduce_extreme`: a custom call that reads the input once on
  every core and writes the result, with scratch of its own only where it splits the reduced axis, bounded by the
  thread count: docs/cpu_kernel.rst; one kernel for XLA to compile); ``composition`` everywhere else, and as the
  kernel's own lowering where it cannot run (an exported program). Both give the same bits.
  """

  def plain(x: jax.Array) -> jax.Array:
    return composition(x, axes, find_max)

  def fallback(rows: jax.Array) -> jax.Array:
    return composition(rows, (1,), find_max)[:, 0]

  def kernel(x: jax.Array) -> jax.Array:
    return reduction_kernels.reduce_extreme(x, axes, find_max, fallback)

  takes = np.dtype(x.dtype) in reduction_kernels.KERNEL_TYPES and not _many_short_rows(x, axes)
  return cpu_route.choose(x, axes, default=plain, kernel=kernel if takes else None)


def _many_short_rows(x: jax.Array, axes: tuple[int, ...]) -> bool:
  """Whether ``x`` reduced over ``axes`` is many rows too short for the kernel; ``False`` where no kernel could take
  it anyway (no axes, a symbolic shape: :func:`cpu_route.choose` keeps the composition there)."""
  if not axes or not symbolic.is_static(x.shape):
    return False
  rows = reduction_kernels.rows_shape(x.shape, axes)
  return len(rows) == 2 and rows[1] < _KERNEL_SHORTEST_ROW and x.size * x.dtype.itemsize >= _KERNEL_ANY_ROW_BYTES
