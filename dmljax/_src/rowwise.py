"""Row-wise functions under ``jax.vmap``: the predicate of every ``lax.cond`` inside stays one scalar.

The filters decide on their candidates first and fall back to whole-row work under :func:`jax.lax.cond` with one
scalar predicate ("does any row need it?"). Under a plain ``jax.vmap`` that predicate would become a batch of
predicates and the ``cond`` a ``select`` that runs both branches every time. A function wrapped here takes the
logits (``..., V``) first and per-row values after them, and is row-wise over every leading axis: nothing in it
depends on how many rows there are or where they lie, its per-row values (each of the rows' shape) broadcast
against the logits' rows, and every output has the shape of the broadcast rows. So its vmap rule calls it again
on the batched inputs:

* mapped logits: the mapped axis becomes one more leading row axis (the per-row values, small, are broadcast
  to it);
* shared logits (only per-row values mapped, e.g. a batch of keys or of ``k``): the per-row values keep the
  mapped axis as a leading axis the logits lack, and the function reads the one copy of the logits for every
  mapped value, never a copy per value.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


@functools.cache
def _batched(fn: Callable[..., Any], static: tuple[tuple[str, Any], ...]) -> Callable[..., Any]:
  @jax.custom_batching.custom_vmap
  def call(logits: jax.Array, *values: Any) -> Any:
    return fn(logits, *values, **dict(static))

  @call.def_vmap
  def _rule(axis_size: int, in_batched: Any, logits: jax.Array, *values: Any) -> Any:
    logits_batched, *values_batched = in_batched
    if logits_batched:
      values = jax.tree.map(
        lambda a, batched: a if batched else jnp.broadcast_to(a, (axis_size, *jnp.shape(a))),
        values,
        tuple(values_batched),
      )
    out = call(logits, *values)
    return out, jax.tree.map(lambda _: True, out)

  return call


def call(fn: Callable[..., Any], logits: jax.Array, *values: Any, **static: Any) -> Any:
  """``fn(logits, *values, **static)``, with ``values`` per-row arrays (or ``None``) and ``static`` hashable."""
  return _batched(fn, tuple(sorted(static.items())))(logits, *values)
