"""REDUCE: one of twelve reductions over a set of axes, keeping the input's rank.

DirectML semantics (``DML_REDUCE_OPERATOR_DESC``; docs/semantics.rst, "REDUCE"), with
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
MAX/MIN        extreme element (IEEE maximum/minimum)  integer and float
MULTIPLY       :math:`\\prod x`                           integer and float
SUM            :math:`\\sum x`                            integer and float
SUM_SQUARE     :math:`\\sum x^2`                          integer and float
=============  =======================================  =========================

An empty ``axes`` applies the function to every element on its own (N = 1).
float16 and bfloat16 accumulate in float32 and round once at the end; integers
accumulate in their own type and wrap, as a GPU would.

Differentiation (docs/semantics.rst): every function but ARGMAX/ARGMIN is differentiable
in forward and reverse mode to any order (those two return indices with
float0 tangents). Where the plain formula has no derivative, the result is a
finite subgradient, and its own derivative is finite too:

* L2 at an all-zero sequence: 0 (second derivative 0). Elsewhere the gradient
  is :math:`x / \\lVert x \\rVert`, computed on :math:`x / \\max |x|` so it stays
  right where :math:`\\sum x^2` underflows to 0 or overflows to inf.
* LOG_SUM_EXP over an all −inf sequence: 0; otherwise the softmax weights.
* MAX/MIN: the cotangent is shared equally among tied extremes (as
  ``jnp.max``); second derivative 0.
* MULTIPLY: exact with zeros (a product tree, no division): with one zero the
  gradient there is the product of the others and 0 elsewhere; with several
  zeros it is 0 everywhere.
* L1 at 0: 0 (``sign(0)``). LOG_SUM at a zero sum is infinite, as the function.

float16 and bfloat16 gradients are computed in float32 and rounded once.
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

from dmljax._src import (
  arg_reduce,
  cpu_route,
  descriptor_path,
  dtypes,
  enums,
  fields,
  halving,
  narrow_integers,
  platform,
  reduce_extreme,
  symbolic,
  tensor_desc,
)
from dmljax._src import axes as axes_lib
from dmljax._src.dtypes import DataType
from dmljax._src.errors import Problems
from dmljax._src.fields import Fields
from dmljax._src.tensor_desc import TensorDesc


class ReduceFunction(enum.IntEnum):
  """``DML_REDUCE_FUNCTION``, with the numeric values of ``directml.h``.

  The reduction :func:`reduce` and :class:`ReduceDesc` apply (formulas in
  :func:`reduce`). :func:`reduce` also takes its names and those jnp, ONNX
  and WebNN use (``"mean"``, ``"prod"``, ``"logsumexp"``, ...).

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> x = jnp.array([1., 2., 3.])
    >>> dml.reduce(x, dml.ReduceFunction.SUM_SQUARE).tolist(), dml.reduce(x, "l1").tolist()
    (14.0, 6.0)
  """

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
# The static index_dtype of the value functions, which ignore it: one compilation whatever the caller passed.
_UNUSED_INDEX_DTYPE = np.dtype(np.uint32)
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
  """``DML_REDUCE_OPERATOR_DESC``: one of twelve reductions over ``axes``; the output keeps the rank.

  See :func:`reduce` (the functional form) for the functions' formulas.
  float16 accumulates in float32 and rounds once; integers wrap.

  Attributes:
    function: ``Function``, a :class:`ReduceFunction`.
    input_tensor: ``InputTensor``, the tensor to reduce; AVERAGE, L2, LOG_SUM
      and LOG_SUM_EXP need FLOAT32 or FLOAT16, and the other functions' types
      follow the feature level's table for that function.
    output_tensor: ``OutputTensor``: the input's sizes with 1 on every reduced
      axis; the input's data type, or INT32/INT64/UINT32/UINT64 for ARGMAX and
      ARGMIN.
    axes: ``Axes`` (``AxisCount`` is ``len(axes)``): distinct axes in
      ``[0, rank - 1]``; empty applies ``function`` to every element alone.

  Raises:
    DescriptorError: from :func:`execute` (constructing a descriptor never
      raises), at trace time and listing every broken rule: an unknown
      ``function``, a tensor descriptor, data type or rank outside the
      function's table at the feature level, unequal ranks, repeated or
      out-of-range ``axes``, a wrong output descriptor, or arrays that do not
      match.

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

  @classmethod
  def from_inputs(
    cls,
    function: ReduceFunction | str,
    input_tensor: TensorDesc,
    *,
    axes: Sequence[int],
    output_data_type: DataType | str | None = None,
  ) -> ReduceDesc:
    """The descriptor with its output tensor inferred from the input and the attributes.

    The output has the input's sizes with 1 on every reduced axis, and the
    input's data type (ARGMAX/ARGMIN: ``output_data_type``, default UINT32).

    Raises:
      DescriptorError: for a malformed input descriptor, an unknown
        ``function``, bad ``axes`` or an ``output_data_type`` the function
        cannot produce.

    Example:
      >>> import dmljax as dml, numpy as np
      >>> desc = dml.ReduceDesc.from_inputs("sum", dml.TensorDesc(np.float32, (2, 3)), axes=(1,))
      >>> dml.execute(desc, np.array([[1., 2., 3.], [3., 0., 4.]], np.float32)).tolist()
      [[6.0], [7.0]]
    """
    canonical, output = _output(function, input_tensor, axes, output_data_type)
    return cls(canonical, input_tensor, output, axes=tuple(axes))


