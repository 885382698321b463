"""The SPEC's value order as exact integer keys, shared by top-k and argmin/argmax.

SPEC §2/§3: NaN ranks above +inf and all NaNs are equal, -0.0 equals +0.0, and
integers are ordered exactly (no negation, so INT_MIN is safe). We map every
element to a signed integer *rank key* whose integer order is that value order;
equal values get equal keys, so index tie-breaks can be exact.

On CPU, XLA runs ``TopK`` as a fast partial sort only for float32; other types
fall back to a full sort. Its float comparator is the IEEE total order (sign-
magnitude bit order), so a 32-bit key bitcast to a float32 whose total order is
the key's order runs on the fast path with no loss of exactness.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import dtypes


def key_dtype(dtype: np.dtype) -> np.dtype:
  """int32 for types of up to 32 bits, int64 for 64-bit types."""
  return np.dtype(np.int64) if np.dtype(dtype).itemsize == 8 else np.dtype(np.int32)


def _flip_negative(bits: jax.Array) -> jax.Array:
  """Sign-magnitude bits <-> two's-complement order (an involution)."""
  width = bits.dtype.itemsize * 8
  magnitude = np.array((1 << (width - 1)) - 1, bits.dtype)
  return bits ^ (lax.shift_right_arithmetic(bits, np.array(width - 1, bits.dtype)) & magnitude)


def ascending_key(x: jax.Array) -> jax.Array:
  """A signed integer key, ordered as ``x`` in the SPEC's order (NaN largest, -0 == +0)."""
  dtype = np.dtype(x.dtype)
  kdt = key_dtype(dtype)
  if dtypes.is_float(dtype):
    work = np.dtype(np.float64) if kdt == np.int64 else np.dtype(np.float32)
    f = x.astype(work)
    f = jnp.where(f == 0, np.array(0, work), f)
    f = jnp.where(jnp.isnan(f), np.array(np.nan, work), f)
    return _flip_negative(lax.bitcast_convert_type(f, kdt))
  if dtype.itemsize < kdt.itemsize:
    return x.astype(kdt)
  if dtypes.is_signed_integer(dtype):
    return x
  # Unsigned of the key's width: flipping the top bit maps unsigned order onto signed order.
  top = np.array(1 << (kdt.itemsize * 8 - 1), dtype)
  return lax.bitcast_convert_type(x ^ top, kdt)


def descending_key(x: jax.Array) -> jax.Array:
  """The reverse order: bitwise not reverses a two's-complement order exactly."""
  return ~ascending_key(x)


def key_as_total_order_float(key: jax.Array) -> jax.Array:
  """The float of the key's width whose IEEE total order equals the key's order."""
  fdt = np.float64 if key.dtype.itemsize == 8 else np.float32
  return lax.bitcast_convert_type(_flip_negative(key), fdt)


def _cpu_top_k(key: jax.Array, k: int) -> jax.Array:
  """``lax.top_k`` on the key's float view, XLA:CPU's fast path; ties go to the lower index."""
  return lax.top_k(key_as_total_order_float(key), k)[1]


MIN_STAGED_SIZE = 1 << 14


