"""ONE_HOT: sequences that are OffValue everywhere except OnValue at an index.

DirectML semantics (``DML_ONE_HOT_OPERATOR_DESC``; docs/semantics.rst, "ONE_HOT"):

* indices have the output's rank and sizes, except size 1 on ``axis``; the
  output has the depth D there;
* the values tensor has at least two elements: flat element 0 is OffValue,
  flat element 1 is OnValue; the output has the values' dtype;
* an index in ``[0, D)`` sets that position; a signed index in ``[-D, -1]``
  counts from the end; anything else (``>= D``, ``< -D``, a huge unsigned
  value) leaves the whole sequence at OffValue.

Differentiation (docs/semantics.rst): the output is linear in the values tensor: the
gradient of OnValue is the sum of the cotangents at the hot positions, that of
OffValue the sum over all others (float32 sums for float16 and bfloat16), and
every other element of ``values`` gets 0. The indices carry float0 (zero)
tangents.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from dmljax._src import autodiff, descriptor_path, dtypes, index_math, tensor_desc
from dmljax._src import axes as axes_lib
from dmljax._src.dtypes import DataType
from dmljax._src.errors import Problems
from dmljax._src.tensor_desc import TensorDesc


@dataclasses.dataclass(frozen=True)
class OneHotDesc:
  """``DML_ONE_HOT_OPERATOR_DESC``: sequences of OffValue with OnValue at each index.

  The depth D is ``output_tensor.sizes[axis]``. An index in ``[0, D)`` sets
  that position, a signed index in ``[-D, -1]`` counts from the end, and any
  other index leaves its whole sequence at OffValue. :func:`one_hot` is the
  functional form.

  Attributes:
    indices_tensor: ``IndicesTensor``: UINT32 (INT32, INT64, UINT32 or UINT64
      from feature level 3_0), the output's sizes except 1 on ``axis``.
    values_tensor: ``ValuesTensor``: at least two elements, at the same rank;
      flat element 0 is OffValue, flat element 1 is OnValue.
    output_tensor: ``OutputTensor``: the values' data type.
    axis: ``Axis``, in ``[0, rank - 1]``.

  Raises:
    DescriptorError: from :func:`execute` (constructing a descriptor never
      raises), at trace time and listing every broken rule: a tensor
      descriptor, data type or rank outside the feature level's table, unequal
      ranks, ``axis`` out of range, indices without size 1 on ``axis``, fewer
      than two values, a wrong output descriptor, or arrays that do not
      match.

  Example:
    >>> import dmljax as dml, numpy as np
    >>> desc = dml.OneHotDesc(dml.TensorDesc(dml.DataType.INT32, (2, 1)),
    ...                       dml.TensorDesc(dml.DataType.FLOAT32, (1, 2)),
    ...                       dml.TensorDesc(dml.DataType.FLOAT32, (2, 3)), axis=1)
    >>> dml.execute(desc, np.array([[2], [-1]], np.int32), np.array([[0., 1.]], np.float32)).tolist()
    [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]
  """

  indices_tensor: TensorDesc
  values_tensor: TensorDesc
  output_tensor: TensorDesc
  axis: int


def _check_one_hot(
  p: Problems,
  indices_shape: tuple[int, ...],
  values_shape: tuple[int, ...],
  depth: Any,
  axis: Any,
  *,
  indices: str,
  values: str,
  allow_negative_axis: bool,
) -> int | None:
  """Shared rules; returns the canonical axis."""
  if not axes_lib.rank_in_range(p, indices, indices_shape):
    return None
  ok = p.require(
    math.prod(values_shape) >= 2,
    f"{values} must have at least 2 elements (OffValue, OnValue)",
    f"{values} shape {values_shape}",
  )
  ok &= p.require(
    axes_lib.is_int(depth) and depth >= 1,
    "depth must be an integer >= 1",
    f"depth={depth!r}",
  ) and dtypes.positions_fit(p, "depth", int(depth))
  canonical = axes_lib.canonical_axis(p, "axis", axis, len(indices_shape), allow_negative=allow_negative_axis)
  if canonical is not None:
    ok &= p.require(
      indices_shape[canonical] == 1,
      f"{indices} must have size 1 on axis {canonical}",
      f"{indices} shape {indices_shape}",
    )
  return canonical if ok else None


@functools.partial(jax.jit, static_argnames=("depth", "axis"))
def _one_hot(indices: jax.Array, values: jax.Array, *, depth: int, axis: int) -> jax.Array:
  valid, position = index_math.wrap_or_invalid(indices, depth)
  out_shape = (*indices.shape[:axis], depth, *indices.shape[axis + 1 :])
  hot = valid & (lax.broadcasted_iota(position.dtype, out_shape, axis) == position)
  return autodiff.linear_in_float32(_select, values, hot)


def _select(values: jax.Array, hot: jax.Array) -> jax.Array:
  flat = values.reshape(-1)
  return jnp.where(hot, flat[1], flat[0])


def one_hot(indices: ArrayLike, values: ArrayLike, depth: int, *, axis: int = -1) -> jax.Array:
  r"""One-hot sequences of length ``depth`` along ``axis``, DirectML ONE_HOT.

  With :math:`v` = ``values.reshape(-1)`` and :math:`D` = ``depth``:

  .. math::
     \mathrm{out}[\ldots, j, \ldots] = \begin{cases} v_1 & j = \mathrm{indices}[\ldots, 0, \ldots] \bmod D
     \text{ and } -D \le \mathrm{indices} < D \\ v_0 & \text{otherwise} \end{cases}

  Args:
    indices: integer array (any signed or unsigned width), rank 1 to 8, with
      size 1 on ``axis`` (DirectML's layout, not jax.nn.one_hot's).
    values: array of at least two elements: ``values.flat[0]`` is OffValue,
      ``values.flat[1]`` OnValue; any shape.
    depth: the length D of every sequence.
    axis: the axis that holds the sequences; negative counts from the end.

  Returns:
    ``indices.shape`` with ``depth`` on ``axis``, of ``values``' dtype.

  Raises:
    DescriptorError: at trace time, for bad ranks, a non-integer ``indices``,
      ``axis`` out of range, a size other than 1 on ``axis``, fewer than two
      values or ``depth < 1``.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> dml.one_hot(jnp.array([[0], [3], [-1], [9]]), jnp.array([0., 1.]), 3).tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
  """
  p = Problems("one_hot")
  index_array = dtypes.as_array(p, "indices", indices)
  value_array = dtypes.as_array(p, "values", values)
  canonical_axis = None
  if index_array is not None and value_array is not None:
    if p.require(
      dtypes.is_integer(index_array.dtype),
      "indices must have an integer dtype",
      f"indices dtype={np.dtype(index_array.dtype).name}",
    ):
      canonical_axis = _check_one_hot(
        p,
        index_array.shape,
        value_array.shape,
        depth,
        axis,
        indices="indices",
        values="values",
        allow_negative_axis=True,
      )
  p.raise_if_any()
  assert index_array is not None and value_array is not None and canonical_axis is not None
  return _one_hot(index_array, value_array, depth=int(depth), axis=canonical_axis)


_FIELDS_IN = ("indices_tensor", "values_tensor")
_FIELDS_OUT = ("output_tensor",)


def execute_one_hot(desc: OneHotDesc, inputs: Sequence[Any], feature_level: Any) -> jax.Array:
  """The descriptor path of ONE_HOT (see :func:`dmljax.execute`)."""
  p = Problems("ONE_HOT")
  tensors_ok = descriptor_path.check_descriptor(
    p, desc, inputs, input_fields=_FIELDS_IN, output_fields=_FIELDS_OUT, table="ONE_HOT", feature_level=feature_level
  )
  axis = None
  if tensors_ok:
    out = desc.output_tensor
    axis = axes_lib.canonical_axis(p, "axis", desc.axis, desc.indices_tensor.rank, allow_negative=False)
    if out.rank != desc.indices_tensor.rank:
      axis = None
    if axis is not None:
      axis = _check_one_hot(
        p,
        desc.indices_tensor.sizes,
        desc.values_tensor.sizes,
        out.sizes[axis],
        axis,
        indices="indices_tensor.sizes",
        values="values_tensor",
        allow_negative_axis=False,
      )
    if axis is not None:
      sizes = (*desc.indices_tensor.sizes[:axis], out.sizes[axis], *desc.indices_tensor.sizes[axis + 1 :])
      tensor_desc.output_matches(p, "output_tensor", out, sizes, [DataType(desc.values_tensor.data_type)])
  p.raise_if_any()
  assert axis is not None
  indices, values = descriptor_path.input_arrays(desc, inputs, _FIELDS_IN)
  return _one_hot(indices, values, depth=desc.output_tensor.sizes[axis], axis=axis)
