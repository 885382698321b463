"""Row-wise functions under ``jax.vmap``: the predicate of every ``lax.cond`` inside stays one scalar.

A function wrapped here decides on something cheap first and falls back to more work under :func:`jax.lax.cond`
with one scalar predicate ("does any row need it?"): the sampling filters decide on their candidates and fall
back to whole-row work; REDUCE's MAX/MIN fixes the rows where a NaN of the reversed sign won. Under a plain
``jax.vmap`` that predicate would become a batch of predicates and the ``cond`` a ``select`` that runs both
branches every time. A function wrapped here works on every row alike, whatever the number of rows or where
they lie, so its vmap rule calls it again on the batched inputs, the mapped axis one more row axis and the
predicate still one scalar over all of them.

:func:`call`: the function takes the logits (``..., V``) first and per-row values after them, and is row-wise
over every leading axis: its per-row values (each of the rows' shape) broadcast against the logits' rows, and
every output has the shape of the broadcast rows.

* mapped logits: the mapped axis becomes one more leading row axis (the per-row values, small, are broadcast
  to it);
* shared logits (only per-row values mapped, e.g. a batch of keys or of ``k``): the per-row values keep the
  mapped axis as a leading axis the logits lack, and the function reads the one copy of the logits for every
  mapped value, never a copy per value.

:func:`call_reducing`: the function reduces ``axes`` of its first input (passed to it as ``axes=``), its other
inputs have that input's rank, and every output keeps the other axes. Under vmap every input is broadcast to
the mapped axis, which becomes a leading kept axis, and ``axes`` move up by one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def _broadcast(values: Any, batched: Any, axis_size: int) -> Any:
  return jax.tree.map(
    lambda a, is_batched: a if is_batched else jnp.broadcast_to(a, (axis_size, *jnp.shape(a))), values, batched
  )


@functools.cache
def _batched(
  fn: Callable[..., Any], static: tuple[tuple[str, Any], ...], reduced: tuple[int, ...] | None
) -> Callable[..., Any]:
  keywords = dict(static) if reduced is None else {**dict(static), "axes": reduced}

  @jax.custom_batching.custom_vmap
  def call(logits: jax.Array, *values: Any) -> Any:
    return fn(logits, *values, **keywords)

  @call.def_vmap
  def _rule(axis_size: int, in_batched: Any, logits: jax.Array, *values: Any) -> Any:
    logits_batched, *values_batched = in_batched
    if reduced is not None:  # every input gets the mapped axis as its leading one, a kept axis
      logits, values = _broadcast((logits, values), (logits_batched, tuple(values_batched)), axis_size)
      out = _batched(fn, static, tuple(a + 1 for a in reduced))(logits, *values)
    else:
      if logits_batched:
        values = _broadcast(values, tuple(values_batched), axis_size)
      out = call(logits, *values)
    return out, jax.tree.map(lambda _: True, out)

  return call


def call(fn: Callable[..., Any], logits: jax.Array, *values: Any, **static: Any) -> Any:
  """``fn(logits, *values, **static)``, with ``values`` per-row arrays (or ``None``) and ``static`` hashable."""
  return _batched(fn, tuple(sorted(static.items())), None)(logits, *values)


def call_reducing(fn: Callable[..., Any], x: jax.Array, *values: Any, axes: tuple[int, ...], **static: Any) -> Any:
  """``fn(x, *values, axes=axes, **static)``, ``fn`` reducing ``axes`` of ``x`` (``values``: arrays of its rank)."""
  return _batched(fn, tuple(sorted(static.items())), tuple(axes))(x, *values)