def _chunk_size(n: int, k: int) -> int | None:
  """The chunk length of the two-stage selection, where it saves at least three quarters of the work.

  The work is roughly one cheap pass over the keys (a max per chunk, which XLA:CPU vectorises well
  for short chunks) plus partial sorts over ``n / chunk`` chunk maxima and ``k * chunk`` candidates,
  against a partial sort over all ``n`` keys for ``lax.top_k``.
  """
  best = None
  for chunk in (8, 16, 32):
    chunks = -(-n // chunk)
    cost = chunks + k * chunk
    if chunks > k and 4 * cost <= n and (best is None or cost < best[0]):
      best = (cost, chunk)
  return None if best is None else best[1]


def _top_k_chunked(key: jax.Array, k: int, chunk: int) -> jax.Array:
  """Exact two-stage selection: the best ``k`` chunks by their maxima, then the best ``k`` of their keys.

  In the strict order "larger key, then lower index" every top-``k`` element lies in a chunk whose
  maximum (its first largest key) is itself in the top ``k``, so the ``k`` chunks with the largest
  maxima (ties: lower chunk, hence lower index, first) hold them all. Candidates are laid out in
  ascending index order, so the second selection breaks ties by index as the first would.
  """
  n = key.shape[-1]
  chunks = -(-n // chunk)
  if chunks * chunk != n:
    # Padding ranks last: the smallest key, at indices above every real element.
    pad = [(0, 0)] * (key.ndim - 1) + [(0, chunks * chunk - n)]
    key = jnp.pad(key, pad, constant_values=np.iinfo(key.dtype).min)
  blocks = key.reshape(*key.shape[:-1], chunks, chunk)
  picked = jnp.sort(_cpu_top_k(jnp.max(blocks, axis=-1), k), axis=-1)
  candidates = jnp.take_along_axis(blocks, picked[..., None], axis=-2, mode="promise_in_bounds")
  position = _cpu_top_k(candidates.reshape(*key.shape[:-1], k * chunk), k)
  block = jnp.take_along_axis(picked, position // chunk, axis=-1, mode="promise_in_bounds")
  return block * np.array(chunk, block.dtype) + position % np.array(chunk, position.dtype)


def _top_k_extracted(key: jax.Array, k: int) -> jax.Array:
  """Selection by ``k`` rounds of (max, first index of the max), for very small ``k`` on short rows."""
  n = key.shape[-1]
  iota = lax.broadcasted_iota(np.dtype(np.int32), key.shape, key.ndim - 1)
  lowest = np.array(np.iinfo(key.dtype).min, key.dtype)
  taken = jnp.zeros(key.shape, bool)
  found = []
  for _ in range(k):
    live = jnp.where(taken, lowest, key)
    peak = jnp.max(live, axis=-1, keepdims=True)
    index = jnp.min(jnp.where((live == peak) & ~taken, iota, np.array(n, np.int32)), axis=-1, keepdims=True)
    found.append(index)
    taken = taken | (iota == index)
  return jnp.concatenate(found, axis=-1)


def cpu_top_k_by_key(key: jax.Array, k: int) -> jax.Array:
  """:func:`top_k_by_key` as compiled for XLA:CPU (small arrays: one ``lax.top_k``, the fewest kernels)."""
  n = key.shape[-1]
  if key.size < MIN_STAGED_SIZE:
    return _cpu_top_k(key, k)
  chunk = _chunk_size(n, k)
  if chunk is not None:
    return _top_k_chunked(key, k, chunk)
  if k <= 2 and n <= 4096:
    return _top_k_extracted(key, k)
  return _cpu_top_k(key, k)


# lax.top_k returns int32 indices; longer sequences take a sort (tests lower this to cover that path).
LAX_TOP_K_LARGEST_INDEX = int(np.iinfo(np.int32).max)


def top_k_by_key(key: jax.Array, k: int) -> jax.Array:
  """Indices of the ``k`` largest keys along the last axis, ties in ascending index order.

  ``lax.top_k`` breaks ties by lower index; on CPU the key goes through the float
  total-order view so XLA takes its fast float32 path, and long rows go through an
  exact two-stage selection (or ``k`` max passes for ``k <= 2`` on short rows) that
  avoids XLA:CPU's partial sort over the whole row. Indices are int32, except for
  rows longer than int32 can index, which take a stable sort instead.
  """
  size = key.shape[-1]
  if size - 1 > LAX_TOP_K_LARGEST_INDEX:
    # lax.top_k's indices are int32: a stable sort by the reversed key keeps ties in index order.
    position = np.dtype(np.int64) if dtypes.x64_enabled() else np.dtype(np.uint32)
    iota = lax.broadcasted_iota(position, key.shape, key.ndim - 1)
    _, order = lax.sort((~key, iota), dimension=key.ndim - 1, is_stable=True, num_keys=1)
    return lax.slice_in_dim(order, 0, k, axis=key.ndim - 1)

  return lax.platform_dependent(key, cpu=lambda key: cpu_top_k_by_key(key, k), default=lambda key: lax.top_k(key, k)[1])
