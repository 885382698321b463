"""Indices of the ``k`` largest rank keys along the last axis, per platform.

``lax.top_k`` breaks ties by the lower index, which is the library's tie rule
once values are rank keys (:mod:`rank_keys`). On CPU, XLA runs ``TopK`` as a
fast partial sort only for float32; other types fall back to a full sort. Its
float comparator is the IEEE total order (sign-magnitude bit order), so a
32-bit key bitcast to a float32 whose total order is the key's order runs on
the fast path with no loss of exactness. Long CPU rows go through an exact
two-stage selection instead.

Other platforms run ``lax.top_k`` on the keys. On GPUs, XLA's fast ``TopK``
kernel covers only float32 and bfloat16 operands, so int32 keys there take a
sort of the whole row; :mod:`radix_select` holds an exact selection that sorts
only the ``k`` selected elements. It is not used by default: no GPU measurement
says it is faster yet. :func:`set_gpu_selection` picks the algorithm of the
non-CPU branch for programs traced afterwards.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import dtypes, platform, radix_select, rank_keys
from dmljax._src.rank_keys import key_as_total_order_float


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


def _staged(shape: tuple[int, ...], k: int) -> str | None:
  """The staged selection :func:`cpu_top_k_by_key` runs on keys of ``shape``: chunked, extracted, or none."""
  n = shape[-1]
  if math.prod(shape) < MIN_STAGED_SIZE:
    return None
  if _chunk_size(n, k) is not None:
    return "chunked"
  if k <= 2 and n <= 4096:
    return "extracted"
  return None


def cpu_top_k_by_key(key: jax.Array, k: int) -> jax.Array:
  """:func:`top_k_by_key` as compiled for XLA:CPU (small arrays: one ``lax.top_k``, the fewest kernels)."""
  staged = _staged(key.shape, k)
  if staged == "chunked":
    chunk = _chunk_size(key.shape[-1], k)
    assert chunk is not None
    return _top_k_chunked(key, k, chunk)
  if staged == "extracted":
    return _top_k_extracted(key, k)
  return _cpu_top_k(key, k)


# lax.top_k returns int32 indices; longer sequences take a sort (tests lower this to cover that path).
LAX_TOP_K_LARGEST_INDEX = int(np.iinfo(np.int32).max)


def index_dtype(size: int) -> np.dtype:
  """The type of :func:`top_k_by_key`'s indices into sequences of ``size``: int32 where it can index them."""
  if size - 1 > LAX_TOP_K_LARGEST_INDEX:
    return np.dtype(np.int64) if dtypes.x64_enabled() else np.dtype(np.uint32)
  return np.dtype(np.int32)


def top_k_by_key(key: jax.Array, k: int) -> jax.Array:
  """Indices of the ``k`` largest keys along the last axis, ties in ascending index order.

  ``lax.top_k`` breaks ties by lower index; on CPU the key goes through the float
  total-order view so XLA takes its fast float32 path, and long rows go through an
  exact two-stage selection (or ``k`` max passes for ``k <= 2`` on short rows) that
  avoids XLA:CPU's partial sort over the whole row. Indices are int32, except for
  rows longer than int32 can index, which take a stable sort instead.
  """
  position = index_dtype(key.shape[-1])
  if position != np.int32:
    # lax.top_k's indices are int32: a stable sort by the reversed key keeps ties in index order.
    iota = lax.broadcasted_iota(position, key.shape, key.ndim - 1)
    _, order = lax.sort((~key, iota), dimension=key.ndim - 1, is_stable=True, num_keys=1)
    return lax.slice_in_dim(order, 0, k, axis=key.ndim - 1)

  return platform.branch(
    key, cpu=lambda key: cpu_top_k_by_key(key, k), default=lambda key: default_top_k_by_key(key, k)
  )


