"""ONNX-semantics wrappers of the dmljax operators: TopK, ArgMax/ArgMin, GatherND, Reduce* and OneHot.

Each function maps ONNX's attributes onto one dmljax call and adds nothing else to the computation, so
gradients, ``jit``, ``vmap`` and sharding are those of the dmljax operator underneath. Everything that
ONNX feeds as a tensor but JAX needs static (TopK's ``K``, the reductions' ``axes``, OneHot's ``depth``)
is taken here as a Python value or a concrete array.

Index outputs (TopK's indices, ArgMax/ArgMin) are int64, ONNX's index type, when ``jax_enable_x64`` is
on, and int32 otherwise (see :func:`index_dtype`).

Static parameters go through the parsers of the dmljax operators themselves, so the same value is refused
the same way on both APIs (``K=2.7``, ``k=True``, ``axis=1.0`` and ``batch_dims=1.7`` are errors, never
truncated); a tensor-valued one (``K``, ``axes``, ``depth``) is first read from its concrete array.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from dmljax._src import axes as axes_lib
from dmljax._src import dtypes
from dmljax._src.arg_reduce import argmax as _dml_argmax
from dmljax._src.arg_reduce import argmin as _dml_argmin
from dmljax._src.errors import Problems
from dmljax._src.gather_nd import gather_nd as _dml_gather_nd
from dmljax._src.one_hot import one_hot as _dml_one_hot
from dmljax._src.reduce import ReduceFunction
from dmljax._src.reduce import reduce as _dml_reduce
from dmljax._src.top_k import top_k as _dml_top_k

# ONNX operator name -> the dmljax reduction it is.
REDUCE_FUNCTIONS: dict[str, ReduceFunction] = {
  "ReduceSum": ReduceFunction.SUM,
  "ReduceMean": ReduceFunction.AVERAGE,
  "ReduceMax": ReduceFunction.MAX,
  "ReduceMin": ReduceFunction.MIN,
  "ReduceProd": ReduceFunction.MULTIPLY,
  "ReduceL1": ReduceFunction.L1,
  "ReduceL2": ReduceFunction.L2,
  "ReduceLogSum": ReduceFunction.LOG_SUM,
  "ReduceLogSumExp": ReduceFunction.LOG_SUM_EXP,
  "ReduceSumSquare": ReduceFunction.SUM_SQUARE,
}


def _from_tensor(p: Problems, field: str, value: Any, *, scalar: bool) -> Any:
  """:func:`axes.from_tensor`, refusing by name an array of Python objects (NumPy's ``object`` dtype)."""
  if isinstance(value, (np.ndarray, np.generic)) and np.asarray(value).dtype == object:
    p.add(
      f"{field} must be a tensor of integers (an array of dtype object holds Python objects, such as None)",
      f"{field}.dtype=object",
    )
    return None
  return axes_lib.from_tensor(p, field, value, scalar=scalar)


def index_dtype() -> np.dtype:
  """The dtype of index outputs: int64 (ONNX's) with ``jax_enable_x64``, int32 without it.

  Example:
    >>> import dmljax.onnx as donnx
    >>> donnx.index_dtype().name
    'int32'
  """
  return np.dtype(np.int64) if dtypes.x64_enabled() else np.dtype(np.int32)


def top_k(
  x: ArrayLike, k: Any, *, axis: int = -1, largest: bool = True, sorted: bool = True
) -> tuple[jax.Array, jax.Array]:
  """ONNX TopK (opsets 1, 10 and 11+): the ``k`` largest (or smallest) elements along ``axis``.

  Ties keep ascending index order in both directions (ONNX's rule); NaN counts as larger than +inf
  (dmljax's order, which ONNX leaves open). ``sorted=False`` is allowed and returns them sorted anyway.

  Args:
    x: a numeric array.
    k: the count, a Python int or a concrete one-element array (ONNX's ``K`` input).
    axis: the axis to select along; negative counts from the end.
    largest: the largest elements (``True``, default) or the smallest.
    sorted: accepted for ONNX's sake; the result is always sorted.

  Returns:
    ``(values, indices)``; indices of :func:`index_dtype`.

  Example:
    >>> import dmljax.onnx as donnx, jax.numpy as jnp
    >>> values, indices = donnx.top_k(jnp.array([[1., 3., 3., 2.]]), 2, axis=1)
    >>> values.tolist(), indices.tolist()
    ([[3.0, 3.0]], [[1, 2]])
  """
  del sorted  # Always sorted, which ONNX allows for sorted=0.
  p = Problems("onnx.TopK")
  count = _from_tensor(p, "K", k, scalar=True)
  p.raise_if_any()
  return _dml_top_k(x, count, axis=axis, direction="decreasing" if largest else "increasing", index_dtype=index_dtype())


def _arg_extreme(find_max: bool, x: ArrayLike, axis: int, keepdims: bool, select_last_index: bool) -> jax.Array:
  function = _dml_argmax if find_max else _dml_argmin
  return function(
    x,
    axis,
    ties="last" if select_last_index else "first",
    keepdims=bool(keepdims),
    index_dtype=index_dtype(),
  )


def argmax(x: ArrayLike, *, axis: int = 0, keepdims: bool = True, select_last_index: bool = False) -> jax.Array:
  """ONNX ArgMax: the index of the largest element along ``axis``.

  The first index on ties, or the last with ``select_last_index``. A NaN counts as the largest
  (dmljax's rule, as NumPy's ``argmax``).

  Example:
    >>> import dmljax.onnx as donnx, jax.numpy as jnp
    >>> donnx.argmax(jnp.array([[2., 2.], [3., 1.]]), axis=1, select_last_index=True).tolist()
    [[1], [0]]
  """
  return _arg_extreme(True, x, axis, keepdims, select_last_index)


def argmin(x: ArrayLike, *, axis: int = 0, keepdims: bool = True, select_last_index: bool = False) -> jax.Array:
  """ONNX ArgMin: the index of the smallest element along ``axis``.

  The first index on ties, or the last with ``select_last_index``. A NaN counts as the smallest
  (dmljax's rule, as NumPy's ``argmin``).

  Example:
    >>> import dmljax.onnx as donnx, jax.numpy as jnp
    >>> donnx.argmin(jnp.array([[2., 2.], [3., 1.]]), axis=1, keepdims=False).tolist()
    [0, 1]
  """
  return _arg_extreme(False, x, axis, keepdims, select_last_index)


def gather_nd(data: ArrayLike, indices: ArrayLike, *, batch_dims: int = 0) -> jax.Array:
  """ONNX GatherND (opsets 11, 12+ with ``batch_dims``).

  A negative index counts from the end once. An index still out of range is clamped to the nearest
  valid one (dmljax's policy; ONNX Runtime raises at run time instead).

  Example:
    >>> import dmljax.onnx as donnx, jax.numpy as jnp
    >>> donnx.gather_nd(jnp.array([[0, 1], [2, 3]]), jnp.array([[1, 0], [0, -1]])).tolist()
    [2, 1]
  """
  return _dml_gather_nd(data, indices, batch_dims=batch_dims)


def reduce(
  operator: str, data: ArrayLike, axes: Any = None, *, keepdims: bool = True, noop_with_empty_axes: bool = False
) -> jax.Array:
  """An ONNX reduction by its operator name (``"ReduceSum"``, ..., ``"ReduceSumSquare"``).

  ``axes`` is ``None``, an int, a sequence or a concrete 1-D array (ONNX's attribute or input). No axes
  (``None`` or empty) reduce over every axis, unless ``noop_with_empty_axes``: then every element is
  reduced on its own (the function applied elementwise, as ONNX's reference implementation does).

  Example:
    >>> import dmljax.onnx as donnx, jax.numpy as jnp
    >>> donnx.reduce("ReduceLogSumExp", jnp.zeros((2, 4)), [1], keepdims=False).tolist()
    [1.3862943649291992, 1.3862943649291992]
  """
  p = Problems(f"onnx.{operator}")
  function = REDUCE_FUNCTIONS.get(operator)
  p.require(function is not None, f"operator must be one of {', '.join(REDUCE_FUNCTIONS)}", repr(operator))
  p.raise_if_any()
  assert function is not None
  canonical = _from_tensor(p, "axes", axes, scalar=False)
  p.raise_if_any()
  if canonical is None or (isinstance(canonical, (tuple, list)) and not canonical):
    canonical = () if noop_with_empty_axes else None
  if function in (ReduceFunction.MAX, ReduceFunction.MIN):
    empty = _empty_extreme(data, function == ReduceFunction.MAX, canonical, bool(keepdims))
    if empty is not None:
      return empty
  # ONNX's reductions keep the input's type: integer results in it (no widening), no integer mean.
  return _dml_reduce(data, function, canonical, keepdims=bool(keepdims), promote_integers=False)


def _empty_extreme(data: ArrayLike, find_max: bool, axes: Any, keepdims: bool) -> jax.Array | None:
  """ReduceMax/ReduceMin over a size-0 reduced axis: ONNX's value of an empty set, the type's lowest (highest) value
  (-inf, inf; the integer extremes; False, True), where dmljax's MAX/MIN, as ``jnp.max``, has none. ``None``
  where no reduced axis is empty (or the axes are invalid: dmljax's reduce then says why)."""
  shape = np.shape(data)
  rank = len(shape)
  given = tuple(range(rank)) if axes is None else (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
  if not all(isinstance(a, (int, np.integer)) and -rank <= a < rank for a in given):
    return None
  reduced = {int(a) % rank for a in given}
  if not any(shape[a] == 0 for a in reduced):
    return None
  dtype = np.dtype(jnp.asarray(data).dtype)
  if dtype == np.dtype(bool):
    fill: Any = not find_max
  elif dtypes.is_integer(dtype):
    integers = jnp.iinfo(dtype)
    fill = integers.min if find_max else integers.max
  else:  # a float type without infinities has its largest finite values there
    infinite = bool(np.isinf(np.array(np.inf).astype(dtype)))
    floats = jnp.finfo(dtype)
    fill = (-np.inf if infinite else floats.min) if find_max else (np.inf if infinite else floats.max)
  out = tuple(1 if d in reduced else s for d, s in enumerate(shape) if keepdims or d not in reduced)
  return jnp.full(out, fill, dtype)


def _named_reduce(operator: str) -> Any:
  def reduction(
    data: ArrayLike, axes: Any = None, *, keepdims: bool = True, noop_with_empty_axes: bool = False
  ) -> jax.Array:
    return reduce(operator, data, axes, keepdims=keepdims, noop_with_empty_axes=noop_with_empty_axes)

  function = REDUCE_FUNCTIONS[operator]
  reduction.__name__ = reduction.__qualname__ = "reduce_" + function.name.lower()
  reduction.__doc__ = (
    f"ONNX {operator}: DirectML's {function.name} reduction over ``axes`` (see :func:`reduce` for ``axes``, "
    "``keepdims`` and ``noop_with_empty_axes``)."
  )
  return reduction


reduce_sum = _named_reduce("ReduceSum")
reduce_mean = _named_reduce("ReduceMean")
reduce_max = _named_reduce("ReduceMax")
reduce_min = _named_reduce("ReduceMin")
reduce_prod = _named_reduce("ReduceProd")
reduce_l1 = _named_reduce("ReduceL1")
reduce_l2 = _named_reduce("ReduceL2")
reduce_log_sum = _named_reduce("ReduceLogSum")
reduce_log_sum_exp = _named_reduce("ReduceLogSumExp")
reduce_sum_square = _named_reduce("ReduceSumSquare")
for _name, _f in (("mean", reduce_mean), ("prod", reduce_prod)):
  _f.__name__ = _f.__qualname__ = f"reduce_{_name}"


def one_hot(indices: ArrayLike, depth: Any, values: ArrayLike, *, axis: int = -1) -> jax.Array:
  """ONNX OneHot (opset 11+): ``indices.shape`` with a new axis of length ``depth`` inserted at ``axis``.

  An index in ``[0, depth)`` sets that position, one in ``[-depth, -1]`` counts from the end, and any
  other leaves its whole sequence at the off value. Non-integer indices are truncated towards zero
  first, and a non-integer ``depth`` too, as ONNX specifies.

  Args:
    indices: an array of any numeric dtype, rank 1 or more (ONNX's rule).
    depth: a Python number or a concrete one-element array.
    values: ``[off_value, on_value]``, exactly two elements; the output has their dtype.
    axis: where the new axis goes, in ``[-(rank + 1), rank]``.

  Example:
    >>> import dmljax.onnx as donnx, jax.numpy as jnp
    >>> donnx.one_hot(jnp.array([0, -1, 3]), 3, jnp.array([0., 1.])).tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
  """
  p = Problems("onnx.OneHot")
  count = one_hot_depth(p, depth)
  index_array = dtypes.as_array(p, "indices", indices)
  value_array = dtypes.as_array(p, "values", values)
  if index_array is not None:
    p.require(index_array.ndim >= 1, "indices must have rank 1 or more (ONNX's rule)", "indices.shape=()")
  if value_array is not None:
    p.require(
      value_array.size == 2,
      "values must have exactly two elements, [off_value, on_value]",
      f"values.shape={value_array.shape}",
    )
  p.raise_if_any()
  assert index_array is not None and value_array is not None
  if not dtypes.is_integer(index_array.dtype):
    index_array = index_array.astype(index_dtype())
  flat = value_array.reshape(-1)
  return _dml_one_hot(
    index_array, count, axis=axis, on_value=flat[1], off_value=flat[0], dtype=flat.dtype, negative_indices="from_end"
  )


def one_hot_depth(p: Problems, depth: Any) -> Any:
  """OneHot's ``depth`` as dmljax's ``one_hot`` takes it: a non-integer one truncated towards zero (ONNX casts it to
  int64); anything else is left to ``one_hot``'s own check (bools and non-finite values are refused)."""
  count = _from_tensor(p, "depth", depth, scalar=True)
  if isinstance(count, (float, np.floating)) and np.isfinite(count):
    return int(count)
  return count
