"""Row-wise functions under ``jax.vmap``: the mapped axis becomes one more leading (row) axis.

The filters decide on their candidates first and fall back to a whole-row search under :func:`jax.lax.cond`
with one scalar predicate ("does any row need it?"). Under a plain ``jax.vmap`` that predicate would become
a batch of predicates and the ``cond`` a ``select`` that runs both branches every time. Every function
wrapped here is row-wise over all its inputs' leading axes (nothing in it depends on how many rows there are
or where they lie, beyond what its inputs say), so its vmap rule simply calls it on the batched inputs: the
predicate stays one scalar over every row of every mapped instance.
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
  def call(*args: Any) -> Any:
    return fn(*args, **dict(static))

  @call.def_vmap
  def _rule(axis_size: int, in_batched: Any, *args: Any) -> Any:
    args = jax.tree.map(
      lambda a, batched: a if batched else jnp.broadcast_to(a, (axis_size, *jnp.shape(a))), args, tuple(in_batched)
    )
    out = call(*args)
    return out, jax.tree.map(lambda _: True, out)

  return call


def call(fn: Callable[..., Any], *args: Any, **static: Any) -> Any:
  """``fn(*args, **static)``, with ``args`` arrays (or ``None``) whose leading axes are rows, ``static`` hashable."""
  return _batched(fn, tuple(sorted(static.items())))(*args)
