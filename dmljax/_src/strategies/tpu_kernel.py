"""TPU: XLA's TPU ``TopK`` on keys that every comparison orders as dmljax does; the values come back from the keys.

XLA compiles ``lax.top_k`` of a float32 or bfloat16 matrix with ``k`` up to 256 to a ``TopK`` custom
call for most shapes (compiled for a v5e, a few become sorts: ``(64, 32768)`` and ``(4, 128256)`` at
``k = 256``, ``(1024, 4096)`` at ``k = 64`` and up, a single row of 32000 at ``k`` of 50 or 64); in the
optimized HLO its comparator computation is XLA's total order (the operands bitcast to integers, negative
ones' magnitude bits flipped, compared as signed integers; ties to the lower index), and the key's
elementwise computation is fused into the call, so the row is read once. The TPU kernel is not public.
So the keys are ones on which the total order and the IEEE comparison agree (:mod:`kernel_keys`):
:func:`kernel_keys.ordinal` for types of up to 16 bits (exact under any comparison) and
:func:`kernel_keys.one_step_below` for float32 (exact unless the kernel flushed subnormal keys, which
would tie +-2**-126 with zero).

32-bit integers have 2**32 keys, more than any float32 comparison short of the total order tells
apart: for them this module uses the float32 whose total order is the key's order
(:func:`rank_keys.key_as_total_order_float`), exact as long as the kernel applies the comparator
XLA gives it.

Arrays of any rank are selected as matrices (a row per sequence): XLA's TPU compiler makes a ``TopK``
of rank-2 operands, and sorts whole rows of others.

The values: the ``TopK`` returns the ``k`` keys it selected, and a key gives back the one input it
came from wherever no other input has it (:func:`value`): every integer, and every float but the
classes its key merges, which dmljax's order makes equal (+0.0 and -0.0, every NaN; for float32 also
the subnormals, which its key lets act as zero). Only the slots holding one of those are read from the
input, bit for bit, by the DMA kernel of :mod:`tpu_fetch`: a gather would make XLA's TPU compiler copy
the whole input into VMEM first (or give no estimate). The kernel's copies are of 128 elements a slot
(16-bit types: 8 x 128, or every row of a matrix of fewer than 16), and XLA's estimate counts one for
every float slot, the case where every selected value is a zero or a NaN.

A Mosaic kernel cannot be partitioned by XLA, so where the program being lowered is split over devices
on automatic mesh axes, the selection keeps the input's rank (flattening it would lose its sharding), XLA's
partitioner splits the ``TopK`` of the keys as it splits native ``jax.lax.top_k`` (a ``TopK`` per shard, then
one over the shards' candidates), and those values are gathered with XLA only when some selected key merged
several inputs (:func:`_partitioned`: a ``lax.cond``; the gather from a split row is what crosses chips
beyond the candidates); inside ``shard_map``, on explicit axes and on one device, the kernel runs
(:func:`_one_device`). The choice is made when lowering, by a primitive.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import mlir

from dmljax._src import dtypes, platform, rank_keys, symbolic
from dmljax._src.strategies import kernel_keys, tpu_fetch
from dmljax._src.strategies.case import Case, Selected

MAX_K = 256
# Shorter rows are sorted (by XLA's TPU compiler too), and a sort can carry the values: :func:`sort.sorted_with_values`.
MIN_ROW = 256


def _fetches(dtype: np.dtype) -> bool:
  """Whether some values of ``dtype`` must be read from the input: a float type whose key merges several inputs
  (its two zeros, its NaNs; float32's subnormals)."""
  return dtypes.is_float(dtype) and rank_keys.layout(dtype).merges


def handles(case: Case) -> bool:
  """Types of up to 32 bits whose merged values, if any, the DMA kernel can read (16- and 32-bit ones).

  The float8 types with several zeros or NaNs (e4m3fn, e5m2, e4m3, e3m4) and float4_e2m1fn are left to the
  table's next rows; the ``fnuz`` types and float8_e8m0fnu, whose keys merge nothing, are handled.
  """
  width = rank_keys.layout(case.dtype).width
  return width <= 32 and (not _fetches(case.dtype) or tpu_fetch.handles(case.dtype))


def pays(case: Case) -> bool:
  """Where XLA's TPU compiler makes a TopK (larger ``k`` sort); shorter rows sort with their values instead."""
  return case.k <= MAX_K


def short_row(case: Case) -> bool:
  return case.n < MIN_ROW


def key(x: jax.Array, largest_first: bool) -> jax.Array:
  if kernel_keys.has_ordinal(x.dtype):
    return kernel_keys.ordinal(x, largest_first)
  if x.dtype == np.float32:
    return kernel_keys.one_step_below(x, largest_first)
  return rank_keys.key_as_total_order_float(rank_keys.selection_key(x, largest_first))


def value(keys: jax.Array, dtype: np.dtype, largest_first: bool) -> tuple[jax.Array, jax.Array]:
  """The inputs of type ``dtype`` whose :func:`key` is ``keys``, and where the key has no other input."""
  if kernel_keys.has_ordinal(dtype):
    return kernel_keys.ordinal_inverse(keys, dtype, largest_first)
  if dtype == np.float32:
    return kernel_keys.one_step_below_inverse(keys, largest_first)
  rank = rank_keys.key_of_total_order_float(keys)
  return rank_keys.value_of_key(rank if largest_first else ~rank, dtype)


def _unsigned(dtype: np.dtype) -> np.dtype:
  return np.dtype(f"uint{dtype.itemsize * 8}")


def _read_where_inexact(values: jax.Array, exact: jax.Array, read_bits: jax.Array) -> jax.Array:
  """``values`` where the key gave them back, else the input's bits ``read_bits``, read at the selected indices.

  Merged in bits, not floats: a select of floats may canonicalise NaNs (XLA:CPU's bfloat16 does).
  """
  unsigned = _unsigned(np.dtype(values.dtype))
  merged = jnp.where(exact, lax.bitcast_convert_type(values, unsigned), read_bits.astype(unsigned))
  return lax.bitcast_convert_type(merged, values.dtype)


def _one_device(x: jax.Array, *, k: int, largest_first: bool, interpret: bool) -> Selected:
  """The selection as a matrix, with the values the keys do not give back fetched by DMA."""
  dtype = np.dtype(x.dtype)
  rows = x.reshape(-1, x.shape[-1])
  source = tpu_fetch.operand(rows) if _fetches(dtype) else rows
  keys, indices = lax.top_k(key(lax.bitcast_convert_type(source, dtype), largest_first), k)
  values, exact = value(keys, dtype, largest_first)
  if _fetches(dtype):
    values = _read_where_inexact(values, exact, tpu_fetch.fetch(source, indices, ~exact, interpret=interpret))
  shape = (*x.shape[:-1], k)
  return values.reshape(shape), indices.reshape(shape)


def _partitioned(x: jax.Array, *, k: int, largest_first: bool, interpret: bool) -> Selected:
  """The selection XLA's SPMD partitioner can split: the input's rank kept, the values an XLA gather run only
  when some selected key merged several inputs (a zero, a NaN, a float32 subnormal was selected)."""
  del interpret
  dtype = np.dtype(x.dtype)
  keys, indices = lax.top_k(key(x, largest_first), k)
  values, exact = value(keys, dtype, largest_first)
  if not _fetches(dtype):
    return values, indices

  def fetched() -> jax.Array:
    bits = lax.bitcast_convert_type(x, _unsigned(dtype))
    return _read_where_inexact(values, exact, jnp.take_along_axis(bits, indices, axis=-1, mode="promise_in_bounds"))

  return lax.cond(jnp.any(~exact), fetched, lambda: values), indices


def select(x: jax.Array, case: Case) -> Selected:
  values, indices = _selection_p.bind(
    x, k=case.k, largest_first=case.largest_first, interpret=platform.current().interpret
  )
  return values, indices


def _partitioned_by_xla(ctx: Any) -> bool:
  """Whether the program being lowered is split over devices by XLA (automatic mesh axes), not by hand."""
  axis_context = ctx.module_context.axis_context
  manual = getattr(axis_context, "manual_axes", None)
  if manual is not None:
    return any(size > 1 and name not in manual for name, size in axis_context.mesh.shape.items())
  return int(getattr(axis_context, "num_devices", 1)) > 1


# The selection as a primitive, so that its lowering rule can see how the program is partitioned: a Mosaic kernel
# runs only where nothing is left for XLA to partition (one device, or inside shard_map), and arrays flattened
# into matrices would lose the sharding of their axes.
_selection_p = Primitive("dmljax_tpu_top_k")
_selection_p.multiple_results = True


@_selection_p.def_abstract_eval
def _selection_abstract_eval(aval: Any, *, k: int, largest_first: bool, interpret: bool) -> list[Any]:
  del largest_first, interpret
  shape = (*aval.shape[:-1], k)
  return [
    aval.update(shape=shape, weak_type=False),
    aval.update(shape=shape, dtype=np.dtype(np.int32), weak_type=False),
  ]


@_selection_p.def_impl
def _selection_impl(x: jax.Array, **params: Any) -> Selected:
  values, indices = jax.jit(functools.partial(_selection_p.bind, **params))(x)
  return values, indices


def _selection_lowering(ctx: Any, x: Any, **params: Any) -> Any:
  # A shape with jax.export's symbolic dimensions takes the XLA program too: a Mosaic kernel needs static shapes.
  static = symbolic.is_static(ctx.avals_in[0].shape)
  selection = _partitioned if _partitioned_by_xla(ctx) or not static else _one_device
  return mlir.lower_fun(functools.partial(selection, **params), multiple_results=True)(ctx, x)


mlir.register_lowering(_selection_p, _selection_lowering)