F = ReduceFunction
# DirectML's names, then jnp's, ONNX's (ReduceProd, ReduceSumSquare, ...) and WebNN's (reduceProduct, ...): case,
# underscores and a "reduce" prefix are ignored, so "ReduceLogSumExp", "logsumexp" and "log_sum_exp" all match.
FUNCTION_NAMES: dict[str, ReduceFunction] = {
  **{f.name.lower(): f for f in ReduceFunction},
  "mean": F.AVERAGE,
  "prod": F.MULTIPLY,
  "product": F.MULTIPLY,
  "amax": F.MAX,
  "amin": F.MIN,
  "sum_of_squares": F.SUM_SQUARE,
}

# Names a user may try that are not reductions (their output keeps the reduced axis, or they select), with what
# computes them; keys normalized as enums.parse_enum compares names.
_KEEPS_SHAPE = "it keeps the axis's length, so it is no reduction"
NOT_REDUCTIONS: dict[str, str] = {
  "softmax": f"{_KEEPS_SHAPE}; use jax.nn.softmax, whose normalizer is dml.reduce(x, 'log_sum_exp', axis)",
  "logsoftmax": f"{_KEEPS_SHAPE}; use jax.nn.log_softmax, or x - dml.reduce(x, 'log_sum_exp', axis, keepdims=True)",
  "cumsum": f"{_KEEPS_SHAPE}; use jnp.cumsum",
  "cumprod": f"{_KEEPS_SHAPE}; use jnp.cumprod",
  "sort": f"{_KEEPS_SHAPE}; use dml.top_k(x, x.shape[axis], axis=axis) for dmljax's order, or jnp.sort",
  "topk": "use dml.top_k(x, k, axis=axis)",
  "median": "DirectML has no median reduction; use jnp.median",
  "std": "DirectML has no standard deviation; use jnp.std",
  "var": "DirectML has no variance; use jnp.var",
}


def canonical_function(p: Problems, field: str, function: Any) -> ReduceFunction | None:
  """A :class:`ReduceFunction`, its value, or one of :data:`FUNCTION_NAMES` (``"logsumexp"``, ``"ReduceProd"``)."""
  return enums.parse_enum(
    p, field, function, ReduceFunction, names=FUNCTION_NAMES, prefixes=("reduce",), elsewhere=NOT_REDUCTIONS
  )


def _check_reduce(
  p: Problems,
  f: Fields,
  shape: tuple[int, ...],
  dtype: np.dtype,
  function: ReduceFunction | None,
  axes: Any,
  index_dtype: np.dtype | None,
  *,
  allow_negative: bool,
) -> tuple[int, ...] | None:
  if function in FLOAT_ONLY:
    p.require(
      dtypes.is_float(dtype), f"function {function.name} needs a floating {f['x']}", f"{f['x']}.dtype={dtype.name}"
    )
  if not axes_lib.rank_in_range(p, f, "x", shape):
    return None
  canonical = axes_lib.canonical_axes(p, f["axis"], axes, len(shape), allow_negative=allow_negative, allow_empty=True)
  if canonical is not None and function in _ARG_FUNCTIONS:
    arg_reduce.check_reduced_index(p, f, shape, canonical, index_dtype)
  return canonical


