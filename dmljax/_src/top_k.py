r"""TOP_K and TOP_K1: the K largest or smallest elements of every sequence along an axis.

DirectML semantics (``DML_TOP_K1_OPERATOR_DESC``; docs/semantics.rst, "TOP_K1 and TOP_K"):

* values are sorted, descending for DECREASING and ascending for INCREASING;
* equal values appear in ascending index order, in both directions;
* NaN ranks above +inf (NaNs first when DECREASING, last when INCREASING), all
  NaNs are equal, -0.0 equals +0.0, and values come back bit-exactly;
* indices count from the start of the sequence; ``1 <= K <= size of axis``.

TOP_K (v0) is TOP_K1 with DECREASING.

Differentiation (docs/semantics.rst): the values are a selection of the input,
:math:`\mathrm{values} = s[i]`, differentiable in forward and reverse mode to
any order. Each value's cotangent goes to the element at its returned index,
so among tied elements only the ones returned receive gradient (the first in
index order); the second derivative is zero. The reverse pass is a scatter-add
of the K cotangents into an input-sized zero buffer: O(input + output)
memory, never O(input × K). The indices carry float0 (zero) tangents.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from dmljax._src import axes as axes_lib
from dmljax._src import descriptor_path, dtypes, fields, platform, selection, symbolic, tensor_desc
from dmljax._src.axes import AxisDirection
from dmljax._src.dtypes import DataType
from dmljax._src.errors import Problems
from dmljax._src.fields import FUNCTIONAL, Fields
from dmljax._src.tensor_desc import TensorDesc


@dataclasses.dataclass(frozen=True)
class TopKDesc:
  """``DML_TOP_K_OPERATOR_DESC``: the ``k`` largest elements of every sequence along ``axis``.

  TOP_K1 with ``axis_direction`` DECREASING: values sorted descending, equal
  values (-0.0 and +0.0, any two NaNs) in ascending index order, NaN above
  +inf. :func:`execute` returns ``(values, indices)``; :func:`top_k` is the
  functional form.

  Attributes:
    input_tensor: ``InputTensor``, the tensor to select from.
    output_value_tensor: ``OutputValueTensor``: the input's data type and
      sizes, except ``k`` on ``axis``.
    output_index_tensor: ``OutputIndexTensor``: UINT32 (UINT64 from feature
      level 5_0), same sizes; indices count from the start of the sequence.
    axis: ``Axis``, in ``[0, rank - 1]``.
    k: ``K``, with ``1 <= k <= input_tensor.sizes[axis]``.

  Raises:
    DescriptorError: from :func:`execute` (constructing a descriptor never
      raises), at trace time and listing every broken rule: a tensor
      descriptor, data type or rank outside the feature level's table (TOP_K1's),
      unequal ranks, ``axis`` or ``k`` out of range, an index type too narrow
      for the axis, output descriptors other than the operator's outputs, or
      arrays that do not match their descriptors.

  Example:
    >>> import dmljax as dml, numpy as np
    >>> f32, u32 = dml.DataType.FLOAT32, dml.DataType.UINT32
    >>> desc = dml.TopKDesc(dml.TensorDesc(f32, (1, 4)), dml.TensorDesc(f32, (1, 2)),
    ...                     dml.TensorDesc(u32, (1, 2)), axis=1, k=2)
    >>> values, indices = dml.execute(desc, np.array([[0., 1., 10., 11.]], np.float32))
    >>> values.tolist(), indices.tolist()
    ([[11.0, 10.0]], [[3, 2]])
  """

  input_tensor: TensorDesc
  output_value_tensor: TensorDesc
  output_index_tensor: TensorDesc
  axis: int
  k: int

  @classmethod
  def from_inputs(
    cls, input_tensor: TensorDesc, *, axis: int, k: int, index_data_type: DataType | str = DataType.UINT32
  ) -> TopKDesc:
    """The descriptor with its output tensors inferred from the input and the attributes.

    Raises:
      DescriptorError: for a malformed input descriptor or a bad ``axis``, ``k``
        or ``index_data_type`` (UINT32 or UINT64).

    Example:
      >>> import dmljax as dml, numpy as np
      >>> dml.TopKDesc.from_inputs(dml.TensorDesc(np.float32, (2, 5)), axis=1, k=3).output_index_tensor
      TensorDesc(data_type=<DataType.UINT32: 3>, sizes=(2, 3))
    """
    values, indices = _outputs("TOP_K", input_tensor, axis, k, index_data_type)
    return cls(input_tensor, values, indices, axis=axis, k=k)


@dataclasses.dataclass(frozen=True)
class TopK1Desc:
  """``DML_TOP_K1_OPERATOR_DESC``: the ``k`` largest or smallest elements of every sequence along ``axis``.

  DECREASING selects the largest, sorted descending; INCREASING the smallest,
  sorted ascending. In both directions equal values (-0.0 and +0.0, any two
  NaNs) appear in ascending index order and NaN ranks above +inf (first when
  DECREASING, last when INCREASING); values come back bit-exactly.
  :func:`execute` returns ``(values, indices)``; :func:`top_k` is the
  functional form.

  Attributes:
    input_tensor: ``InputTensor``, the tensor to select from.
    output_value_tensor: ``OutputValueTensor``: the input's data type and
      sizes, except ``k`` on ``axis``.
    output_index_tensor: ``OutputIndexTensor``: UINT32 (UINT64 from feature
      level 5_0), same sizes; indices count from the start of the sequence.
    axis: ``Axis``, in ``[0, rank - 1]``.
    k: ``K``, with ``1 <= k <= input_tensor.sizes[axis]`` (DirectML's page says
      "less than"; equality is accepted, as DirectML's own clients pass it).
    axis_direction: ``AxisDirection``, an :class:`AxisDirection`; default
      DECREASING (the largest, as TOP_K).

  Raises:
    DescriptorError: from :func:`execute` (constructing a descriptor never
      raises), at trace time and listing every broken rule: a tensor
      descriptor, data type or rank outside the feature level's table, unequal
      ranks, ``axis``, ``k`` or ``axis_direction`` out of range, an index type
      too narrow for the axis, output descriptors other than the operator's
      outputs, or arrays that do not match their descriptors.

  Example:
    >>> import dmljax as dml, numpy as np
    >>> f32, u32 = dml.DataType.FLOAT32, dml.DataType.UINT32
    >>> desc = dml.TopK1Desc(dml.TensorDesc(f32, (1, 4)), dml.TensorDesc(f32, (1, 3)),
    ...                      dml.TensorDesc(u32, (1, 3)), axis=1, k=3,
    ...                      axis_direction=dml.AxisDirection.INCREASING)
    >>> values, indices = dml.execute(desc, np.array([[1., 2., 2., 3.]], np.float32))
    >>> values.tolist(), indices.tolist()
    ([[1.0, 2.0, 2.0]], [[0, 1, 2]])
  """

  input_tensor: TensorDesc
  output_value_tensor: TensorDesc
  output_index_tensor: TensorDesc
  axis: int
  k: int
  axis_direction: AxisDirection = AxisDirection.DECREASING

  @classmethod
  def from_inputs(
    cls,
    input_tensor: TensorDesc,
    *,
    axis: int,
    k: int,
    axis_direction: AxisDirection = AxisDirection.DECREASING,
    index_data_type: DataType | str = DataType.UINT32,
  ) -> TopK1Desc:
    """The descriptor with its output tensors inferred from the input and the attributes.

    Raises:
      DescriptorError: for a malformed input descriptor or a bad ``axis``, ``k``
        or ``index_data_type`` (UINT32 or UINT64).

    Example:
      >>> import dmljax as dml, numpy as np
      >>> desc = dml.TopK1Desc.from_inputs(dml.TensorDesc(np.float32, (1, 4)), axis=1, k=2,
      ...                                  axis_direction=dml.AxisDirection.INCREASING)
      >>> dml.execute(desc, np.array([[3., 1., 2., 1.]], np.float32))[1].tolist()
      [[1, 3]]
    """
    values, indices = _outputs("TOP_K1", input_tensor, axis, k, index_data_type)
    return cls(input_tensor, values, indices, axis=axis, k=k, axis_direction=axis_direction)


def _check_top_k(
  p: Problems,
  f: Fields,
  shape: tuple[int, ...],
  axis: Any,
  k: Any,
  index_dtype: np.dtype | None,
  *,
  allow_negative_axis: bool,
) -> int | None:
  """The descriptor path's rules (rank 1 to 8, no size-0 dimension, ``1 <= k``); returns the canonical axis."""
  if not axes_lib.rank_in_range(p, f, "x", shape):
    return None
  axis = axes_lib.canonical_axis(p, f["axis"], axis, len(shape), allow_negative=allow_negative_axis)
  if axis is None:
    return None
  return axis if _check_k(p, f, shape, axis, k, index_dtype, least=1) is not None else None


def _check_k(
  p: Problems, f: Fields, shape: tuple[int, ...], axis: int, k: Any, index_dtype: np.dtype | None, *, least: int
) -> int | None:
  """``least <= k <= shape[axis]`` (1 for DirectML, 0 as ``jax.lax.top_k``), and indices that fit ``index_dtype``."""
  size = shape[axis]
  statement = f"k must satisfy {least} <= k <= {f.shape('x')}[axis] (= {size})"
  if symbolic.is_symbolic(size):
    statement += (
      f"; the axis is jax.export's symbolic dimension {size}: state its least value, e.g. "
      f"jax.export.symbolic_shape(..., constraints=['{size} >= {k}'])"
    )
  count = axes_lib.static_int(
    p,
    "k",
    k,
    statement,
    lambda k: symbolic.decide(lambda: least <= k <= size, otherwise=False),
    traced_advice=TRACED_K_ADVICE,
  )
  ok = count is not None
  if index_dtype is not None:
    ok &= dtypes.index_dtype_can_hold(p, f["index_dtype"], index_dtype, size - 1, f"axis {axis} of size {size}")
  return count if ok else None


TRACED_K_ADVICE = (
  ". Each new k traces and compiles the program anew. For a k that changes at run time, select a fixed maximum "
  "once and mask the rest (values, indices = dml.top_k(x, k_max); keep = jnp.arange(k_max) < k), or use "
  "dmljax.sampling.top_k_mask(logits, k), which takes k as an array"
)


def _output_sizes(shape: tuple[int, ...], axis: int, k: int) -> tuple[int, ...]:
  return (*shape[:axis], k, *shape[axis + 1 :])


@functools.partial(jax.jit, static_argnames=("k", "axis", "descending", "index_dtype", "choice"))
def _top_k(
  x: jax.Array, *, k: int, axis: int, descending: bool, index_dtype: np.dtype, choice: platform.Choice
) -> tuple[jax.Array, jax.Array]:
  del choice  # a static argument so that a program traced under another choice is not reused
  values, indices = selection.top_k_last_axis(jnp.moveaxis(x, axis, -1), k, descending)
  return jnp.moveaxis(values, -1, axis), jnp.moveaxis(indices.astype(index_dtype), -1, axis)


def top_k(
  x: ArrayLike,
  k: int,
  *,
  axis: int = -1,
  direction: AxisDirection | str = "decreasing",
  index_dtype: Any = jnp.int32,
) -> tuple[jax.Array, jax.Array]:
  r"""The ``k`` largest (or smallest) elements of every sequence along ``axis``, DirectML TOP_K1.

  For every sequence :math:`s` along ``axis``, returns the :math:`k` elements that
  come first in the order NaN > +inf > ... > -inf (reversed for INCREASING),
  sorted in that order, with their indices :math:`i` such that
  :math:`\mathrm{values} = s[i]`. Equal values (including -0.0 and +0.0, and any
  two NaNs) appear in ascending index order in both directions.

  Composes with ``jax.jit``, ``jax.vmap``, ``jax.grad`` and ``jax.export``. When
  ``x`` is sharded along ``axis`` (by ``jax.jit``'s ``in_shardings`` or a
  placed array, on a mesh with automatic or explicit axes), nothing needs to
  change: each device selects its own ``k`` candidates, offsets their indices
  by its shard's start, and only those ``k`` candidates per shard are
  all-gathered and merged, with exactly the unsharded values and indices (tie
  order included). Shardings of the other axes are kept. On automatic mesh
  axes this is a ``custom_partitioning`` rule, which ``jax.export`` cannot
  serialize inside a program for several devices; on explicit axes (the
  default of ``jax.make_mesh``) it is a ``shard_map``, which it can.

  Args:
    x: array of any integer or floating dtype (bfloat16 included) or bool
      (``False < True``), rank 1 or more, any sizes.
    k: number of elements to select, a static Python int with
      ``0 <= k <= x.shape[axis]`` (under ``jax.jit``, pass it as a static
      argument).
    axis: the axis to select along; negative counts from the end.
    direction: ``"decreasing"`` (largest first) or ``"increasing"`` (smallest
      first), or a :class:`AxisDirection`.
    index_dtype: int32 (default, as ``jax.lax.top_k``), int64, uint32 or
      uint64.

  Returns:
    ``(values, indices)``, both of ``x``'s shape except ``k`` on ``axis``;
    values have ``x``'s dtype, indices ``index_dtype``.

  Raises:
    DescriptorError: at trace time, for complex or rank-0 ``x``, a bad axis,
      ``k``, direction or index dtype (every problem listed at once); a
      traced ``k`` raises :class:`StaticArgumentError`.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> values, indices = dml.top_k(jnp.array([1., 3., 3., 2.]), 2)
    >>> values.tolist(), indices.tolist()
    ([3.0, 3.0], [1, 2])
  """
  p = Problems("top_k")
  array = dtypes.as_array(p, "x", x, narrow=True)
  canonical_direction = axes_lib.canonical_direction(p, "direction", direction)
  canonical_index = dtypes.canonical_index_dtype(p, "index_dtype", index_dtype)
  canonical_axis = count = None
  if array is not None:  # the shape rules hold whatever the dtype: both are reported
    p.require(
      not dtypes.is_complex(array.dtype),
      "top_k needs real x (complex numbers have no order; jax.lax.top_k refuses them too): pass jnp.abs(x) to "
      "order by magnitude, or x.real",
      f"x.dtype={np.dtype(array.dtype).name}",
    )
    if axes_lib.functional_rank(p, "x", array.shape, least=1):
      canonical_axis = axes_lib.canonical_axis(p, "axis", axis, array.ndim, allow_negative=True)
    if canonical_axis is not None:
      count = _check_k(p, FUNCTIONAL, array.shape, canonical_axis, k, canonical_index, least=0)
  p.raise_if_any()
  assert array is not None and canonical_axis is not None and canonical_index is not None and count is not None
  descending = canonical_direction == AxisDirection.DECREASING
  return _top_k_program(
    array, k=count, axis=canonical_axis, descending=descending, index_dtype=canonical_index, choice=platform.current()
  )


@functools.partial(jax.jit, static_argnames=("k", "axis", "descending", "index_dtype", "choice"))
def _top_k_program(
  x: jax.Array, *, k: int, axis: int, descending: bool, index_dtype: np.dtype, choice: platform.Choice
) -> tuple[jax.Array, jax.Array]:
  """:func:`_top_k` of validated input of any rank and size (bool ordered as uint8), with its conversions: the one
  program of both paths."""
  shape = _output_sizes(x.shape, axis, k)
  if k == 0 or x.size == 0:
    return jnp.zeros(shape, x.dtype), jnp.zeros(shape, index_dtype)
  ordered = x.astype(np.uint8) if dtypes.is_bool(x.dtype) else x
  if x.ndim > axes_lib.MAX_RANK:  # rows along the last axis, of rank 2
    rows = jnp.moveaxis(ordered, axis, -1)
    values, indices = _top_k_program(
      rows.reshape(-1, x.shape[axis]), k=k, axis=1, descending=descending, index_dtype=index_dtype, choice=choice
    )
    moved = (*rows.shape[:-1], k)
    return jnp.moveaxis(values.reshape(moved), -1, axis).astype(x.dtype), jnp.moveaxis(indices.reshape(moved), -1, axis)
  values, indices = _top_k(ordered, k=k, axis=axis, descending=descending, index_dtype=index_dtype, choice=choice)
  return (values.astype(x.dtype) if ordered is not x else values), indices


_INDEX_DATA_TYPES = (DataType.UINT32, DataType.UINT64)
_FIELDS_IN = ("input_tensor",)
_FIELDS_OUT = ("output_value_tensor", "output_index_tensor")
_DESCRIPTOR = fields.descriptor(x="input_tensor", index_dtype="output_index_tensor.data_type")


def _outputs(name: str, input_tensor: Any, axis: Any, k: Any, index_data_type: Any) -> tuple[TensorDesc, TensorDesc]:
  """The output descriptors :meth:`TopK1Desc.from_inputs` fills in (raising for a bad input or attribute)."""
  p = Problems(name)
  sizes = None
  if tensor_desc.well_formed(p, "input_tensor", input_tensor):
    axis = _check_top_k(p, _DESCRIPTOR, input_tensor.sizes, axis, k, None, allow_negative_axis=False)
    if axis is not None:
      sizes = _output_sizes(input_tensor.sizes, axis, k)
  index_type = tensor_desc.data_type_option(p, "index_data_type", index_data_type, _INDEX_DATA_TYPES)
  p.raise_if_any()
  assert sizes is not None and index_type is not None
  return TensorDesc(input_tensor.data_type, sizes), TensorDesc(index_type, sizes)


def execute_top_k(desc: TopKDesc | TopK1Desc, inputs: Sequence[Any], feature_level: Any) -> tuple[jax.Array, jax.Array]:
  """The descriptor path of TOP_K and TOP_K1 (see :func:`dmljax.execute`)."""
  name = "TOP_K1" if isinstance(desc, TopK1Desc) else "TOP_K"
  p = Problems(name)
  direction: AxisDirection | None = AxisDirection.DECREASING
  if isinstance(desc, TopK1Desc):
    direction = axes_lib.canonical_direction(p, "axis_direction", desc.axis_direction)
  tensors_ok = descriptor_path.check_descriptor(
    p,
    desc,
    inputs,
    input_fields=_FIELDS_IN,
    output_fields=_FIELDS_OUT,
    table=name,
    feature_level=feature_level,
  )
  axis = None
  if tensors_ok:
    source = desc.input_tensor
    index_type = DataType(desc.output_index_tensor.data_type)
    index_dtype = dtypes.numpy_dtype(index_type) if index_type in _INDEX_DATA_TYPES else None
    tensor_desc.output_type_matches(p, "output_value_tensor", desc.output_value_tensor, [DataType(source.data_type)])
    tensor_desc.output_type_matches(p, "output_index_tensor", desc.output_index_tensor, _INDEX_DATA_TYPES)
    axis = _check_top_k(p, _DESCRIPTOR, source.sizes, desc.axis, desc.k, index_dtype, allow_negative_axis=False)
    if axis is not None:
      sizes = _output_sizes(source.sizes, axis, desc.k)
      tensor_desc.output_sizes_match(p, "output_value_tensor", desc.output_value_tensor, sizes)
      tensor_desc.output_sizes_match(p, "output_index_tensor", desc.output_index_tensor, sizes)
  p.raise_if_any()
  assert axis is not None
  (x,) = descriptor_path.input_arrays(desc, inputs, _FIELDS_IN)
  return _top_k_program(
    x,
    k=int(desc.k),
    axis=axis,
    descending=direction == AxisDirection.DECREASING,
    index_dtype=dtypes.numpy_dtype(desc.output_index_tensor.data_type),
    choice=platform.current(),
  )