# Float rows at least this long stay on one lax.top_k below MAX_PLAIN_FLOAT_SIZE elements: with few rows
# the staged selection's extra passes cost more than they save (measured on 2 cores: (16, 2048) k=8
# and (4, 8192) k=50 staged took 1.2-1.3x the time of one lax.top_k; (16, 4096) k=8 took 0.8x).
MIN_PLAIN_FLOAT_ROW = 1024
MAX_PLAIN_FLOAT_SIZE = 1 << 16


def plain_float_path(shape: tuple[int, ...], k: int) -> bool:
  """Whether :func:`top_k_of_values` selects floats on the canonical float (on CPU) for an array of ``shape``.

  Where the rank key would not be staged either, and for few long rows below ``MAX_PLAIN_FLOAT_SIZE``.
  """
  size = math.prod(shape)
  return _staged(shape, k) is None or (size < MAX_PLAIN_FLOAT_SIZE and shape[-1] >= MIN_PLAIN_FLOAT_ROW)


def top_k_of_values(x: jax.Array, k: int, descending: bool) -> jax.Array:
  """Indices of the ``k`` first values along the last axis in dmljax's order, ties by ascending index.

  :func:`top_k_by_key` on the rank key (largest first, or smallest with ``descending`` false). For
  floats on CPU, where no staged selection runs or it would not pay (:func:`plain_float_path`), the
  selection skips the integer key: its float view (:func:`key_as_total_order_float`) is exactly the
  canonical float (-0.0 as +0.0, every NaN as the positive NaN), negated for the smallest first, since
  the key's two sign-magnitude flips cancel.
  That is about four operations per element instead of about twelve, which keeps XLA:CPU from
  splitting the pass over threads at small sizes, and one ``lax.top_k`` instead of a staged selection.
  """

  def by_key(x: jax.Array) -> jax.Array:
    key = rank_keys.ascending_key(x) if descending else rank_keys.descending_key(x)
    return top_k_by_key(key, k)

  if not dtypes.is_float(np.dtype(x.dtype)) or not plain_float_path(x.shape, k) or index_dtype(x.shape[-1]) != np.int32:
    return by_key(x)

  def cpu(x: jax.Array) -> jax.Array:
    view = rank_keys.canonical_float(x)
    return lax.top_k(view if descending else -view, k)[1]

  return platform.branch(x, cpu=cpu, default=by_key)


# The algorithm of top_k_by_key's non-CPU branch: "lax_top_k" (the default, XLA's TopK), "radix"
# (radix_select's XLA composition) or "radix_pallas" (its counting passes as a Triton kernel on CUDA
# and ROCm, the XLA ones elsewhere). Read at trace time; change it with set_gpu_selection, which also
# drops compiled programs so that they retrace.
GPU_SELECTIONS = ("lax_top_k", "radix", "radix_pallas")
GPU_SELECTION = "lax_top_k"
# Runs the Pallas kernel in interpret mode (tests force the GPU branch on CPU with it).
_PALLAS_INTERPRET = False


def set_gpu_selection(selection: str) -> str:
  """Sets :data:`GPU_SELECTION` (one of :data:`GPU_SELECTIONS`), clears JAX's caches, returns the old value."""
  global GPU_SELECTION
  if selection not in GPU_SELECTIONS:
    raise ValueError(f"GPU selection must be one of {GPU_SELECTIONS}; got {selection!r}")
  previous, GPU_SELECTION = GPU_SELECTION, selection
  if previous != selection:
    jax.clear_caches()
  return previous


def default_top_k_by_key(key: jax.Array, k: int) -> jax.Array:
  """:func:`top_k_by_key` off CPU (GPUs, TPUs), under :data:`GPU_SELECTION`."""
  if GPU_SELECTION == "radix":
    return radix_select.radix_top_k(key, k)
  if GPU_SELECTION == "radix_pallas":
    return radix_select.pallas_radix_top_k(key, k, interpret=_PALLAS_INTERPRET)
  return lax.top_k(key, k)[1]