def _by_dot(x: jax.Array, axes: tuple[int, ...]) -> bool | jax.Array:
  """Whether a float32/float64 sum over ``axes`` is a large sum over some leading axes (a column sum).

  Where jax.export's symbolic dimensions leave the size open, a boolean the program computes from them: the
  exported program sums as the jitted one does at every size (the two sums round differently).
  """
  if not (
    np.dtype(x.dtype) in (np.dtype(np.float32), np.dtype(np.float64))
    and 0 < len(axes) < x.ndim
    and axes == tuple(range(len(axes)))
  ):
    return False
  if symbolic.is_static(x.shape):
    return x.size >= 1 << 16 and math.prod(x.shape[len(axes) :]) >= 16
  # Compared as float32: a size past int32 rounds, but stays on its side of either bound.
  size, columns = (symbolic.constant(math.prod(s), np.float32) for s in (x.shape, x.shape[len(axes) :]))
  return (size >= 1 << 16) & (columns >= 16)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _sum_over_leading_axes(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
  """Σ over leading ``axes`` (keepdims); on CPU as ``ones @ x``, a matrix-vector product at memory speed.

  XLA:CPU reduces over leading axes (a column sum) at a fraction of the bandwidth its
  matrix-vector product reaches; ``Precision.HIGHEST`` keeps the float32 products and sums exact
  to float32 rounding, as a reduction would. The tangent is a plain sum, so reverse mode
  broadcasts instead of forming an outer product.
  """

  def by_dot(x: jax.Array) -> jax.Array:
    rows = x.reshape(-1, math.prod(x.shape[len(axes) :]))
    out = jnp.dot(jnp.ones(rows.shape[:1], x.dtype), rows, precision=lax.Precision.HIGHEST)
    return out.reshape(axes_lib.reduced_shape(x.shape, axes))

  return platform.branch(x, cpu=by_dot, default=lambda x: jnp.sum(x, axes, keepdims=True))


@_sum_over_leading_axes.defjvp
def _sum_over_leading_axes_jvp(
  axes: tuple[int, ...], primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
  return _sum_over_leading_axes(primals[0], axes), jnp.sum(tangents[0], axes, keepdims=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _product(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
  """Π over ``axes`` (keepdims): XLA's product reduction, differentiated through :func:`_product_tree`.

  ``jnp.prod``'s own derivative (exclusive products by scans, exact with zeros) costs several
  times the forward pass on CPU; the product rule of a product tree is exact with zeros too, at
  the cost of a few elementwise passes. The value is XLA's reduction, the fastest forward pass.
  """
  return jnp.prod(x, axes, keepdims=True, dtype=x.dtype)


@_product.defjvp
def _product_jvp(
  axes: tuple[int, ...], primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
  _, tangent = jax.jvp(functools.partial(_product_tree, axes=axes), primals, tangents)
  return _product(primals[0], axes), tangent


def _product_tree(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
  """Π over ``axes`` (keepdims); on CPU, trailing axes by halving the row with elementwise products.

  Multiplying the two halves of every row down to 16 elements is one fused, vectorised loop whose
  derivative is the product rule, with no division (the tangent of :func:`_product`). Floats are
  reassociated as any reduction may; integer products wrap, so their order does not matter.
  """
  kept = x.ndim - len(axes)

  def halved(x: jax.Array) -> jax.Array:
    rows = x.reshape(*x.shape[:kept], -1)
    while rows.shape[-1] > 16 and rows.shape[-1] % 2 == 0:
      half = rows.shape[-1] // 2
      rows = rows[..., :half] * rows[..., half:]
    return jnp.prod(rows, -1, dtype=x.dtype).reshape(axes_lib.reduced_shape(x.shape, axes))

  def plain(x: jax.Array) -> jax.Array:
    return jnp.prod(x, axes, keepdims=True, dtype=x.dtype)

  # The halving in a program of any number of devices (several=halving), where it can cut the rows: an explicit
  # sharding of a reduced axis would need its reshapes to name their output shardings, so there the plain product
  # lets XLA reduce each shard and combine the partial products.
  return cpu_route.choose(x, axes, default=plain, one_device=halved, several=halved, trailing=True)


def _log_sum_exp(x: jax.Array, axes: tuple[int, ...], work: np.dtype) -> jax.Array:
  # The shift is a constant to differentiation (the result does not depend on it). A zero total means every
  # element is -inf; the double where keeps log's infinite slope there out of the derivatives. A narrow x is
  # widened to ``work`` where each pass reads it (its peak is one of its values, exact in either type), so no
  # widened copy is written and read twice.
  # A complex x is shifted by its largest real part (as JAX's logsumexp), and its sum is not made positive.
  peak = lax.stop_gradient(jnp.max(jnp.real(x), axes, keepdims=True)).astype(work)
  x = x.astype(work)
  shift = jnp.where(jnp.isfinite(peak), peak, jnp.zeros_like(peak))
  total = jnp.sum(jnp.exp(x - shift), axes, keepdims=True)
  empty = total == 0
  safe_log = jnp.log(jnp.where(empty, jnp.ones_like(total), total))
  return jnp.where(empty, jnp.full_like(total, -np.inf), safe_log) + shift


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _l2(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
  """L2 keeping dims; the tangent is 0 at an all-zero sequence (a subgradient)."""
  return jnp.sqrt(jnp.sum(jnp.square(x), axes, keepdims=True, dtype=x.dtype))


@_l2.defjvp
def _l2_jvp(
  axes: tuple[int, ...], primals: tuple[jax.Array], tangents: tuple[jax.Array]
) -> tuple[jax.Array, jax.Array]:
  # d||x|| = <x / s, dx> / n with n = ||x / s||, for any per-sequence s > 0. Where the norm is normal (neither 0,
  # nor small enough that x*x lost bits to underflow, nor inf), s = 1 and n is the norm itself: the tangent
  # costs one pass over x, as jnp.linalg.norm's. Otherwise s = max|x|, which neither underflows nor overflows,
  # and the subgradient is 0 at x = 0 (with a zero second derivative there). The branch is chosen on primals
  # only (the tangent stays outside the cond, so it transposes), and under vmap both branches run.
  ((x,), (t,)) = primals, tangents
  norm = _l2(x, axes)
  smallest = np.array(2.0 ** (np.finfo(x.dtype).minexp // 2 + 24), x.dtype)
  normal = (norm >= smallest) & (norm <= np.finfo(x.dtype).max)

  def as_is(x: jax.Array, norm: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    # Dividing by a select, never by a sqrt, keeps XLA from rewriting it as rsqrt under jit alone, so jit
    # and eager give the same bits.
    ones = jnp.ones_like(norm)
    return ones, jnp.where(normal, norm, ones), jnp.zeros(norm.shape, bool)

  def rescaled(x: jax.Array, norm: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    scale = lax.stop_gradient(jnp.max(jnp.abs(x), axes, keepdims=True))
    scale = jnp.where(scale == 0, jnp.ones_like(scale), scale)
    squares = jnp.sum(jnp.square(x / scale), axes, keepdims=True)
    zero = squares == 0
    return scale, jnp.where(zero, jnp.ones_like(squares), jnp.sqrt(squares)), zero

  scale, length, zero = lax.cond(jnp.all(normal), as_is, rescaled, x, norm)
  slope = jnp.sum((x / scale) * t, axes, keepdims=True) / length
  return norm, jnp.where(zero, jnp.zeros_like(slope), slope)


@functools.partial(jax.jit, static_argnames=("function", "axes", "keepdims", "index_dtype", "choice"))
def _reduce(
  x: jax.Array,
  *,
  function: ReduceFunction,
  axes: tuple[int, ...],
  keepdims: bool,
  index_dtype: np.dtype,
  choice: platform.Choice,
) -> jax.Array:
  if function in _ARG_FUNCTIONS:
    find_max = function == ReduceFunction.ARGMAX
    return arg_reduce.arg_extreme(
      x, axes=axes, find_max=find_max, last=False, index_dtype=index_dtype, keepdims=keepdims, choice=choice
    )
  dtype = np.dtype(x.dtype)
  narrow_float = dtypes.is_float(dtype) and dtype.itemsize < 4
  a = x.astype(np.float32) if narrow_float else x
  F = ReduceFunction

  def total(v: jax.Array) -> jax.Array:
    if dtypes.is_integer(np.dtype(v.dtype)) and np.dtype(v.dtype).itemsize >= 4 and halving.trailing(v, axes):
      # Wrapping integer sums give the same bits in any order: summed by halving, fused with what made v.
      return halving.tree(v, axes, lambda k: k, jnp.add, functools.partial(jnp.sum, dtype=v.dtype))
    return jnp.sum(v, axes, keepdims=True, dtype=v.dtype)

  if function == F.SUM:
    # float16/bfloat16: XLA's reduction widens each element as it reads it; the product would need a widened copy.
    by_dot = _by_dot(x, axes)
    if isinstance(by_dot, bool):
      out = _sum_over_leading_axes(a, axes) if by_dot else total(a)
    else:
      out = lax.cond(by_dot, lambda v: _sum_over_leading_axes(v, axes), total, a)
  elif function == F.SUM_SQUARE:
    out = total(jnp.square(a))
  elif function == F.L1:
    out = total(jnp.abs(a))
  elif function == F.L2:
    out = _l2(a, axes)
  elif function == F.AVERAGE:
    out = total(a) / symbolic.constant(math.prod(x.shape[d] for d in axes), a.dtype)
  elif function == F.LOG_SUM:
    out = jnp.log(_flush_subnormal(total(a)))
  elif function == F.LOG_SUM_EXP:
    # bfloat16 is widened where each pass reads it; XLA:CPU's float16 max and widening are slow enough that one
    # widened copy, read twice, is faster.
    out = _log_sum_exp(a if dtype == np.dtype(np.float16) else x, axes, a.dtype)
  elif function == F.MULTIPLY:
    out = _product(a, axes)
  else:  # MAX/MIN return an input element: no widening
    out = reduce_extreme.extreme(x, axes, function == F.MAX)
  out = out.astype(dtype)
  return out if keepdims else jnp.squeeze(out, axes)


def _flush_subnormal(s: jax.Array) -> jax.Array:
  """``s`` with its subnormal values read as +0, the gradient passed through as at zero.

  A subnormal sum counts as zero (semantics: Subnormals), and XLA:CPU's float32 ``log`` does not give a subnormal
  one answer in every compiled program: flushed first, LOG_SUM is -inf (gradient +inf) in all of them.
  """
  if not dtypes.is_float(np.dtype(s.dtype)):
    return s
  subnormal = (jnp.abs(s) < np.finfo(s.dtype).smallest_normal) & (s != 0)  # -0.0 keeps its -inf gradient
  return jnp.where(subnormal, s - jax.lax.stop_gradient(s), s)


# Functions whose formula holds for complex numbers with a complex result (MAX/MIN: JAX's lexicographic order).
_COMPLEX_FUNCTIONS = (F.SUM, F.MULTIPLY, F.AVERAGE, F.LOG_SUM_EXP, F.LOG_SUM, F.SUM_SQUARE, F.MAX, F.MIN)
_EXTREMES = (F.MAX, F.MIN)
# The value of a block with no elements (jnp's: the sum's identity, log 0; AVERAGE's is jnp.mean's 0/0, computed).
_EMPTY_VALUE = {
  F.SUM: 0,
  F.SUM_SQUARE: 0,
  F.L1: 0,
  F.L2: 0,
  F.MULTIPLY: 1,
  F.LOG_SUM: -np.inf,
  F.LOG_SUM_EXP: -np.inf,
}


def functional_types(
  p: Problems, dtype: np.dtype, function: ReduceFunction, *, promote_integers: bool
) -> tuple[np.dtype, np.dtype] | None:
  """The type the implementation computes in and the result type, by ``jnp``'s rules; records refusals.

  SUM, MULTIPLY, L1 and SUM_SQUARE give ``jnp.sum``'s type (bool counts as int32; with ``promote_integers``,
  integers narrower than the default integer widen to it); AVERAGE, L2, LOG_SUM and LOG_SUM_EXP give
  ``jnp.mean``'s (bool and integers become floating), unless ``promote_integers=False`` asks for DirectML's
  integer rule, where they have no integer form; MAX/MIN keep the type (bool computed as uint8).
  """
  if function in _ARG_FUNCTIONS:
    return dtype, dtype  # the result is the index, of index_dtype
  if dtypes.is_complex(dtype):
    ok = p.require(
      function in _COMPLEX_FUNCTIONS,
      f"function {function.name} needs real x (it reduces magnitudes or orders values; complex numbers have no "
      f"order): pass jnp.abs(x), or x.real",
      f"x.dtype={dtype.name}",
    )
    return (dtype, dtype) if ok else None
  if function in _EXTREMES:
    return (np.dtype(np.uint8) if dtypes.is_bool(dtype) else dtype), dtype
  if function in FLOAT_ONLY:
    if not p.require(
      promote_integers or not dtypes.is_integer(dtype),
      f"function {function.name} needs a floating x when promote_integers=False (DirectML's integer reductions "
      "keep the input's type, and it has no integer form of this one): pass promote_integers=True for jnp's "
      "floating result, or x.astype(jnp.float32)",
      f"x.dtype={dtype.name}",
    ):
      return None
    result = dtypes.inexact_dtype(dtype)
    return result, result
  result = dtypes.summed_dtype(dtype, promote_integers=promote_integers)
  return result, result


@functools.partial(jax.jit, static_argnames=("function", "axes", "keepdims", "work", "result", "index_dtype", "choice"))
def _program(
  x: jax.Array,
  *,
  function: ReduceFunction,
  axes: tuple[int, ...],
  keepdims: bool,
  work: np.dtype,
  result: np.dtype,
  index_dtype: np.dtype,
  choice: platform.Choice,
) -> jax.Array:
  """:func:`_reduce` of validated input of any rank and size, computed in ``work`` and returned as ``result``.

  The one program of both paths (the descriptor path's types are its input's: ``work`` and ``result`` are
  ``x``'s), so a conversion (an int8 sum widened to int32) fuses into the reduction.
  """
  out_shape = axes_lib.output_shape(x.shape, axes, keepdims)
  if function in _ARG_FUNCTIONS:
    find_max = function == F.ARGMAX
    return arg_reduce.arg_program(
      x, axes=axes, find_max=find_max, last=False, index_dtype=index_dtype, keepdims=keepdims, choice=choice
    )
  if x.size == 0:  # no element to read: every block is empty (the function's empty value) or there is no block
    if function == F.AVERAGE:  # jnp.mean's 0 / 0, whose bits (nan+nanj for complex numbers) are jnp's
      return jnp.mean(x.astype(result), axes, keepdims=True).reshape(out_shape)
    return jnp.full(out_shape, _EMPTY_VALUE.get(function, 0), result)
  if x.dtype != work:
    # 8-bit integers converted to floats out of reach of XLA:CPU's 8-bit library arithmetic (narrow_integers).
    x = narrow_integers.as_float(x, work) if dtypes.is_float(work) else x.astype(work)
  if dtypes.is_complex(work) and function in _EXTREMES:
    return _complex_extreme(x, axes, function == F.MAX, choice).reshape(out_shape)
  out = axes_lib.reduce_folded(
    x,
    axes,
    out_shape,
    lambda folded, folded_axes: _reduce(
      folded, function=function, axes=folded_axes, keepdims=keepdims, index_dtype=_UNUSED_INDEX_DTYPE, choice=choice
    ),
  )
  return out if out.dtype == result else out.astype(result)


def _complex_extreme(x: jax.Array, axes: tuple[int, ...], find_max: bool, choice: platform.Choice) -> jax.Array:
  """MAX/MIN of complex numbers in JAX's lexicographic order (real part first, then imaginary), keeping dims.

  The real part is REDUCE's MAX/MIN of the real parts (NaN propagating); the imaginary part is the MAX/MIN of
  the imaginary parts of the elements whose real part equals it (a NaN real part: those with a NaN real part).
  The two zeros are equal, as in JAX's order; MAX's real part of {-0.0, +0.0} is +0.0, MIN's -0.0.
  """
  function = F.MAX if find_max else F.MIN

  def extreme(v: jax.Array) -> jax.Array:
    return axes_lib.reduce_folded(
      v,
      axes,
      axes_lib.reduced_shape(v.shape, axes),
      lambda folded, folded_axes: _reduce(
        folded, function=function, axes=folded_axes, keepdims=True, index_dtype=_UNUSED_INDEX_DTYPE, choice=choice
      ),
    )

  real, imag = jnp.real(x), jnp.imag(x)
  peak = extreme(real)
  tie = (real == peak) | (jnp.isnan(real) & jnp.isnan(peak))
  fill = np.array(-np.inf if find_max else np.inf, real.dtype)
  return lax.complex(peak, extreme(jnp.where(tie, imag, fill)))


def reduce(
  x: ArrayLike,
  function: ReduceFunction | str,
  axis: int | Sequence[int] | None = None,
  *,
  keepdims: bool = False,
  promote_integers: bool = True,
  index_dtype: Any = None,
) -> jax.Array:
  r"""Applies a DirectML reduction ``function`` over ``axes``, DirectML REDUCE, with ``jnp``'s result types.

  Over the elements :math:`x_1, \ldots, x_N` of every reduced block
  (:math:`N` is the product of the reduced sizes; an empty ``axes`` gives
  :math:`N = 1`, each element reduced on its own):

  =============  ==================================================
  function       result
  =============  ==================================================
  ARGMAX/ARGMIN  first row-major flat index of the extreme element
                 (as :func:`argmax`/:func:`argmin`, INCREASING)
  AVERAGE        :math:`\frac{1}{N}\sum_i x_i`
  L1             :math:`\sum_i |x_i|`
  L2             :math:`\sqrt{\sum_i x_i^2}`
  LOG_SUM        :math:`\log \sum_i x_i`
  LOG_SUM_EXP    :math:`\log \sum_i e^{x_i}`, computed stably
  MAX/MIN        the extreme element, bit for bit: NaN if any element is
                 NaN (the one with the largest bits); MAX of both zeros
                 is +0.0, MIN -0.0 (IEEE 754-2019 maximum/minimum)
  MULTIPLY       :math:`\prod_i x_i`
  SUM            :math:`\sum_i x_i`
  SUM_SQUARE     :math:`\sum_i x_i^2`
  =============  ==================================================

  Result types are ``jnp``'s: SUM, MULTIPLY, L1 and SUM_SQUARE of bool and of
  integers narrower than JAX's default integer give the default integer
  (unsigned: the default unsigned), as ``jnp.sum``; AVERAGE, L2, LOG_SUM and
  LOG_SUM_EXP of bool and integers give float32 (float64 for 64-bit integers),
  as ``jnp.mean``; ``promote_integers=False`` keeps DirectML's rule (integer
  results in the input's type, wrapping, bool's in int32, as ``jnp.sum``; no
  integer AVERAGE, L2, LOG_SUM or LOG_SUM_EXP). Integers are reduced in the result type and wrap there;
  float16 and bfloat16 accumulate in float32 and round once at the end.
  A block with no elements gives SUM's 0, MULTIPLY's 1, AVERAGE's NaN
  (``jnp.mean``'s bits: NaN+NaNj for complex numbers) and LOG_SUM/LOG_SUM_EXP's
  -inf, as ``jnp``; MAX, MIN, ARGMAX and ARGMIN need
  one element at least. Complex numbers are reduced by SUM, MULTIPLY,
  AVERAGE, SUM_SQUARE, LOG_SUM and LOG_SUM_EXP, and ordered by MAX/MIN as in
  JAX (real part, then imaginary part). Every function but ARGMAX/ARGMIN is
  differentiable.

  Args:
    x: array of any numeric dtype or bool, any rank and shape; rank 0 (a
      Python scalar included) is reduced as its one element.
    function: a :class:`ReduceFunction` or a name: DirectML's (``"sum"``,
      ``"log_sum_exp"``, ``"average"``, ...) or the one jnp, ONNX or WebNN use
      (``"mean"``, ``"prod"``, ``"logsumexp"``, ``"ReduceSumSquare"``,
      ``"reduceProduct"``, ...); case, underscores and a ``reduce`` prefix are
      ignored.
    axis: an axis or a tuple of distinct axes (negative count from the end),
      static Python ints; ``None`` (default) means every axis, ``()`` none.
    keepdims: keep reduced axes with size 1 (DirectML's layout); default
      ``False``, as ``jnp.sum``.
    promote_integers: ``True`` (default): ``jnp``'s result types, as above;
      ``False``: integer results in the input's type (DirectML's REDUCE, and
      ``jnp.sum(..., promote_integers=False)``).
    index_dtype: output dtype of ARGMAX/ARGMIN: ``None`` (default) for JAX's
      default integer (as ``jnp.argmax``), or int32, int64, uint32 or uint64;
      ignored by the other functions.

  Returns:
    The reduction, of the result type above (``index_dtype`` for
    ARGMAX/ARGMIN).

  Raises:
    DescriptorError: at trace time, for a bad function, axes or index dtype,
      complex ``x`` with L1, L2, ARGMAX or ARGMIN, an empty block for MAX, MIN,
      ARGMAX or ARGMIN, or an integer ``x`` with a floating-only function and
      ``promote_integers=False``.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> x = jnp.array([[1., 2., 3.], [3., 0., 4.], [2., 4., 2.]])
    >>> dml.reduce(x, "sum", 0).tolist()
    [6.0, 6.0, 9.0]
    >>> dml.reduce(x, dml.ReduceFunction.MAX, keepdims=True).tolist()
    [[4.0]]
    >>> dml.reduce(x, "mean", 1).tolist() == dml.reduce(x, "average", 1).tolist()
    True
    >>> small = jnp.array([100, 100, 100], jnp.int8)
    >>> dml.reduce(small, "sum").tolist(), dml.reduce(small, "sum", promote_integers=False).tolist()
    (300, 44)
  """
  p = Problems("reduce")
  array = dtypes.as_array(p, "x", x, narrow=True)
  canonical = canonical_function(p, "function", function)
  index = dtypes.canonical_index_dtype(p, "index_dtype", index_dtype)
  canonical_axes = types = None
  if array is not None and canonical is None:  # the axes' own rules, whatever the function
    axes_lib.canonical_axes(p, "axis", axis, array.ndim, allow_negative=True, allow_empty=True)
  if array is not None and canonical is not None:
    types = functional_types(p, np.dtype(array.dtype), canonical, promote_integers=bool(promote_integers))
    if canonical in _ARG_FUNCTIONS:
      if arg_reduce.require_ordered(p, canonical.name.lower(), np.dtype(array.dtype)):
        name = canonical.name.lower()
        canonical_axes = arg_reduce.functional_axes(p, name, array.shape, axis, index, allow_empty=True)
    else:
      canonical_axes = axes_lib.canonical_axes(p, "axis", axis, array.ndim, allow_negative=True, allow_empty=True)
      if canonical_axes is not None and canonical in _EXTREMES:
        name = canonical.name.lower()
        statement = (
          f"zero-size array to reduction operation {name} which has no identity: every reduced axis needs size 1 "
          f"or more (as for jnp.{name}); reduce over other axes, or use jnp.{name}(x, axis, initial=...)"
        )
        if not axes_lib.nonempty_blocks(p, "x", array.shape, canonical_axes, statement):
          canonical_axes = None
  p.raise_if_any()
  assert array is not None and canonical is not None and canonical_axes is not None and index is not None
  assert types is not None
  work, result = types
  return _program(
    array,
    function=canonical,
    axes=canonical_axes,
    keepdims=bool(keepdims),
    work=work,
    result=result,
    index_dtype=index if canonical in _ARG_FUNCTIONS else _UNUSED_INDEX_DTYPE,
    choice=platform.current(),
  )


_FIELDS_IN = ("input_tensor",)
_FIELDS_OUT = ("output_tensor",)
_DESCRIPTOR = fields.descriptor(x="input_tensor", axis="axes", index_dtype="output_tensor.data_type")


def _output_types(function: ReduceFunction, input_tensor: TensorDesc) -> tuple[DataType, ...]:
  return arg_reduce.INDEX_DATA_TYPES if function in _ARG_FUNCTIONS else (DataType(input_tensor.data_type),)


def _output(function: Any, input_tensor: Any, axes: Any, output_data_type: Any) -> tuple[ReduceFunction, TensorDesc]:
  """The function and output descriptor ``from_inputs`` fills in (raising for a bad input or attribute)."""
  p = Problems("REDUCE")
  canonical = canonical_function(p, "function", function)
  sizes = data_type = None
  if tensor_desc.well_formed(p, "input_tensor", input_tensor):
    dtype = dtypes.numpy_dtype(input_tensor.data_type)
    axes = _check_reduce(p, _DESCRIPTOR, input_tensor.sizes, dtype, canonical, axes, None, allow_negative=False)
    if axes is not None:
      sizes = axes_lib.reduced_shape(input_tensor.sizes, axes)
    if canonical is not None:
      allowed = _output_types(canonical, input_tensor)
      if output_data_type is None:
        data_type = allowed[0]
      else:
        data_type = tensor_desc.data_type_option(p, "output_data_type", output_data_type, allowed)
  p.raise_if_any()
  assert canonical is not None and sizes is not None and data_type is not None
  return canonical, TensorDesc(data_type, sizes)


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
    tensor_desc.output_type_matches(p, "output_tensor", desc.output_tensor, _output_types(function, source))
    dtype = dtypes.numpy_dtype(source.data_type)
    axes = _check_reduce(p, _DESCRIPTOR, source.sizes, dtype, function, desc.axes, index_dtype, allow_negative=False)
    if axes is not None:
      tensor_desc.output_sizes_match(p, "output_tensor", desc.output_tensor, axes_lib.reduced_shape(source.sizes, axes))
  p.raise_if_any()
  assert function is not None and axes is not None
  (x,) = descriptor_path.input_arrays(desc, inputs, _FIELDS_IN)
  index_dtype = dtypes.numpy_dtype(desc.output_tensor.data_type) if function in _ARG_FUNCTIONS else _UNUSED_INDEX_DTYPE
  dtype = np.dtype(x.dtype)
  return _program(
    x,
    function=function,
    axes=axes,
    keepdims=True,
    work=dtype,
    result=dtype,
    index_dtype=index_dtype,
    choice=platform.current(),
  )
