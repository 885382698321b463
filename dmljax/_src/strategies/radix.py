"""Exact top-k of integer rank keys without sorting the whole row: radix select, compaction, a k-sort.

Built for accelerators, where XLA's own ``TopK`` kernels cover only float32 and
bfloat16 keys and every other key type becomes a sort of the whole row. No
platform's table picks it (:mod:`dispatch`: the staged selection with sorts of
the chunk maxima and candidates compiles to fewer launches and bytes, and the
Pallas kernel below is a Triton call, which ``jax.export`` does not serialize);
it is selectable by name (``platform.choosing(top_k="radix")``), exact on every
platform and tested on CPU.

For each row of ``n`` keys and a static ``k`` (``1 <= k <= n``):

1. **Radix select** finds ``t``, the ``k``-th largest key, most significant digit
   first. The keys are viewed as unsigned bit patterns whose order is the
   signed order (the sign bit flipped). A pass looks at one digit of ``bits``
   bits below the digits already fixed: among the keys whose fixed digits equal
   the prefix found so far, it counts how many have a digit ``>= d`` for every
   digit value ``d``. Those counts fall as ``d`` rises, so the digit of ``t`` is
   the largest ``d`` whose count still reaches ``r`` (the rank of ``t`` among the
   keys that match the prefix), and ``r`` drops by the count of digits above it.
   ``width / bits`` passes, each one reading the row once: no sort.
2. **Compaction**: every key ``> t`` is taken, and of the keys ``== t`` the first
   ``r`` in index order (a running count), ``k`` elements in all. Their indices
   are scattered, in index order, into ``k`` slots.
3. **Order**: only those ``k`` elements are sorted, by key descending then index
   ascending (the library's tie rule).

``k == 1`` is a maximum and the lowest index holding it (two reductions), and
``k == n`` keeps every element, so it is a sort of the row (what the output
order needs anyway).

The counting step exists twice: as plain ``jax.numpy`` (:func:`radix_threshold`,
any key width, 64-bit keys included) and as a Pallas kernel with a grid of one
program per row (:func:`pallas_radix_threshold`, 32-bit keys, written for the
Triton backend's rules: power-of-two blocks, only loads, elementwise operations
and reductions inside). ``interpret=True`` runs that kernel on any platform.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import platform, rank_keys
from dmljax._src.strategies.case import Case, gathered

# Digit width of one counting pass of the XLA composition; 32-bit keys take 8 passes of 16 counters.
RADIX_BITS = 4
# How the XLA composition counts digits: "compare" or "histogram" (see _digit_counts). Both are exact;
# which is faster, and at which RADIX_BITS, is for a GPU measurement. Read at trace time.
RADIX_COUNTING = "compare"
# Keys per loop step inside the Pallas kernel (a power of two, as Triton's blocks must be).
PALLAS_CHUNK = 512
# Warps per program of the Triton kernel (one program per row).
PALLAS_WARPS = 4


def _unsigned(key: jax.Array) -> jax.Array:
  """The key's bits with the sign bit flipped, as the unsigned type of its width: same order."""
  width = key.dtype.itemsize * 8
  udt = np.dtype(f"uint{width}")
  return lax.bitcast_convert_type(key, udt) ^ np.array(1 << (width - 1), udt)


