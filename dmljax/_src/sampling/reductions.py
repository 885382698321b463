"""Row reductions that XLA:CPU fuses with what computes their input.

A plain ``jnp.sum`` or ``jnp.max`` over a computed row (a mask, masked weights) goes to XLA:CPU's library
reduction, which takes a materialized input: a whole-row temporary per pass, and 3-4x the time. A reduction
with two outputs, all used, is emitted as one loop with its producers fused in. So each row reduction here
reduces the even and the odd entries as two outputs and combines them: integer sums are unchanged; a float
sum is left to ``jnp.sum`` (see :func:`row_sum`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def _halves(x: jax.Array, neutral: int = 0) -> tuple[jax.Array, jax.Array]:
  odd = (lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1) & np.int32(1)) == 1
  fill = np.array(neutral, x.dtype)
  return jnp.where(odd, fill, x), jnp.where(odd, x, fill)


def row_sum(x: jax.Array) -> jax.Array:
  """The sum along the last axis (in ``x``'s type; booleans count as int32), in one fused pass.

  Floats take a plain ``jnp.sum``: a fused loop must keep their summation order and runs unvectorized, several
  times slower than the library's reduction of a materialized row.
  """
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.int32)
  if jnp.issubdtype(x.dtype, jnp.floating):
    return jnp.sum(x, axis=-1)
  even, odd = _halves(x)
  zero = np.array(0, x.dtype)
  a, b = lax.reduce((even, odd), (zero, zero), lambda p, q: (p[0] + q[0], p[1] + q[1]), (x.ndim - 1,))
  return a + b


def row_min(x: jax.Array) -> jax.Array:
  """The minimum along the last axis of an integer ``x``, in one fused pass (as :func:`row_sum`)."""
  top = np.iinfo(x.dtype).max
  even, odd = _halves(x, top)
  a, b = lax.reduce(
    (even, odd),
    (np.array(top, x.dtype),) * 2,
    lambda p, q: (jnp.minimum(p[0], q[0]), jnp.minimum(p[1], q[1])),
    (x.ndim - 1,),
  )
  return jnp.minimum(a, b)
