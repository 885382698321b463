"""REDUCE's MAX and MIN: an element of the input, bit for bit, and the fused CPU reduction they run on.

MAX and MIN of floats are IEEE 754-2019 ``maximum`` and ``minimum``: a NaN if the block holds one (the NaN whose
bits, read as an unsigned integer, are the largest), else the largest or smallest value, +0.0 above -0.0. They
are computed on integer keys alone (:func:`rank_keys.ieee_maximum_key`), so no platform's float maximum (which
may skip NaNs, flush subnormals or widen a narrow float) and no split over devices changes the bits; a second
pass runs only where a NaN of the reversed sign won (:func:`_largest_nan_fix`). Integers are reduced as they
are, 8-bit ones as 16-bit integers outside the CPU kernel (:mod:`narrow_integers`). The gradient shares the
cotangent equally among tied extremes, as ``jnp.max``'s.

:func:`tree` is the fused CPU reduction (MAX, MIN and REDUCE's wrapping integer sums run on it): the rows halved
with elementwise maxima, fused with the keys into one vectorised loop, on one device; XLA's reduction elsewhere.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core
from jax.interpreters import batching, mlir

from dmljax._src import axes as axes_lib
from dmljax._src import cpu_kernel_library, dtypes, narrow_integers, platform, rank_keys, rowwise, shardings, value_bits
from dmljax._src.strategies import row_kernel


def extreme(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """REDUCE's MAX (``find_max``) or MIN over ``axes`` of a float or integer ``x``, keeping dims."""
  if dtypes.is_float(np.dtype(x.dtype)):
    return _extreme(x, axes, find_max)
  return _integer_extreme(x, axes, find_max)


def tree_max(
  x: jax.Array,
  axes: tuple[int, ...],
  key: Callable[[jax.Array], jax.Array],
  *,
  shared_input: bool = False,
) -> jax.Array:
  """The largest ``key(x)`` over ``axes``, keeping dims (``key``: elementwise, to an integer); see :func:`tree`."""
  return tree(x, axes, key, jnp.maximum, jnp.max, shared_input=shared_input)


def tree(
  x: jax.Array,
  axes: tuple[int, ...],
  key: Callable[[jax.Array], jax.Array],
  combine: Callable[[jax.Array, jax.Array], jax.Array],
  reduce: Callable[..., jax.Array],
  *,
  shared_input: bool = False,
) -> jax.Array:
  """``reduce`` of ``key(x)`` over ``axes``, keeping dims, for an integer ``key`` and an associative, commutative
  ``combine`` (``reduce``'s elementwise form) that gives the same bits in any order: maximum, minimum, or
  wrapping integer addition. With the maximum and minimum, halves may overlap; with addition they may not.

  On CPU, reduced axes next to each other are reduced as one axis, by the elementwise maximum of its two
  halves (overlapping by one element when the length is odd: the maximum does not mind an element counted
  twice), over and over; ``key`` is applied to the two halves of ``x`` themselves, so that each key feeds one
  maximum. The axis is cut into short blocks first (:func:`_block_length`), each halved to one element in one
  fused, vectorised loop over the input that writes 1/128 of it (trailing axes; 1/16 or 1/8 otherwise), then
  the blocks' results in the same way: XLA:CPU's integer reduction of a long axis fuses nothing into it, so
  its keys would be written out whole and read again. The last few (at most 16) elements of a trailing axis
  are reduced as a reduction. Other platforms, reduced axes apart, and an explicit sharding of
  a reduced axis take XLA's reduction of ``key(x)``; so does a program of several devices, chosen when it is
  lowered (:func:`shardings.by_program_devices`: automatic axes are known only when XLA partitions the program),
  since halves of a split axis lie on different devices, where the halving would move the input (XLA's reduction
  moves partial results only).

  ``shared_input``: ``x`` is computed from the input by one operation over all of it (a bitcast, the keys): the
  first blocks read it through few enough slices for XLA to fuse it into their loop.

  Every maximum or minimum reduction of 8-bit keys handed to XLA here (the plain one and the halving's last)
  reduces them as 16-bit integers (:func:`narrow_integers.widened`): XLA:CPU's 8-bit one would take in the
  arithmetic that computed them (the caller's, or a key's own wrapping step) and lose its wrap.
  """

  reduction = _Reduction(key, combine, reduce, shared_input)

  def plain(x: jax.Array) -> jax.Array:
    return reduction.reduced(key(x), axes)

  if not shardings.blockwise(x, axes):
    return plain(x)

  def cpu(x: jax.Array) -> jax.Array:
    return shardings.by_program_devices(x, one_device=lambda x: reduction.halved((x,), axes), several=plain)

  return platform.branch(x, cpu=cpu, default=plain)


