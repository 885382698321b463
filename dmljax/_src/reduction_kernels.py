"""The compiled CPU reduction kernels' bindings: REDUCE MAX/MIN (``csrc/cpu_reduce_extreme.cc``) and argmin/argmax
(``csrc/cpu_arg_extreme.cc``).

Each kernel reduces the middle axis of ``(outer, n, inner)`` rows (``(outer, n)`` where ``inner`` is 1: an operand
with no size-1 axis, which XLA hands a custom call as it is), the reduced axes next to each other flattened into
``n``. Each sits behind a primitive whose CPU lowering is the FFI call, where the library is loaded and the program
is not being exported (an FFI target is not a stable custom call for ``jax.export``); elsewhere, and eagerly, the
primitive runs ``fallback``, the caller's composition of the same bits on the rows. Under ``vmap`` a batch is more
rows. The argmin/argmax primitive's int32 positions have a zero tangent; MAX/MIN's values are differentiated by
their caller's rule (:mod:`reduce_extreme`), never through the primitive. Whether a program calls a kernel at all is
:func:`cpu_route.choose`'s decision.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core
from jax.interpreters import ad, batching, mlir

from dmljax._src import axes as axes_lib
from dmljax._src import cpu_kernel_library
from dmljax._src.strategies import row_kernel

# The types the kernels take (the others, float8, float4 and 4- and 2-bit integers, keep the composition).
KERNEL_TYPES = frozenset(
  np.dtype(t)
  for t in (
    jnp.float16,
    jnp.bfloat16,
    jnp.float32,
    jnp.float64,
    jnp.int8,
    jnp.int16,
    jnp.int32,
    jnp.int64,
    jnp.uint8,
    jnp.uint16,
    jnp.uint32,
    jnp.uint64,
  )
)

Rows = Callable[[jax.Array], jax.Array]


def rows_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
  """``(outer, n, inner)`` of an array of ``shape`` reduced over the contiguous ``axes``; ``(outer, n)`` where
  ``inner`` is 1 (a trailing size-1 axis may cost XLA a copy into the layout a custom call expects)."""
  first, end = axes[0], axes[-1] + 1
  rows = (math.prod(shape[:first]), math.prod(shape[first:end]), math.prod(shape[end:]))
  return rows[:2] if rows[2] == 1 else rows


def reduce_extreme(x: jax.Array, axes: tuple[int, ...], find_max: bool, fallback: Rows) -> jax.Array:
  """REDUCE MAX (``find_max``) or MIN of ``x`` over the contiguous ``axes``, keeping dims, by the kernel;
  ``fallback`` maps the rows to their ``(outer,)`` or ``(outer, inner)`` extremes where it cannot run."""
  out = _reduce_extreme_p.bind(x.reshape(rows_shape(x.shape, axes)), find_max=bool(find_max), fallback=fallback)
  return out.reshape(axes_lib.reduced_shape(x.shape, axes))


def arg_extreme(x: jax.Array, axes: tuple[int, ...], *, find_max: bool, last: bool, fallback: Rows) -> jax.Array:
  """The int32 flat position over the contiguous ``axes`` (removed) of the first (``last``: final) element of the
  largest :func:`rank_keys.extreme_key` (``find_max``: argmax's, else argmin's), by the kernel; ``fallback`` maps the
  rows to those positions (``(outer,)`` or ``(outer, inner)``) where it cannot run. The reduced elements must be
  at most ``2**31``."""
  rows = x.reshape(rows_shape(x.shape, axes))
  out = _arg_extreme_p.bind(rows, find_max=bool(find_max), last=bool(last), fallback=fallback)
  return out.reshape(tuple(size for d, size in enumerate(x.shape) if d not in axes))


def _primitive(name: str, target: str, index_dtype: np.dtype | None) -> core.Primitive:
  """A primitive of ``(outer, n[, inner])`` rows to ``(outer[, inner])``: the input's type, or ``index_dtype``; its
  parameters the ``fallback`` and the kernel's attributes (bools), which its CPU lowering passes to ``target``."""
  kernel_p = core.Primitive(name)

  @kernel_p.def_impl
  def _impl(rows: jax.Array, *, fallback: Rows, **attributes: bool) -> jax.Array:
    """Eagerly (``jax.disable_jit``): the composition, op by op."""
    del attributes
    return fallback(rows)

  @kernel_p.def_abstract_eval
  def _abstract_eval(rows: Any, **_: Any) -> Any:
    shape = (rows.shape[0], *rows.shape[2:])
    if index_dtype is None:
      return rows.update(shape=shape, weak_type=False)
    return rows.update(shape=shape, dtype=index_dtype, weak_type=False)

  def _fallback_lowering(ctx: Any, rows: Any, *, fallback: Rows, **attributes: bool) -> Any:
    del attributes
    return mlir.lower_fun(fallback, multiple_results=False)(ctx, rows)

  def _cpu_lowering(ctx: Any, rows: Any, *, fallback: Rows, **attributes: bool) -> Any:
    # An FFI target is no stable custom call for jax.export: an exported program holds the composition.
    if row_kernel.exporting(ctx) or not cpu_kernel_library.available():
      return _fallback_lowering(ctx, rows, fallback=fallback)
    return jax.ffi.ffi_lowering(target)(ctx, rows, **{key: bool(value) for key, value in attributes.items()})

  mlir.register_lowering(kernel_p, _fallback_lowering)
  mlir.register_lowering(kernel_p, _cpu_lowering, platform="cpu")

  def _batched(args: Any, dims: Any, **params: Any) -> tuple[jax.Array, int]:
    """A batch is more rows: the mapped axis joins the kept leading ones."""
    (rows,), (dim,) = args, dims
    rows = jnp.moveaxis(rows, dim, 0)
    batch, outer, *rest = rows.shape
    out = kernel_p.bind(rows.reshape(batch * outer, *rest), **params)
    return out.reshape(batch, outer, *rest[1:]), 0

  batching.primitive_batchers[kernel_p] = _batched

  if index_dtype is not None:

    def _jvp(primals: Any, tangents: Any, **params: Any) -> tuple[jax.Array, Any]:
      """Positions are integers: a zero (float0) tangent."""
      del tangents
      out = kernel_p.bind(*primals, **params)
      return out, ad.Zero(jax.typeof(out).to_tangent_aval())

    ad.primitive_jvps[kernel_p] = _jvp

  return kernel_p


_reduce_extreme_p = _primitive("dmljax_cpu_reduce_extreme", cpu_kernel_library.REDUCE_EXTREME_TARGET, None)
_arg_extreme_p = _primitive("dmljax_cpu_arg_extreme", cpu_kernel_library.ARG_EXTREME_TARGET, np.dtype(np.int32))
