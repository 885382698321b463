"""Differentiation helpers shared by the operators (docs/semantics.rst, "Differentiation").

Selections (GATHER_ND, ONE_HOT) are linear in their floating input, and their
transposes are sums: a scatter-add over duplicate indices, a sum over every
position that holds OnValue or OffValue. Left to JAX, a float16 or bfloat16
input would accumulate those sums in its own type (a float16 running sum of
ones stops growing at 2048). :func:`linear_in_float32` keeps the forward pass
exactly as it is and runs the tangent map, and so its transpose, in float32.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from dmljax._src import dtypes


def accumulation_dtype(dtype: Any) -> np.dtype:
  """float32 for floating types narrower than 32 bits, the type itself otherwise."""
  dtype = np.dtype(dtype)
  return np.dtype(np.float32) if dtypes.is_float(dtype) and dtype.itemsize < 4 else dtype


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _linear(fn: Callable[..., jax.Array], x: jax.Array, *aux: jax.Array) -> jax.Array:
  return fn(x, *aux)


@_linear.defjvp
def _linear_jvp(
  fn: Callable[..., jax.Array], primals: tuple[jax.Array, ...], tangents: tuple[Any, ...]
) -> tuple[jax.Array, jax.Array]:
  x, *aux = primals
  y = _linear(fn, x, *aux)
  t = tangents[0].astype(accumulation_dtype(x.dtype))
  return y, _linear(fn, t, *aux).astype(y.dtype)


def linear_in_float32(fn: Callable[..., jax.Array], x: jax.Array, *aux: jax.Array) -> jax.Array:
  """``fn(x, *aux)``, for ``fn`` linear in ``x``, with its tangent map run in float32 for narrow floats.

  The value is ``fn(x, *aux)`` exactly. The tangent is ``fn(t, *aux)`` with
  ``t`` widened to float32 (for float16 and bfloat16) and the result rounded
  once, so reverse mode accumulates cotangents in float32. ``aux`` (indices,
  masks) gets no derivative. Other dtypes call ``fn`` directly.
  """
  if accumulation_dtype(x.dtype) == np.dtype(x.dtype):
    return fn(x, *aux)
  return _linear(fn, x, *aux)
