"""Staged selections on integer rank keys, which avoid one selection over the whole row.

* :func:`chunked`: the ``k`` chunks with the largest maxima, then the best ``k`` of their elements.
  On XLA:CPU both stages are ``lax.top_k`` on the total-order float view (its fast path);
  :func:`accelerator_chunked` makes them selections of integer keys, which XLA compiles for GPUs and
  TPUs to sorts of the chunk maxima and of the candidates only, never of the whole row: one pass over
  the row, then sorts of ``n / chunk + k * chunk`` elements in all.
* :func:`extracted`: ``k`` rounds of (max, first index of the max), for ``k <= 2`` on short rows.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import rank_keys
from dmljax._src.strategies import sort
from dmljax._src.strategies.case import Case, gathered

KeySelection = Callable[[jax.Array, int], jax.Array]


def chunked(key: jax.Array, k: int, chunk: int, select: KeySelection) -> jax.Array:
  """Exact two-stage selection: the best ``k`` chunks by their maxima, then the best ``k`` of their keys.

  In the strict order "larger key, then lower index" every top-``k`` element lies in a chunk whose
  maximum (its first largest key) is itself in the top ``k``, so the ``k`` chunks with the largest
  maxima (ties: lower chunk, hence lower index, first) hold them all. Candidates are laid out in
  ascending index order, so the second selection breaks ties by index as the first would.
  ``select(key, k)`` is the selection both stages run.
  """
  n = key.shape[-1]
  chunks = -(-n // chunk)
  if chunks * chunk != n:
    # Padding ranks last: the smallest key, at indices above every real element.
    pad = [(0, 0)] * (key.ndim - 1) + [(0, chunks * chunk - n)]
    key = jnp.pad(key, pad, constant_values=np.iinfo(key.dtype).min)
  blocks = key.reshape(*key.shape[:-1], chunks, chunk)
  picked = jnp.sort(select(jnp.max(blocks, axis=-1), k), axis=-1)
  candidates = jnp.take_along_axis(blocks, picked[..., None], axis=-2, mode="promise_in_bounds")
  position = select(candidates.reshape(*key.shape[:-1], k * chunk), k)
  block = jnp.take_along_axis(picked, position // chunk, axis=-1, mode="promise_in_bounds")
  return block * np.array(chunk, block.dtype) + position % np.array(chunk, position.dtype)


def cpu_chunk(n: int, k: int) -> int | None:
  """The chunk length of the CPU two-stage selection, where it saves at least three quarters of the work.

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


MIN_ACCELERATOR_ROW = 1024


def accelerator_chunk(n: int, k: int) -> int | None:
  """The chunk length on GPUs and TPUs: the fewest elements sorted (``n / chunk + k * chunk``), at most half the row."""
  best = None
  for chunk in (8, 16, 32, 64, 128):
    chunks = -(-n // chunk)
    cost = chunks + k * chunk
    if chunks > k and 2 * cost <= n and (best is None or cost < best[0]):
      best = (cost, chunk)
  return None if best is None else best[1]


def extracted(key: jax.Array, k: int) -> jax.Array:
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


def accelerator_handles(case: Case) -> bool:
  """Rows with a chunk length that sorts at most half the row."""
  return accelerator_chunk(case.n, case.k) is not None


def accelerator_pays(case: Case) -> bool:
  return case.n >= MIN_ACCELERATOR_ROW


@gathered
def accelerator_chunked(x: jax.Array, case: Case) -> jax.Array:
  """:func:`chunked` with both stages integer-key selections, which GPUs and TPUs compile to sorts."""
  chunk = accelerator_chunk(case.n, case.k)
  if chunk is None:
    raise ValueError(f"chunked_sorts does not handle {case}")
  return chunked(rank_keys.selection_key(x, case.largest_first), case.k, chunk, sort.top_k_of_key)
