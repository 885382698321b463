"""A kernel strategy as a primitive over a matrix of rows: what the one-pass (CUDA) and CPU kernels share.

Each kernel selects the ``k`` first elements of every row of a 2-D operand, and has a lowering rule that
decides, when the program is lowered, whether the kernel runs or the selection the dispatch table hands the
strategy does (an exported program, a platform the kernel is not for). This module gives such a primitive its
evaluation rule, its abstract evaluation (values and int32 indices of ``(rows, k)``), its vmap rule (a batch is
more rows), and the strategy's ``select``, which flattens any leading axes into rows.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import batching

from dmljax._src.strategies.case import Case, Selected


def exporting(ctx: Any) -> bool:
  """Whether the program is being lowered for ``jax.export`` (assumed so where JAX does not say)."""
  return bool(getattr(getattr(ctx.module_context, "lowering_parameters", None), "for_export", True))


def primitive(name: str) -> Primitive:
  """A multiple-result primitive of a rows matrix and a static ``k`` (among its params), with its rules but the
  lowerings, which each kernel registers."""
  selection_p = Primitive(name)
  selection_p.multiple_results = True

  @selection_p.def_impl
  def _impl(rows: jax.Array, **params: Any) -> Any:
    return jax.jit(functools.partial(selection_p.bind, **params))(rows)

  @selection_p.def_abstract_eval
  def _abstract_eval(aval: Any, *, k: int, **params: Any) -> list[Any]:
    del params
    shape = (aval.shape[0], k)
    return [
      aval.update(shape=shape, weak_type=False),
      aval.update(shape=shape, dtype=np.dtype(np.int32), weak_type=False),
    ]

  def _batched(args: Any, dims: Any, **params: Any) -> tuple[Any, tuple[int, int]]:
    (rows,), (dim,) = args, dims
    rows = jnp.moveaxis(rows, dim, 0)
    batch, count, n = rows.shape
    values, indices = selection_p.bind(rows.reshape(batch * count, n), **params)
    k = params["k"]
    return (values.reshape(batch, count, k), indices.reshape(batch, count, k)), (0, 0)

  batching.primitive_batchers[selection_p] = _batched
  return selection_p


def select_rows(selection_p: Primitive, x: jax.Array, case: Case, **params: Any) -> Selected:
  """``selection_p`` on every row of ``x`` (any leading axes flattened into rows; no rows, no call)."""
  lead = x.shape[:-1]
  count = math.prod(lead)
  if count == 0:
    return jnp.zeros((*lead, case.k), x.dtype), jnp.zeros((*lead, case.k), np.int32)
  values, indices = selection_p.bind(x.reshape(count, case.n), k=case.k, largest_first=case.largest_first, **params)
  return values.reshape(*lead, case.k), indices.reshape(*lead, case.k)
