"""Index arithmetic shared by GATHER_ND (clamping) and ONE_HOT (invalidating).

Indices may have any integer dtype, including uint64 values above 2**63 and
int8 values next to a depth of 1000, so every comparison against a static size
is decided in the index's own dtype (or statically, when the size does not fit
in it) before any conversion; only in-range values are widened.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import dtypes, symbolic


def position_dtype(index_dtype: np.dtype, size: Any) -> np.dtype:
  """int32, or int64 where the index type or the size needs (and x64 allows) it (a symbolic size: int32, as jax.lax
  indexes a symbolic dimension)."""
  large = symbolic.decide(lambda: size > np.iinfo(np.int32).max, otherwise=False)
  wide = np.dtype(index_dtype).itemsize == 8 or large
  return np.dtype(np.int64) if wide and dtypes.x64_enabled() else np.dtype(np.int32)


def wrap_and_clamp(v: jax.Array, size: Any) -> jax.Array:
  """GATHER_ND's index policy: a negative signed index counts from the end once, then clamps to ``[0, size-1]``."""
  dtype = np.dtype(v.dtype)
  work = position_dtype(dtype, size)
  info = jnp.iinfo(dtype)
  if not dtypes.is_signed_integer(dtype):
    if symbolic.is_symbolic(size):
      # Capped in its own type at what the position type holds first, so that the conversion cannot wrap.
      capped = jnp.minimum(v, np.array(min(int(info.max), int(np.iinfo(work).max)), dtype)).astype(work)
      return jnp.minimum(capped, symbolic.constant(size - 1, work))
    return jnp.minimum(v, np.array(min(size - 1, int(info.max)), dtype)).astype(work)
  wrapped = v.astype(work)
  wrapped = jnp.where(wrapped < 0, wrapped + symbolic.constant(size, work), wrapped)
  return jnp.clip(wrapped, np.array(0, work), symbolic.constant(size - 1, work))


def wrap_for_clipping_gather(v: jax.Array, size: Any) -> jax.Array:
  """:func:`wrap_and_clamp` without the final clamp, for a gather in ``CLIP`` mode, which clamps every start index.

  Signed indices only count from the end once (fewer operations per index); unsigned ones are still
  capped here, since a value above the position type's range would wrap around when converted.
  """
  dtype = np.dtype(v.dtype)
  if not dtypes.is_signed_integer(dtype):
    return wrap_and_clamp(v, size)
  work = position_dtype(dtype, size)
  wrapped = v.astype(work)
  return jnp.where(wrapped < 0, wrapped + symbolic.constant(size, work), wrapped)


def hot_positions(v: jax.Array, size: int, axis: int, *, from_end: bool) -> jax.Array:
  """ONE_HOT's index policy as a mask: ``v`` in ``[0, size)`` sets position ``v`` along the new ``axis`` of ``size``;
  with ``from_end`` (DirectML's rule), ``v`` in ``[-size, -1]`` sets ``v + size``; anything else no position.

  At most two comparisons per output element, with no per-index select, so XLA fuses the whole mask into
  the output's one pass (a per-index normalisation would be its own kernel). The comparisons are exact in
  the position type: a signed ``v`` widened to it (``v + size`` may wrap only for ``v`` far above ``size``,
  and then lands below 0, where no position is); an unsigned ``v`` is compared in its own type, never
  offset (a huge value must not wrap around onto a position).
  """
  dtype = np.dtype(v.dtype)
  shape = (*v.shape[:axis], size, *v.shape[axis + 1 :])
  if not dtypes.is_signed_integer(dtype):
    if size - 1 > jnp.iinfo(dtype).max:
      v = v.astype(position_dtype(dtype, size))
    return lax.broadcasted_iota(v.dtype, shape, axis) == v
  work = position_dtype(dtype, size)
  wide = v.astype(work)
  iota = lax.broadcasted_iota(work, shape, axis)
  if not from_end:
    return iota == wide
  return (iota == wide) | (iota == wide + np.array(size, work))


def take_along_last_axis(x: jax.Array, indices: jax.Array) -> jax.Array:
  """``x`` at ``indices`` (in bounds, of ``x``'s leading shape) along its last axis: ``jnp.take_along_axis(x,
  indices, -1, mode="promise_in_bounds")``.

  Along an axis of 2**31 elements or more, as a gather of the indices as they are: ``jnp.take_along_axis`` converts
  the indices into such an axis to int64, which needs x64 (a warning without it), where int32 and uint32 indices
  hold every position they can be given.
  """
  if symbolic.decide(lambda: x.shape[-1] <= np.iinfo(np.int32).max, otherwise=True):
    return jnp.take_along_axis(x, indices, axis=-1, mode="promise_in_bounds")
  rank = x.ndim
  batch = tuple(range(rank - 1))
  numbers = lax.GatherDimensionNumbers(
    offset_dims=(),
    collapsed_slice_dims=(rank - 1,),
    start_index_map=(rank - 1,),
    operand_batching_dims=batch,
    start_indices_batching_dims=batch,
  )
  return lax.gather(
    x, indices[..., None], numbers, slice_sizes=(1,) * rank, mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS
  )


def whole_numbers(v: jax.Array) -> jax.Array:
  """Float or complex indices as signed integers: a whole real number stays itself, anything else (a fraction, a
  non-zero imaginary part, NaN, inf, a magnitude of 2**31, or 2**63 for float64) becomes the type's minimum,
  which sets no position under either ONE_HOT rule. ``jax.nn.one_hot`` likewise sets a position only where the
  index equals it."""
  real = jnp.real(v)
  if np.dtype(real.dtype).itemsize < 4:
    real = real.astype(np.float32)  # every value of a narrower float, and its whole numbers, are exact in float32
  out = np.dtype(np.int64) if np.dtype(real.dtype).itemsize == 8 else np.dtype(np.int32)
  bound = np.array(2.0 ** (out.itemsize * 8 - 1), real.dtype)
  whole = (real == jnp.floor(real)) & (jnp.abs(real) < bound)
  if dtypes.is_complex(v.dtype):
    whole &= jnp.imag(v) == 0
  return jnp.where(whole, real, -bound).astype(out)