Parts = tuple[jax.Array, ...]


class _Reduction:
  """:func:`tree`'s reduction on one device: ``reduce`` of ``key(*parts)`` by halving, ``parts`` arrays of one
  shape read together (the input, and what the key needs beside it: positions, a broadcast peak)."""

  def __init__(
    self,
    key: Callable[..., jax.Array],
    combine: Callable[[jax.Array, jax.Array], jax.Array],
    reduce: Callable[..., jax.Array],
    shared_input: bool,
    longest: int = 128,
  ) -> None:
    self.key, self.combine, self.reduce = key, combine, reduce
    self.shared_input, self.longest = shared_input, longest
    self.overlap = combine in (jnp.maximum, jnp.minimum)

  def reduced(self, k: jax.Array, over: tuple[int, ...]) -> jax.Array:
    """XLA's reduction of the keys ``k`` over the axes ``over``, keeping dims (a maximum or minimum of 8-bit keys
    as 16-bit ones: :func:`narrow_integers.widened`)."""
    if self.overlap and narrow_integers.is_narrow(np.dtype(k.dtype)):
      return self.reduce(narrow_integers.widened(k), over, keepdims=True).astype(k.dtype)
    return self.reduce(k, over, keepdims=True)

  def halved(self, parts: Parts, axes: tuple[int, ...]) -> jax.Array:
    """The reduction over the contiguous ``axes`` of ``parts``, keeping dims."""
    shape = parts[0].shape
    first, last = axes[0], axes[-1]
    rows_shape: tuple[int, ...] = (
      math.prod(shape[:first]),
      math.prod(shape[first : last + 1]),
      math.prod(shape[last + 1 :]),
    )
    rows: Parts | jax.Array = tuple(p.reshape(rows_shape) for p in parts)
    leaf: Callable[..., jax.Array] = self.key
    staged = False
    while (
      length := _block_length(rows_shape[1], rows_shape[2], not staged, self.shared_input, self.longest)
    ) is not None:
      rows, leaf, staged = self._halve_blocks(rows, length, leaf), _identity, True
      rows_shape = rows.shape
    if staged and rows_shape[2] > 1:
      # The few blocks left reduced by XLA, a boundary of its own (see _block_length).
      out = self.reduced(_apply(leaf, rows), (1,))[:, 0]
    else:
      out = self._halve(rows, leaf)
    return out.reshape(axes_lib.reduced_shape(shape, axes))

  def _halve(self, rows: Parts | jax.Array, leaf: Callable[..., jax.Array]) -> jax.Array:
    """(outer, n, inner) -> (outer, inner): the reduction of ``leaf(rows)`` over axis 1, by halving it."""
    outer, n, inner = _shape(rows)
    if inner == 1 and outer < 64 and n >= 1 << 16:
      # Few long rows: each split into parts, so the fused loop has rows enough to spread over the cores.
      parts = math.gcd(n, 64)
      if parts > 1:
        split = _map(lambda r: r.reshape(outer * parts, n // parts, 1), rows)
        rows, n, leaf = self._halve(split, leaf).reshape(-1, parts, 1), parts, _identity
    stop = 16 if inner == 1 else 1
    while n > stop and (self.overlap or n % 2 == 0):
      half = (n + 1) // 2
      low, high = _slice(rows, 0, half, 1), _slice(rows, n - half, n, 1)
      rows, n, leaf = self.combine(_apply(leaf, low), _apply(leaf, high)), half, _identity
    out = _apply(leaf, rows)
    return self.reduced(out, (1,))[:, 0] if n > 1 else out[:, 0]

  def _halve_blocks(self, rows: Parts | jax.Array, length: int, leaf: Callable[..., jax.Array]) -> jax.Array:
    """(outer, n, inner) -> (outer, n / length, inner): each block of ``length`` along axis 1 halved to one."""
    outer, n, inner = _shape(rows)
    if inner == 1:  # blocks along the minor axis, halved down to 16, then reduced
      blocks, stop = _map(lambda r: r.reshape(outer, n // length, length), rows), 16
    else:
      blocks, stop = _map(lambda r: r.reshape(outer, n // length, length, inner), rows), 1
    size = length
    while size > stop and (self.overlap or size % 2 == 0):
      half = (size + 1) // 2
      low, high = _slice(blocks, 0, half, 2), _slice(blocks, size - half, size, 2)
      blocks, size, leaf = self.combine(_apply(leaf, low), _apply(leaf, high)), half, _identity
    out = _apply(leaf, blocks)
    if size > 1:
      out = self.reduced(out, (2,))
    return out.reshape(outer, n // length, inner)


def _identity(k: jax.Array) -> jax.Array:
  return k


def _shape(rows: Parts | jax.Array) -> tuple[int, ...]:
  return (rows[0] if isinstance(rows, tuple) else rows).shape


def _map(fn: Callable[[jax.Array], jax.Array], rows: Parts | jax.Array) -> Parts | jax.Array:
  return tuple(fn(r) for r in rows) if isinstance(rows, tuple) else fn(rows)


def _slice(rows: Parts | jax.Array, start: int, stop: int, axis: int) -> Parts | jax.Array:
  return _map(functools.partial(lax.slice_in_dim, start_index=start, limit_index=stop, axis=axis), rows)


def _apply(leaf: Callable[..., jax.Array], rows: Parts | jax.Array) -> jax.Array:
  return leaf(*rows) if isinstance(rows, tuple) else leaf(rows)


def peak_position(
  x: jax.Array, axes: tuple[int, ...], key: Callable[[jax.Array], jax.Array], *, last: bool
) -> jax.Array:
  """On one CPU device: the first (``last``: final) flat index over the contiguous ``axes`` (removed) at which
  the integer ``key(x)`` is largest: argmin/argmax.

  Where every row's block of ``length`` elements is small enough to read again alone (``_GATHERED_BYTES``):
  one pass over the input, its blocks' largest keys (:func:`_block_length`, a small fraction of it), the
  largest of those, the first (final) block that holds it, and in that block, read again alone, the first
  (final) element that does. Otherwise two passes of the halving over the whole axis: the largest key, then
  the first (final) position that holds it, the second pass in other blocks than the first (XLA would
  otherwise compute the keys of both passes once and write them out whole, to read them twice).
  """
  shape = x.shape
  first, end = axes[0], axes[-1] + 1
  outer, n, inner = math.prod(shape[:first]), math.prod(shape[first:end]), math.prod(shape[end:])
  out_shape = tuple(size for d, size in enumerate(shape) if d not in axes)
  rows = x.reshape(outer, n, inner)
  peak = _Reduction(key, jnp.maximum, jnp.max, False)
  length = _block_length(n, inner, True, False)
  if length is None or outer * length * inner * 4 > _GATHERED_BYTES:
    best = peak.halved((rows,), (1,))
    position = lax.broadcasted_iota(np.int32, rows.shape, 1)
    parts = (rows, position, jnp.broadcast_to(best, rows.shape))
    return _first_holding(parts, key, n, last, longest=64).reshape(out_shape)
  blocks = peak._halve_blocks(rows, length, key)  # (outer, n / length, inner): each block's largest key
  count = n // length
  # XLA's reductions of the few blocks' keys: the keys written out once, where halvings here would each take in
  # part of the stage before them, which would write the input's first halves out for both to read.
  best = jnp.max(blocks, 1, keepdims=True)
  block_position = lax.broadcasted_iota(np.int32, blocks.shape, 1)
  chosen_blocks = jnp.where(blocks == best, block_position, np.int32(-1 if last else count))
  which = (jnp.max if last else jnp.min)(chosen_blocks, 1, keepdims=True)
  chosen = jnp.broadcast_to(which[:, :, None, :], (outer, 1, length, inner))
  keys = key(jnp.take_along_axis(rows.reshape(outer, count, length, inner), chosen, axis=1)[:, 0])
  within = lax.broadcasted_iota(np.int32, keys.shape, 1)
  missing = np.int32(-1 if last else length)
  inside = (jnp.max if last else jnp.min)(jnp.where(keys == best, within, missing), 1)
  return (which[:, 0] * np.int32(length) + inside).reshape(out_shape)


# The most that argmin/argmax read again of the blocks that hold the peak (one block a row): 256 KiB of keys.
_GATHERED_BYTES = 1 << 18


def _first_holding(parts: Parts, key: Callable[..., jax.Array], n: int, last: bool, longest: int = 128) -> jax.Array:
  """(outer, 1, inner): the first (``last``: final) position along axis 1 of ``parts = (values, positions,
  best)`` (each (outer, n, inner), ``best`` broadcast) where ``key(values)`` is ``best``."""
  missing = np.int32(-1 if last else n)

  def candidate(values: jax.Array, position: jax.Array, best: jax.Array) -> jax.Array:
    return jnp.where(key(values) == best, position, missing)

  combine, reduce = (jnp.maximum, jnp.max) if last else (jnp.minimum, jnp.min)
  return _Reduction(candidate, combine, reduce, True, longest).halved(parts, (1,))


def _block_length(n: int, inner: int, first: bool, shared_input: bool, longest: int = 128) -> int | None:
  """The length of the blocks of the reduced axis (``n`` long, ``inner`` elements apart) that one fused loop halves.

  XLA:CPU fuses a chain of elementwise halvings from its end, each loop taking producers in until one of them
  would be computed more than 15 times (once for every slice that reads it). A block halved to one element in
  ``L`` halvings reads its input through ``2**L`` slices, so a stage of 16 (or 9 to 15, halves overlapping)
  elements is a loop of its own: it cannot take in the stage before it, whose loop therefore writes a
  sixteenth of what it reads. Along the minor axis (``inner == 1``) a stage halves ``longest`` (128; down to
  32) consecutive elements down to 16, which it reduces: 1/128. The ``first`` stage reads the input through
  the keys: where the keys read one array computed over the whole input (``shared_input``: a bitcast, a
  broadcast), that array may be read through at most 15 slices, so blocks of 8 (1/8). ``None``: no such length
  divides ``n`` (the plain halving takes the rest).
  """
  if inner == 1:
    lengths = range(longest, 31, -1)
  else:
    lengths = range(8, 4, -1) if first and shared_input else range(16, 8, -1)
  return next((length for length in lengths if n % length == 0 and n > length), None)


# Float types whose slices XLA:CPU moves as they are (a NaN's payload kept).
_SLICED_AS_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _tree_max_of_bits(x: jax.Array, axes: tuple[int, ...], key: Callable[[jax.Array], jax.Array]) -> jax.Array:
  """:func:`_tree_max` of ``key(bits)``, ``bits`` the float ``x``'s bits as a signed integer of its width.

  float16/32/64 are sliced as they are and each slice made bits where it is read: XLA:CPU fuses that into
  the halvings at every size, where a bitcast of the whole input read through many slices is written out
  once it is large. Other types are made bits first: XLA:CPU may carry a bfloat16 or float8 slice through
  float32, which quiets a signalling NaN.
  """
  dtype = np.dtype(x.dtype)
  idt = np.dtype(f"int{rank_keys.layout(dtype).width}")
  if dtype in _SLICED_AS_FLOATS:
    return tree_max(x, axes, lambda s: key(lax.bitcast_convert_type(s, idt)))
  return tree_max(lax.bitcast_convert_type(x, idt), axes, key, shared_input=True)


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
  best = tree_max(key, axes, lambda k: k, shared_input=True)
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
  One pass over the input (:func:`rank_keys.ieee_maximum_key`, reduced by :func:`tree_max`); a second one only where a
  NaN of the reversed sign wins (:func:`_largest_nan_fix`).
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


def trailing(x: jax.Array, axes: tuple[int, ...]) -> bool:
  """Whether ``axes`` are the trailing axes of ``x`` (where :func:`tree` beats XLA:CPU's integer reduction)."""
  return bool(axes) and axes == tuple(range(x.ndim - len(axes), x.ndim))


def _integer_extreme(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """MAX/MIN of integers: the compiled CPU kernel where it runs (:func:`_by_kernel`), else the composition."""
  return _by_kernel(x, axes, find_max, _integer_composition)


def _integer_composition(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """MAX/MIN of integers in XLA; 4- and 2-bit ones reduced as 8-bit integers (XLA:CPU has no all-reduce for them).

  8-bit integers as 16-bit ones (:func:`narrow_integers.widened`), by the halving (:func:`tree`) over any axes it
  takes, each half widened where it is read (about as fast as XLA:CPU's own 8-bit reduction, YNNPACK's, which
  would take in the caller's arithmetic and lose its wrap: :mod:`narrow_integers`), by XLA's reduction of the
  widened values elsewhere. Wider ones by XLA's own reduction over leading axes, where it is the faster one, and by
  the halving over trailing axes.
  """
  wide = value_bits.to_bits(x)
  combine, reduce = (jnp.maximum, jnp.max) if find_max else (jnp.minimum, jnp.min)
  if narrow_integers.is_narrow(np.dtype(wide.dtype)):
    out = tree(wide, axes, narrow_integers.widened, combine, reduce).astype(wide.dtype)
  elif trailing(wide, axes):
    out = tree(wide, axes, lambda k: k, combine, reduce)
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

  if not shardings.blockwise(x, axes):
    return plain(x)

  def one_device(x: jax.Array) -> jax.Array:
    def key(values: jax.Array, extreme: jax.Array) -> jax.Array:
      return _hits(values, extreme).astype(np.int32)

    total = functools.partial(jnp.sum, dtype=np.int32)
    return _Reduction(key, jnp.add, total, True).halved((x, jnp.broadcast_to(out, x.shape)), axes)

  def cpu(x: jax.Array) -> jax.Array:
    return shardings.by_program_devices(x, one_device=one_device, several=plain)

  return platform.branch(x, cpu=cpu, default=plain)


# The compiled CPU kernel (csrc/cpu_reduce_extreme.cc) --------------------------------------------------------------

# The types the kernel reduces (the others, float8, float4 and 4- and 2-bit integers, keep the composition).
KERNEL_TYPES = frozenset(
  np.dtype(t)
  for t in (
    jnp.float16,
    jnp.bfloat16,
    jnp.float32,
    jnp.float64,
    jnp.int8,
    jnp.int16,
    jnp.int32,
    jnp.int64,
    jnp.uint8,
    jnp.uint16,
    jnp.uint32,
    jnp.uint64,
  )
)
Composition = Callable[[jax.Array, tuple[int, ...], bool], jax.Array]
# Many short rows cost the kernel a fold of its vector lanes each (10x jnp.max at 65536 rows of 16 float32):
# rows under 64 elements keep the composition, unless the whole input is small (256 KiB), where the kernel's
# single call beats XLA's fixed costs (0.2x jnp.max at 256 rows of 8).
_KERNEL_SHORTEST_ROW = 64
_KERNEL_ANY_ROW_BYTES = 1 << 18


def _by_kernel(x: jax.Array, axes: tuple[int, ...], find_max: bool, composition: Composition) -> jax.Array:
  """MAX/MIN keeping dims: on CPU, in a program of one device, the compiled kernel (a custom call that reads the
  input once on every core and writes the result, with scratch of its own only where it splits the reduced axis,
  bounded by the thread count: docs/cpu_kernel.rst; one kernel for XLA to compile),
  where the library is loaded and the program is not being exported; ``composition`` everywhere else, and as
  the kernel's own lowering where it cannot run. Both give the same bits.
  """
  chosen = np.dtype(x.dtype) in KERNEL_TYPES and platform.current().cpu_kernel
  if not chosen or not shardings.blockwise(x, axes):
    return composition(x, axes, find_max)
  first, end = axes[0], axes[-1] + 1
  rows: tuple[int, ...] = (math.prod(x.shape[:first]), math.prod(x.shape[first:end]), math.prod(x.shape[end:]))
  if rows[1] < _KERNEL_SHORTEST_ROW and rows[2] == 1 and x.size * x.dtype.itemsize >= _KERNEL_ANY_ROW_BYTES:
    return composition(x, axes, find_max)
  if rows[2] == 1:
    rows = rows[:2]  # no size-1 axis: XLA would copy the operand into the layout a custom call expects

  def fallback(rows: jax.Array) -> jax.Array:
    return composition(rows, (1,), find_max)[:, 0]

  def kernel(x: jax.Array) -> jax.Array:
    out = _kernel_p.bind(x.reshape(rows), find_max=find_max, fallback=fallback)
    return out.reshape(axes_lib.reduced_shape(x.shape, axes))

  def plain(x: jax.Array) -> jax.Array:
    return composition(x, axes, find_max)

  def cpu(x: jax.Array) -> jax.Array:
    return shardings.by_program_devices(x, one_device=kernel, several=plain)

  return platform.branch(x, cpu=cpu, default=plain)


_kernel_p = core.Primitive("dmljax_cpu_reduce_extreme")


@_kernel_p.def_impl
def _kernel_impl(rows: jax.Array, *, find_max: bool, fallback: Callable[..., Any]) -> jax.Array:
  """Eagerly (``jax.disable_jit``): the composition, op by op."""
  del find_max
  return fallback(rows)


@_kernel_p.def_abstract_eval
def _kernel_abstract_eval(rows: Any, **_: Any) -> Any:
  """(outer, n, inner) -> (outer, inner); (outer, n) -> (outer,)."""
  return rows.update(shape=(rows.shape[0], *rows.shape[2:]), weak_type=False)


def _kernel_fallback_lowering(ctx: Any, rows: Any, *, find_max: bool, fallback: Callable[..., Any]) -> Any:
  del find_max
  return mlir.lower_fun(fallback, multiple_results=False)(ctx, rows)


def _kernel_cpu_lowering(ctx: Any, rows: Any, *, find_max: bool, fallback: Callable[..., Any]) -> Any:
  # An FFI target is no stable custom call for jax.export: an exported program holds the composition.
  if row_kernel.exporting(ctx) or not cpu_kernel_library.available():
    return _kernel_fallback_lowering(ctx, rows, find_max=find_max, fallback=fallback)
  return jax.ffi.ffi_lowering(cpu_kernel_library.REDUCE_EXTREME_TARGET)(ctx, rows, find_max=bool(find_max))


mlir.register_lowering(_kernel_p, _kernel_fallback_lowering)
mlir.register_lowering(_kernel_p, _kernel_cpu_lowering, platform="cpu")


def _kernel_batched(args: Any, dims: Any, **params: Any) -> tuple[jax.Array, int]:
  """A batch is more rows: the mapped axis joins the kept leading ones."""
  (rows,), (dim,) = args, dims
  rows = jnp.moveaxis(rows, dim, 0)
  batch, outer, *rest = rows.shape
  out = _kernel_p.bind(rows.reshape(batch * outer, *rest), **params)
  return out.reshape(batch, outer, *rest[1:]), 0


batching.primitive_batchers[_kernel_p] = _kernel_batched