def _digit_counts(bits: jax.Array, live: jax.Array, shift: int, radix_bits: int) -> jax.Array:
  """For every digit value ``d``: how many live keys have digit ``>= d`` at ``shift`` (last axis reduced).

  :data:`RADIX_COUNTING` ``"compare"``: one compare per key and digit value, summed (a fused
  reduction, ``2 ** radix_bits`` compares per key); ``"histogram"``: a scatter-add of each live key
  into its digit's counter, then a running sum over the ``2 ** radix_bits`` counters.
  """
  radix = 1 << radix_bits
  digit = (bits >> np.array(shift, bits.dtype)) & np.array(radix - 1, bits.dtype)
  if RADIX_COUNTING == "histogram":
    rows = int(np.prod(bits.shape[:-1], dtype=np.int64))
    n = bits.shape[-1]
    add = jax.vmap(lambda d, w: jnp.zeros((radix,), np.int32).at[d].add(w, mode="promise_in_bounds"))
    histogram = add(digit.astype(np.int32).reshape(rows, n), live.astype(np.int32).reshape(rows, n))
    at_least = jnp.flip(jnp.cumsum(jnp.flip(histogram, -1), axis=-1, dtype=np.int32), -1)
    return at_least.reshape(*bits.shape[:-1], radix)
  values = lax.broadcasted_iota(bits.dtype, (*bits.shape, radix), bits.ndim)
  hits = (digit[..., None] >= values) & live[..., None]
  return jnp.sum(hits, axis=-2, dtype=np.int32)


