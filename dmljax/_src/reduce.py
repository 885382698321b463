"""REDUCE: one of twelve reductions over a set of axes, keeping the input's rank.

DirectML semantics (seed ``DML_REDUCE_OPERATOR_DESC``, SPEC §5), with
:math:`N` the product of the reduced sizes:

=============  =======================================  =========================
function       result                                   types (functional path)
=============  =======================================  =========================
ARGMAX/ARGMIN  first flat index of the extreme (§3)     integer and float input
AVERAGE        :math:`\\sum x / N`                        float
L1             :math:`\\sum |x|`                          integer and float
L2             :math:`\\sqrt{\\sum x^2}`                   float
LOG_SUM        :math:`\\log \\sum x`                       float
LOG_SUM_EXP    :math:`\\log \\sum e^x`, computed stably     float
MAX/MIN        extreme value; NaN if any element is NaN integer and float
MULTIPLY       :math:`\\prod x`                           integer and float
SUM            :math:`\\sum x`                            integer and float
SUM_SQUARE     :math:`\\sum x^2`                          integer and float
=============  =======================================  =========================

An empty ``axes`` applies the function to every element on its own (N = 1).
float16 and bfloat16 accumulate in float32 and round once at the end; integers
accumulate in their own type and wrap, as a GPU would.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from dmljax._src import arg_reduce, descriptor_path, dtypes, tensor_desc
from dmljax._src import axes as axes_lib
from dmljax._src.dtypes import DataType
from dmljax._src.errors import Problems
from dmljax._src.tensor_desc import TensorDesc


class ReduceFunction(enum.IntEnum):
  """``DML_REDUCE_FUNCTION``, with the numeric values of ``directml.h``."""

  ARGMAX = 0
  ARGMIN = 1
  AVERAGE = 2
  L1 = 3
  L2 = 4
  LOG_SUM = 5
  LOG_SUM_EXP = 6
  MAX = 7
  MIN = 8
  MULTIPLY = 9
  SUM = 10
  SUM_SQUARE = 11


_ARG_FUNCTIONS = (ReduceFunction.ARGMAX, ReduceFunction.ARGMIN)
FLOAT_ONLY = (ReduceFunction.AVERAGE, ReduceFunction.L2, ReduceFunction.LOG_SUM, ReduceFunction.LOG_SUM_EXP)

_TABLE = {
  ReduceFunction.ARGMAX: "REDUCE:ARG",
  ReduceFunction.ARGMIN: "REDUCE:ARG",
  ReduceFunction.AVERAGE: "REDUCE:FLOAT_ONLY",
  ReduceFunction.L2: "REDUCE:FLOAT_ONLY",
  ReduceFunction.LOG_SUM: "REDUCE:FLOAT_ONLY",
  ReduceFunction.LOG_SUM_EXP: "REDUCE:FLOAT_ONLY",
  ReduceFunction.L1: "REDUCE:L1_SUM_SQUARE",
  ReduceFunction.SUM_SQUARE: "REDUCE:L1_SUM_SQUARE",
  ReduceFunction.MAX: "REDUCE:MIN_MAX",
  ReduceFunction.MIN: "REDUCE:MIN_MAX",
  ReduceFunction.MULTIPLY: "REDUCE:SUM_MULTIPLY",
  ReduceFunction.SUM: "REDUCE:SUM_MULTIPLY",
}


@dataclasses.dataclass(frozen=True)
class ReduceDesc:
  """``DML_REDUCE_OPERATOR_DESC``: ``function`` over ``axes``, output keeps the rank.

  Example:
    >>> import dmljax as dml, numpy as np
    >>> f32 = dml.DataType.FLOAT32
    >>> desc = dml.ReduceDesc(dml.ReduceFunction.SUM, dml.TensorDesc(f32, (2, 3)),
    ...                       dml.TensorDesc(f32, (2, 1)), axes=(1,))
    >>> dml.execute(desc, np.array([[1., 2., 3.], [3., 0., 4.]], np.float32)).tolist()
    [[6.0], [7.0]]
  """

  function: ReduceFunction
  input_tensor: TensorDesc
  output_tensor: TensorDesc
  axes: tuple[int, ...]


def canonical_function(p: Problems, field: str, function: Any) -> ReduceFunction | None:
  """A :class:`ReduceFunction`, its value, or its lower-case name (``"log_sum_exp"``)."""
  if isinstance(function, str):
    member = ReduceFunction.__members__.get(function.upper())
    if member is not None:
      return member
  elif not isinstance(function, bool):
    try:
      return ReduceFunction(function)
    except (ValueError, TypeError):
      pass
  p.add(f"{field} must be a dml.ReduceFunction or one of its lower-case names", f"{field}={function!r}")
  return None


def _check_reduce(
  p: Problems,
  shape: tuple[int, ...],
  dtype: np.dtype,
  function: ReduceFunction | None,
  axes: Any,
  index_dtype: np.dtype | None,
  *,
  source: str,
  allow_negative: bool,
) -> tuple[int, ...] | None:
  if not axes_lib.rank_in_range(p, source, shape):
    return None
  canonical = axes_lib.canonical_axes(p, "axes", axes, len(shape), allow_negative=allow_negative, allow_empty=True)
  if function in FLOAT_ONLY:
    p.require(
      dtypes.is_float(dtype), f"function {function.name} needs a floating {source}", f"{source} dtype={dtype.name}"
    )
  if canonical is not None and function in _ARG_FUNCTIONS:
    arg_reduce.check_reduced_index(p, shape, canonical, index_dtype)
  return canonical


def _log_sum_exp(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
  peak = lax.stop_gradient(jnp.max(x, axes, keepdims=True))
  shift = jnp.where(jnp.isfinite(peak), peak, jnp.zeros_like(peak))
  return jnp.log(jnp.sum(jnp.exp(x - shift), axes, keepdims=True)) + shift


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _extreme(x: jax.Array, axes: tuple[int, ...], find_max: bool) -> jax.Array:
  """MAX/MIN keeping dims; ties share the tangent equally (as ``jnp.max``), through a select.

  ``jnp.max``'s rule multiplies by a 0/1 mask, which gives -0.0 for a negative
  cotangent eagerly but +0.0 once XLA rewrites it as a select under jit; a
  select gives the same bits both ways.
  """
  return jnp.max(x, axes, keepdims=True) if find_max else jnp.min(x, axes, keepdims=True)


@_extreme.defjvp
def _extreme_jvp(
  axes: tuple[int, ...], find_max: bool, primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
  (x,), (t,) = primals, tangents
  out = _extreme(x, axes, find_max)
  hit = (x == out) | (jnp.isnan(x) & jnp.isnan(out))  # a NaN result comes from the NaNs
  count = jnp.sum(hit, axes, keepdims=True, dtype=x.dtype)
  return out, jnp.sum(jnp.where(hit, t, jnp.zeros((), t.dtype)), axes, keepdims=True) / count


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _l2(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
  """L2 keeping dims; the tangent is 0 at an all-zero sequence (SPEC §8).

  The tangent divides by the norm through a select, so XLA cannot rewrite it as
  ``rsqrt`` under jit only: jit and eager give the same bits.
  """
  return jnp.sqrt(jnp.sum(jnp.square(x), axes, keepdims=True))


@_l2.defjvp
def _l2_jvp(
  axes: tuple[int, ...], primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
  (x,), (t,) = primals, tangents
  out = _l2(x, axes)
  safe = jnp.where(out == 0, jnp.ones((), out.dtype), out)
  return out, jnp.sum(x * t, axes, keepdims=True) / safe


@functools.partial(jax.jit, static_argnames=("function", "axes", "keepdims", "index_dtype"))
def _reduce(
  x: jax.Array, *, function: ReduceFunction, axes: tuple[int, ...], keepdims: bool, index_dtype: np.dtype
) -> jax.Array:
  if function in _ARG_FUNCTIONS:
    return arg_reduce.arg_extreme(
      x, axes=axes, find_max=function == ReduceFunction.ARGMAX, last=False, index_dtype=index_dtype, keepdims=keepdims
    )
  dtype = np.dtype(x.dtype)
  narrow_float = dtypes.is_float(dtype) and dtype.itemsize < 4
  a = x.astype(np.float32) if narrow_float else x
  F = ReduceFunction

  def total(v: jax.Array) -> jax.Array:
    return jnp.sum(v, axes, keepdims=True, dtype=v.dtype)

  if function == F.SUM:
    out = total(a)
  elif function == F.SUM_SQUARE:
    out = total(jnp.square(a))
  elif function == F.L1:
    out = total(jnp.abs(a))
  elif function == F.L2:
    out = _l2(a, axes)
  elif function == F.AVERAGE:
    out = total(a) / np.array(math.prod(x.shape[d] for d in axes), a.dtype)
  elif function == F.LOG_SUM:
    out = jnp.log(total(a))
  elif function == F.LOG_SUM_EXP:
    out = _log_sum_exp(a, axes)
  elif function == F.MULTIPLY:
    out = jnp.prod(a, axes, keepdims=True, dtype=a.dtype)
  elif function == F.MAX:
    out = _extreme(a, axes, True) if dtypes.is_float(a.dtype) else jnp.max(a, axes, keepdims=True)
  else:
    out = _extreme(a, axes, False) if dtypes.is_float(a.dtype) else jnp.min(a, axes, keepdims=True)
  out = out.astype(dtype)
  return out if keepdims else jnp.squeeze(out, axes)


def reduce(
  x: ArrayLike,
  function: ReduceFunction | str,
  axes: int | Sequence[int] | None = None,
  *,
  keepdims: bool = True,
  index_dtype: Any = jnp.uint32,
) -> jax.Array:
  r"""Applies a DirectML reduction ``function`` over ``axes``, DirectML REDUCE.

  See the module table for the twelve functions; :math:`N` is the product of
  the reduced sizes and an empty ``axes`` gives :math:`N = 1`.

  Args:
    x: array of an integer or floating dtype (bfloat16 included), rank 1 to 8;
      AVERAGE, L2, LOG_SUM and LOG_SUM_EXP need a floating dtype.
    function: a :class:`ReduceFunction` or its lower-case name, e.g. ``"sum"``.
    axes: an axis or a sequence of distinct axes (negative count from the
      end); ``None`` (default) means every axis, ``()`` none.
    keepdims: keep reduced axes with size 1 (default, DirectML's layout).
    index_dtype: output dtype of ARGMAX/ARGMIN: int32, int64, uint32 (default)
      or uint64; ignored by the other functions.

  Returns:
    The reduction, of ``x``'s dtype (``index_dtype`` for ARGMAX/ARGMIN).

  Raises:
    DescriptorError: at trace time, for a bad rank, function, axes or index
      dtype, or an integer ``x`` with a floating-only function.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> x = jnp.array([[1., 2., 3.], [3., 0., 4.], [2., 4., 2.]])
    >>> dml.reduce(x, "sum", 0).tolist()
    [[6.0, 6.0, 9.0]]
    >>> dml.reduce(x, dml.ReduceFunction.MAX, keepdims=False).tolist()
    4.0
  """
  p = Problems("reduce")
  array = dtypes.as_array(p, "x", x)
  canonical = canonical_function(p, "function", function)
  index = dtypes.canonical_index_dtype(p, "index_dtype", index_dtype)
  canonical_axes = None
  if array is not None and dtypes.require_numeric(p, "x", np.dtype(array.dtype)):
    canonical_axes = _check_reduce(
      p, array.shape, np.dtype(array.dtype), canonical, axes, index, source="x", allow_negative=True
    )
  p.raise_if_any()
  assert array is not None and canonical is not None and canonical_axes is not None and index is not None
  return _reduce(array, function=canonical, axes=canonical_axes, keepdims=bool(keepdims), index_dtype=index)


_FIELDS_IN = ("input_tensor",)
_FIELDS_OUT = ("output_tensor",)


def execute_reduce(desc: ReduceDesc, inputs: Sequence[Any], feature_level: Any) -> jax.Array:
  """The descriptor path of REDUCE (see :func:`dmljax.execute`)."""
  p = Problems("REDUCE")
  function = canonical_function(p, "function", desc.function)
  tensors_ok = descriptor_path.check_descriptor(
    p,
    desc,
    inputs,
    input_fields=_FIELDS_IN,
    output_fields=_FIELDS_OUT,
    table=_TABLE[function] if function is not None else None,
    feature_level=feature_level,
  )
  axes = None
  if tensors_ok and function is not None:
    source = desc.input_tensor
    out_type = DataType(desc.output_tensor.data_type)
    is_arg = function in _ARG_FUNCTIONS
    index_dtype = dtypes.numpy_dtype(out_type) if is_arg and out_type in arg_reduce.INDEX_DATA_TYPES else None
    axes = _check_reduce(
      p,
      source.sizes,
      dtypes.numpy_dtype(source.data_type),
      function,
      desc.axes,
      index_dtype,
      source="input_tensor",
      allow_negative=False,
    )
    if axes is not None:
      allowed = arg_reduce.INDEX_DATA_TYPES if is_arg else (DataType(source.data_type),)
      tensor_desc.output_matches(
        p, "output_tensor", desc.output_tensor, arg_reduce.reduced_shape(source.sizes, axes), allowed
      )
  p.raise_if_any()
  assert function is not None and axes is not None
  (x,) = descriptor_path.input_arrays(desc, inputs, _FIELDS_IN)
  index_dtype = dtypes.numpy_dtype(desc.output_tensor.data_type)
  return _reduce(x, function=function, axes=axes, keepdims=True, index_dtype=index_dtype)
