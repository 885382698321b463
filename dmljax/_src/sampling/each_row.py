"""Whole-row work one row at a time, for the rows that need it: a row pays for its own work, not its batch's.

The filters decide most rows on their candidates; a few need work over their whole row (the row's total, the
search, the whole-row draw). :func:`each` runs that work in one ``lax.while_loop`` whose trip count is the number of
rows that need it, each pass reading its own row alone: a row decided on its candidates, a greedy row or a row whose
filters are off costs nothing, and a batch of 8 with one such row pays for that row's work. The rows are found once
(their positions compacted by a cumulative sum and a scatter over the batch, never over a row); each pass reads its
row with a dynamic slice (:class:`At`) and writes its results into the batch's arrays at its position.

Under ``jax.vmap`` the functions around it are row-wise (:mod:`dmljax._src.rowwise`): the mapped axis is one more
row axis and the trip count stays one scalar. Per-row values may have leading axes the logits lack (a parameter or a
key mapped over shared logits): every position reads its logits row from the one copy. Inside ``jax.shard_map`` the
loop's results are typed as varying as what it computes them from. With the vocabulary split over devices, a pass's
reductions cross devices as a few values of its one row.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import shardings, symbolic

Out = TypeVar("Out")


@dataclasses.dataclass(frozen=True)
class At:
  """One position of a batch of rows: reads the per-row values and the logits row there, each with a leading axis
  of 1 (a batch of one row, so that the batch's functions run on it unchanged)."""

  position: jax.Array  # int32 scalar: the flat (row-major) position in ``batch``
  batch: tuple[int, ...]

  def __call__(self, a: jax.Array | None, trailing: int = 0) -> Any:
    """``a`` (broadcastable to ``batch`` followed by its ``trailing`` axes) at this position: shape
    ``(1, *trailing axes)``; ``None`` stays ``None``."""
    if a is None:
      return None
    tail = tuple(a.shape[a.ndim - trailing :]) if trailing else ()
    flat = jnp.broadcast_to(a, (*self.batch, *tail)).reshape(-1, *tail)
    return lax.dynamic_slice_in_dim(flat, self.position, 1, 0)

  def row(self, logits: jax.Array) -> jax.Array:
    """The logits' row (shape ``(1, V)``) that this position's row broadcasts from, sliced from the logits as they
    are (a pass reshapes nothing of the batch's size)."""
    lead = logits.shape[:-1]
    count = math.prod(lead)
    index = jnp.broadcast_to(lax.iota(np.int32, count).reshape(lead), self.batch).reshape(-1)
    at = lax.dynamic_index_in_dim(index, self.position, 0, keepdims=False)
    if len(lead) == 1 or not symbolic.is_static(lead):  # (a symbolic batch's logits are sliced as a matrix)
      return lax.dynamic_slice_in_dim(logits.reshape(count, logits.shape[-1]), at, 1, 0)
    starts = []
    for size in reversed(lead):  # the flat row number unravelled, row-major
      starts.append(at % np.int32(size))
      at = at // np.int32(size)
    starts = [*reversed(starts), jnp.int32(0)]
    return lax.dynamic_slice(logits, starts, (*(1,) * len(lead), logits.shape[-1])).reshape(1, logits.shape[-1])


def each(flags: jax.Array, body: Callable[[At], Out], out: Out, *, name: str, like: tuple[Any, ...] = ()) -> Out:
  """``out`` (arrays of shape ``flags.shape`` followed by trailing axes) with, at every position where ``flags``
  holds, ``body``'s values for that position (each of the trailing shape, after a leading axis of 1).

  One ``lax.while_loop`` over the flagged positions, in row-major order: as many passes as flags are set, each
  running ``body`` once. ``like``: the arrays ``body`` computes from (the logits, per-row values), whose manual
  mesh axes its results vary along inside ``jax.shard_map``. ``name``: the loop's ``jax.named_scope`` (what the
  compiled-path reader, ``benchmarks/compiled/paths.py``, tells this call's loop from the others by).
  """
  batch = tuple(flags.shape)
  size = math.prod(batch)
  flat = flags.reshape(-1)
  count = jnp.sum(flat, dtype=jnp.int32)
  # Positions not flagged go to a slot past the end, which the scatter drops (a constant: ``size`` may be symbolic).
  slot = jnp.where(flat, jnp.cumsum(flat, dtype=jnp.int32) - np.int32(1), np.int32(np.iinfo(np.int32).max))
  order = jnp.zeros(size, jnp.int32).at[slot].set(lax.iota(np.int32, size), mode="drop")
  leaves, tree = jax.tree.flatten(out)
  leaves = [a.reshape(size, *a.shape[len(batch) :]) for a in leaves]
  leaves = [shardings.varying_as(a, flags, *like) for a in leaves]

  def step(state: tuple[jax.Array, list[jax.Array]]) -> tuple[jax.Array, list[jax.Array]]:
    i, acc = state
    position = lax.dynamic_index_in_dim(order, i, 0, keepdims=False)
    values = jax.tree.leaves(body(At(position, batch)))
    acc = [
      lax.dynamic_update_slice_in_dim(
        a, shardings.typed_like(jnp.reshape(v, (1, *a.shape[1:])).astype(a.dtype), a), position, 0
      )
      for a, v in zip(acc, values, strict=True)
    ]
    return i + np.int32(1), acc

  i0 = shardings.varying_as(jnp.int32(0), count)
  with jax.named_scope(name):
    _, leaves = lax.while_loop(lambda state: state[0] < count, step, (i0, leaves))
  return jax.tree.unflatten(tree, [a.reshape(*batch, *a.shape[1:]) for a in leaves])