def _choose_digit(counts: jax.Array, rank: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The largest digit whose ``>=`` count reaches ``rank``, and the count of live keys above that digit.

  ``counts`` is non-increasing along its last axis and ``counts[..., 0] >= rank``, so the digit is
  the number of counts that reach ``rank``, minus one.
  """
  digit = jnp.sum(counts >= rank[..., None], axis=-1, dtype=np.int32) - 1
  above_values = lax.broadcasted_iota(np.dtype(np.int32), counts.shape, counts.ndim - 1)
  above = jnp.sum(jnp.where(above_values == digit[..., None] + 1, counts, 0), axis=-1, dtype=np.int32)
  return digit, above


def radix_threshold(key: jax.Array, k: int, radix_bits: int = RADIX_BITS) -> tuple[jax.Array, jax.Array]:
  """Per row: the ``k``-th largest key ``t`` and how many keys equal to ``t`` belong to the top ``k``.

  Plain ``jax.numpy``; ``key`` is int32 or int64 of shape ``(..., n)`` with ``1 <= k <= n``.
  Returns ``(t, r)`` of shape ``(...)``: ``t`` of the key's dtype, ``r`` int32 in ``[1, k]``.
  """
  bits = _unsigned(key)
  width = key.dtype.itemsize * 8
  if width % radix_bits:
    raise ValueError(f"radix_bits={radix_bits} must divide the key width {width}")
  prefix = jnp.zeros(key.shape[:-1], bits.dtype)
  rank = jnp.full(key.shape[:-1], k, np.int32)
  for shift in range(width - radix_bits, -1, -radix_bits):
    fixed = np.array(((1 << width) - 1) ^ ((1 << (shift + radix_bits)) - 1), bits.dtype)
    live = (bits & fixed) == prefix[..., None]
    digit, above = _choose_digit(_digit_counts(bits, live, shift, radix_bits), rank)
    prefix = prefix | (digit.astype(bits.dtype) << np.array(shift, bits.dtype))
    rank = rank - above
  sign = np.array(1 << (width - 1), bits.dtype)
  return lax.bitcast_convert_type(prefix ^ sign, key.dtype), rank


def _chunk_counts(
  key_ref: Any, chunk: int, shift: int, fixed: np.ndarray, prefix: jax.Array, radix: int, c: jax.Array, counts: Any
) -> Any:
  """One loop step of the kernel: the ``>=`` digit counts of keys ``[c * chunk, (c + 1) * chunk)``, added."""
  from jax.experimental import pallas as pl  # Pallas loads only when a kernel is traced

  bits = key_ref[pl.ds(c * chunk, chunk)] ^ _SIGN32
  live = (bits & fixed) == prefix
  digit = lax.shift_right_logical(bits, np.int32(shift)) & np.int32(radix - 1)
  values = lax.broadcasted_iota(np.dtype(np.int32), (chunk, radix), 1)
  hits = jnp.where((digit[:, None] >= values) & live[:, None], np.int32(1), np.int32(0))
  # An int32 sum, as the loop carry is: under x64 jnp.sum would widen it to int64.
  return counts + jnp.sum(hits, axis=0, dtype=np.int32)


_SIGN32 = np.int32(-(1 << 31))


def _threshold_kernel(
  key_ref: Any, threshold_ref: Any, rank_ref: Any, *, k: int, chunks: int, chunk: int, radix_bits: int
) -> None:
  """One row per program: :func:`radix_threshold` with the row read ``chunk`` keys at a time.

  32-bit keys stay int32 (no unsigned compares needed): the sign bit is flipped with an xor and
  digits come out with logical shifts, so every comparison is between small non-negative digits
  or exact bit patterns.
  """
  radix = 1 << radix_bits
  prefix = jnp.int32(0)
  rank = jnp.int32(k)
  for shift in range(32 - radix_bits, -1, -radix_bits):
    high = shift + radix_bits
    fixed = np.array(0 if high == 32 else (0xFFFFFFFF ^ ((1 << high) - 1)) - (1 << 32), np.int32)
    step = functools.partial(_chunk_counts, key_ref, chunk, shift, fixed, prefix, radix)
    counts = lax.fori_loop(0, chunks, step, jnp.zeros((radix,), np.int32))
    digit, above = _choose_digit(counts, rank)
    prefix = prefix | lax.shift_left(digit, np.int32(shift))
    rank = rank - above
  threshold_ref[0] = prefix ^ _SIGN32
  rank_ref[0] = rank


def pallas_radix_threshold(
  key: jax.Array, k: int, *, interpret: bool, radix_bits: int = RADIX_BITS, chunk: int = PALLAS_CHUNK
) -> tuple[jax.Array, jax.Array]:
  """:func:`radix_threshold` for int32 keys as a Pallas kernel (grid: one program per row).

  Rows are padded with the smallest key to a multiple of ``chunk``; padding lies above every real
  index and ranks last, so it can only tie with a threshold that the real keys reach first.
  """
  from jax.experimental import pallas as pl  # Pallas loads only when a kernel is traced
  from jax.experimental.pallas import triton as pltriton

  if key.dtype != np.int32:
    raise ValueError(f"the Pallas threshold takes int32 keys; got {key.dtype}")
  batch, n = key.shape[:-1], key.shape[-1]
  rows = int(np.prod(batch, dtype=np.int64))
  chunk = min(chunk, 1 << max(0, (n - 1).bit_length()))
  chunks = -(-n // chunk)
  flat = key.reshape(rows, n)
  if chunks * chunk != n:
    flat = jnp.pad(flat, ((0, 0), (0, chunks * chunk - n)), constant_values=np.iinfo(np.int32).min)
  kernel = functools.partial(_threshold_kernel, k=k, chunks=chunks, chunk=chunk, radix_bits=radix_bits)
  threshold, rank = pl.pallas_call(
    kernel,
    out_shape=(jax.ShapeDtypeStruct((rows,), np.int32), jax.ShapeDtypeStruct((rows,), np.int32)),
    grid=(rows,),
    in_specs=[pl.BlockSpec((None, chunks * chunk), lambda i: (i, 0))],
    out_specs=(pl.BlockSpec((1,), lambda i: (i,)), pl.BlockSpec((1,), lambda i: (i,))),
    interpret=interpret,
    compiler_params=pltriton.CompilerParams(num_warps=PALLAS_WARPS),
    name="dmljax_radix_threshold",
  )(flat)
  return threshold.reshape(batch), rank.reshape(batch)


def compact(key: jax.Array, threshold: jax.Array, rank: jax.Array, k: int) -> jax.Array:
  """Indices (int32, ascending) of the keys above ``threshold`` and of the first ``rank`` keys equal to it.

  Exactly ``k`` per row when ``(threshold, rank)`` come from a radix select with that ``k``.
  """
  n = key.shape[-1]
  t = threshold[..., None]
  equal = key == t
  taken = (key > t) | (equal & (jnp.cumsum(equal, axis=-1, dtype=np.int32) <= rank[..., None]))
  slot = jnp.where(taken, jnp.cumsum(taken, axis=-1, dtype=np.int32) - 1, np.int32(k))
  iota = lax.broadcasted_iota(np.dtype(np.int32), (n,), 0)
  rows = int(np.prod(key.shape[:-1], dtype=np.int64))
  # One scatter with the rows as a batch dimension: no row index is materialised per element.
  place = jax.vmap(lambda slots: jnp.zeros((k,), np.int32).at[slots].set(iota, mode="drop"))
  return place(slot.reshape(rows, n)).reshape(*key.shape[:-1], k)


def order_selected(key: jax.Array, indices: jax.Array) -> jax.Array:
  """``indices`` reordered by key descending, then index ascending: a sort of ``k`` elements only."""
  chosen = jnp.take_along_axis(key, indices, axis=-1, mode="promise_in_bounds")
  _, ordered = lax.sort((~chosen, indices), dimension=indices.ndim - 1, num_keys=2)
  return ordered


def _first_maximum(key: jax.Array) -> jax.Array:
  """``k == 1``: the lowest index of the row's largest key, shape ``(..., 1)``."""
  n = key.shape[-1]
  peak = jnp.max(key, axis=-1, keepdims=True)
  iota = lax.broadcasted_iota(np.dtype(np.int32), key.shape, key.ndim - 1)
  return jnp.min(jnp.where(key == peak, iota, np.int32(n)), axis=-1, keepdims=True)


def _whole_row(key: jax.Array) -> jax.Array:
  """``k == n``: every index, by key descending then index ascending."""
  iota = lax.broadcasted_iota(np.dtype(np.int32), key.shape, key.ndim - 1)
  return lax.sort((~key, iota), dimension=key.ndim - 1, num_keys=2)[1]


def radix_top_k(key: jax.Array, k: int, *, radix_bits: int = RADIX_BITS) -> jax.Array:
  """Indices (int32) of the ``k`` largest keys along the last axis, ties by lower index; XLA only."""
  n = key.shape[-1]
  if k == 1:
    return _first_maximum(key)
  if k == n:
    return _whole_row(key)
  threshold, rank = radix_threshold(key, k, radix_bits)
  return order_selected(key, compact(key, threshold, rank, k))


def pallas_radix_top_k(
  key: jax.Array, k: int, *, interpret: bool, radix_bits: int = RADIX_BITS, chunk: int = PALLAS_CHUNK
) -> jax.Array:
  """:func:`radix_top_k` with the counting passes in a Pallas kernel.

  The kernel runs on CUDA and ROCm (or anywhere with ``interpret``); 64-bit keys and other platforms
  use the XLA passes.
  """
  n = key.shape[-1]
  if k == 1:
    return _first_maximum(key)
  if k == n:
    return _whole_row(key)
  if key.dtype != np.int32:
    threshold, rank = radix_threshold(key, k, radix_bits)
  elif interpret:
    threshold, rank = pallas_radix_threshold(key, k, interpret=True, radix_bits=radix_bits, chunk=chunk)
  else:
    # The kernel is written for Triton: CUDA and ROCm compile it, other platforms count in XLA.
    def kernel(key: jax.Array) -> tuple[jax.Array, jax.Array]:
      return pallas_radix_threshold(key, k, interpret=False, radix_bits=radix_bits, chunk=chunk)

    threshold, rank = lax.platform_dependent(
      key, cuda=kernel, rocm=kernel, default=lambda key: radix_threshold(key, k, radix_bits)
    )
  return order_selected(key, compact(key, threshold, rank, k))


@gathered
def select(x: jax.Array, case: Case) -> jax.Array:
  """The XLA composition on the rank key."""
  return radix_top_k(rank_keys.selection_key(x, case.largest_first), case.k)


@gathered
def select_pallas(x: jax.Array, case: Case) -> jax.Array:
  """The counting passes as the Pallas kernel (interpret mode under ``platform.choosing(interpret=True)``)."""
  key = rank_keys.selection_key(x, case.largest_first)
  return pallas_radix_top_k(key, case.k, interpret=platform.current().interpret)
