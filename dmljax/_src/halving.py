"""The halving: dmljax's fused reduction on one CPU device, which REDUCE's MAX/MIN, its integer sums, the MAX/MIN
gradient's count and argmin/argmax's composition run on.

A reduced axis is halved with elementwise maxima (or minima, or wrapping sums), the keys computed where each half is
read, in blocks short enough for XLA:CPU to fuse each block's halvings into one vectorised loop (:func:`tree`,
:class:`Reduction`); argmin/argmax find the position of the peak the same way (:func:`peak_position`). Which route
a program takes (this one, a compiled kernel, XLA's own reduction for several devices) is :mod:`cpu_route`'s choice.
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
from dmljax._src import cpu_route, narrow_integers


def trailing(x: jax.Array, axes: tuple[int, ...]) -> bool:
  """Whether ``axes`` are the trailing axes of ``x`` (where :func:`tree` beats XLA:CPU's integer reduction)."""
  return bool(axes) and axes == tuple(range(x.ndim - len(axes), x.ndim))


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
  lowered (:func:`cpu_route.choose`: automatic axes are known only when XLA partitions the program),
  since halves of a split axis lie on different devices, where the halving would move the input (XLA's reduction
  moves partial results only).

  ``shared_input``: ``x`` is computed from the input by one operation over all of it (a bitcast, the keys): the
  first blocks read it through few enough slices for XLA to fuse it into their loop.

  Every maximum or minimum reduction of 8-bit keys handed to XLA here (the plain one and the halving's last)
  reduces them as 16-bit integers (:func:`narrow_integers.widened`): XLA:CPU's 8-bit one would take in the
  arithmetic that computed them (the caller's, or a key's own wrapping step) and lose its wrap.
  """

  reduction = Reduction(key, combine, reduce, shared_input)

  def plain(x: jax.Array) -> jax.Array:
    return reduction.reduced(key(x), axes)

  return cpu_route.choose(x, axes, default=plain, one_device=lambda x: reduction.halved((x,), axes))


Parts = tuple[jax.Array, ...]


class Reduction:
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
  peak = Reduction(key, jnp.maximum, jnp.max, False)
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
  return Reduction(candidate, combine, reduce, True, longest).halved(parts, (1,))


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
