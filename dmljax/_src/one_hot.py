"""ONE_HOT: sequences that are OffValue everywhere except OnValue at an index.

DirectML semantics (``DML_ONE_HOT_OPERATOR_DESC``; docs/semantics.rst, "ONE_HOT"):

* indices have the output's rank and sizes, except size 1 on ``axis``; the
  output has the depth D there;
* the values tensor has at least two elements: flat element 0 is OffValue,
  flat element 1 is OnValue; the output has the values' dtype;
* an index in ``[0, D)`` sets that position; a signed index in ``[-D, -1]``
  counts from the end; anything else (``>= D``, ``< -D``, a huge unsigned
  value) leaves the whole sequence at OffValue. The functional path counts
  negative indices from the end only with ``negative_indices="from_end"``;
  by default they set no position, as in ``jax.nn.one_hot``.

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
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
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

  @classmethod
  def from_inputs(cls, indices_tensor: TensorDesc, values_tensor: TensorDesc, *, depth: int, axis: int) -> OneHotDesc:
    """The descriptor with its output tensor inferred: the indices' sizes with ``depth`` on ``axis``.

    Raises:
      DescriptorError: for malformed input descriptors, fewer than two values,
        ``axis`` out of range or where the indices' size is not 1, or
        ``depth < 1``.

    Example:
      >>> import dmljax as dml, numpy as np
      >>> desc = dml.OneHotDesc.from_inputs(dml.TensorDesc(np.int32, (2, 1)), dml.TensorDesc(np.float32, (1, 2)),
      ...                                   depth=3, axis=1)
      >>> desc.output_tensor
      TensorDesc(data_type=<DataType.FLOAT32: 1>, sizes=(2, 3))
    """
    return cls(indices_tensor, values_tensor, _output(indices_tensor, values_tensor, depth, axis), axis=axis)


def _check_depth(p: Problems, field: str, depth: Any, *, least: int = 1) -> int | None:
  """The sequence length: a static int ``>= least`` (DirectML: 1; ``jax.nn.one_hot``: 0) that positions can count to."""
  value = axes_lib.static_int(p, field, depth, f"{field} must be an integer >= {least}", lambda d: d >= least)
  if value is None or not dtypes.positions_fit(p, field, value):
    return None
  return value


@functools.partial(jax.jit, static_argnames=("depth", "axis", "from_end"))
def _one_hot(indices: jax.Array, values: jax.Array, *, depth: int, axis: int, from_end: bool) -> jax.Array:
  """DirectML's layout: ``indices`` has size 1 on ``axis``; ``values.reshape(-1)[:2]`` is (off, on); ``from_end``:
  negative indices count from the end (DirectML's rule), else they set no position (``jax.nn.one_hot``'s)."""
  if not dtypes.is_integer(indices.dtype):
    indices = index_math.whole_numbers(indices)
  hot = index_math.hot_positions(indices, depth, axis, from_end=from_end)
  return autodiff.linear_in_float32(_select, values, hot)


def _as_bits(dtype: np.dtype) -> bool:
  """Whether values of ``dtype`` move as their bits: XLA:CPU selects and stacks bfloat16 and 8-bit floats through a
  wider float, which quiets a signalling NaN and drops a NaN's payload or sign (4-bit floats have no NaN)."""
  return dtypes.is_float(dtype) and dtype.itemsize < 4 and jnp.finfo(dtype).bits >= 8


@jax.custom_jvp
def _stacked_bits(off: jax.Array, on: jax.Array) -> jax.Array:
  """``jnp.stack([off, on])`` of a type that moves as its bits (:func:`_as_bits`); its derivative is the stack's."""
  bits = np.dtype(f"uint{np.dtype(off.dtype).itemsize * 8}")
  stacked = jnp.stack([jax.lax.bitcast_convert_type(off, bits), jax.lax.bitcast_convert_type(on, bits)])
  return jax.lax.bitcast_convert_type(stacked, off.dtype)


@_stacked_bits.defjvp
def _stacked_bits_jvp(primals: tuple[jax.Array, ...], tangents: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
  return _stacked_bits(*primals), jnp.stack(tangents)


def _select(values: jax.Array, hot: jax.Array) -> jax.Array:
  """OnValue where ``hot``, else OffValue, bit for bit.

  Floats narrower than 32 bits are selected as their bits (:func:`_as_bits`). Those types reach here through
  :func:`autodiff.linear_in_float32`, which never differentiates this function (their tangent is float32).
  """
  flat = values.reshape(-1)
  if _as_bits(np.dtype(flat.dtype)):
    bits = jax.lax.bitcast_convert_type(flat, np.dtype(f"uint{flat.dtype.itemsize * 8}"))
    return jax.lax.bitcast_convert_type(jnp.where(hot, bits[1], bits[0]), flat.dtype)
  return jnp.where(hot, flat[1], flat[0])


def _on_off_values(p: Problems, on_value: Any, off_value: Any, dtype: Any) -> jax.Array | None:
  """``[off_value, on_value]`` of the output dtype: ``dtype``, else the arrays' type, else JAX's default float."""
  given = {"on_value": on_value, "off_value": off_value}
  dtype_ok = True
  if dtype is not None:
    try:
      dtype = np.dtype(dtype)
    except TypeError:
      p.add("dtype must be a NumPy/JAX dtype", f"dtype={dtype!r}")
      dtype_ok = False
    else:
      dtype_ok = dtypes.require_x64_for(p, "dtype", dtype)
  arrays = {}
  for field, value in given.items():
    shape = getattr(value, "shape", None)  # checked before the dtype, which may refuse the array
    scalar = shape is None or p.require(len(shape) == 0, f"{field} must be a scalar", f"{field}.shape={shape}")
    array = dtypes.as_array(p, field, value, narrow=True)
    if not scalar:
      continue
    if array is not None and p.require(array.ndim == 0, f"{field} must be a scalar", f"{field}.shape={array.shape}"):
      arrays[field] = array
  if len(arrays) < 2 or not dtype_ok:
    return None
  if dtype is None:
    typed = [a for f, a in arrays.items() if hasattr(given[f], "dtype")]
    dtype = jax.dtypes.canonicalize_dtype(float) if not typed else jnp.result_type(*typed)
  pair = (arrays["off_value"].astype(dtype), arrays["on_value"].astype(dtype))
  return _stacked_bits(*pair) if _as_bits(np.dtype(dtype)) else jnp.stack(pair)


NEGATIVE_INDICES = ("off", "from_end")


def one_hot(
  indices: ArrayLike,
  depth: int,
  *,
  axis: int = -1,
  on_value: ArrayLike = 1,
  off_value: ArrayLike = 0,
  dtype: Any = None,
  negative_indices: Literal["off", "from_end"] = "off",
) -> jax.Array:
  r"""One-hot sequences of length ``depth``, inserted at ``axis``, DirectML ONE_HOT in ``jax.nn.one_hot``'s layout.

  The output has ``indices``' shape with a new axis of size :math:`D` =
  ``depth`` inserted at ``axis`` (as ``jax.nn.one_hot`` and ``tf.one_hot``):

  .. math::
     \mathrm{out}[\ldots, j, \ldots] = \begin{cases} \mathrm{on} & j = \mathrm{indices}[\ldots] \text{, or }
     j = \mathrm{indices}[\ldots] + D \text{ with } \texttt{negative\_indices="from\_end"} \\
     \mathrm{off} & \text{otherwise} \end{cases}

  By default an index outside ``[0, D)``, negative ones included, leaves its
  whole sequence at ``off_value``, as ``jax.nn.one_hot`` does (``-1`` as
  padding gives an all-off row). ``negative_indices="from_end"`` is
  DirectML's and ONNX's rule: an index in ``[-D, -1]`` counts from the end
  once (the descriptor path's ONE_HOT always does). Float indices set the
  position they equal (a fraction, NaN or inf sets none) and are deprecated,
  as in ``jax.nn.one_hot`` (a ``DeprecationWarning``). The output is
  differentiable with respect to ``on_value`` and ``off_value``.

  Args:
    indices: integer array (any signed or unsigned width; float and complex
      accepted, deprecated), any rank and shape.
    depth: the length D of every sequence, a static Python int ``>= 0``.
    axis: where the new axis goes, in ``[-(indices.ndim + 1), indices.ndim]``;
      default last.
    on_value: the value at the hot position (a scalar; default 1).
    off_value: the value everywhere else (a scalar; default 0).
    dtype: the output dtype; default: the type of ``on_value``/``off_value``
      where either is an array, else JAX's default float (float32, or float64
      with ``jax_enable_x64``), as ``jax.nn.one_hot``.
    negative_indices: ``"off"`` (default, as ``jax.nn.one_hot``) or
      ``"from_end"`` (DirectML's and ONNX's rule).

  Returns:
    ``indices.shape`` with ``depth`` inserted at ``axis``, of ``dtype``.

  Raises:
    DescriptorError: at trace time, for bool ``indices``, ``axis`` out of
      range, ``depth < 0``, non-scalar on/off values or an unknown
      ``negative_indices``; a traced ``depth`` raises
      :class:`StaticArgumentError`.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> dml.one_hot(jnp.array([0, 3, -1, 9]), 3).tolist()
    [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    >>> dml.one_hot(jnp.array([-1, 2]), 3, negative_indices="from_end").tolist()
    [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]
    >>> dml.one_hot(jnp.array([1, 0]), 2, axis=0, on_value=jnp.int8(5), off_value=jnp.int8(-1)).tolist()
    [[-1, 5], [5, -1]]
  """
  p = Problems("one_hot")
  index_array = dtypes.as_array(p, "indices", indices, narrow=True)
  values = _on_off_values(p, on_value, off_value, dtype)
  length = _check_depth(p, "depth", depth, least=0)
  p.require(
    negative_indices in NEGATIVE_INDICES,
    "negative_indices must be 'off' (an all-off sequence, as jax.nn.one_hot) or 'from_end' (DirectML's rule)",
    f"negative_indices={negative_indices!r}",
  )
  canonical_axis = None
  if index_array is not None:
    index_type = np.dtype(index_array.dtype)
    numbers = p.require(
      not dtypes.is_bool(index_type),
      "indices must have an integer dtype (bool is no index; jax.nn.one_hot refuses it too): pass "
      "indices.astype(jnp.int32)",
      "indices.dtype=bool",
    )
    rank = index_array.ndim
    canonical_axis = axes_lib.canonical_axis(p, "axis", axis, rank + 1, allow_negative=True, of="the output's ")
    if canonical_axis is not None and length is not None:
      shape = index_array.shape
      out_shape = (*shape[:canonical_axis], length, *shape[canonical_axis:])
      dtypes.extent_fits(p, "the output (indices.shape with depth inserted)", out_shape, f"depth={depth}")
    if numbers and not dtypes.is_integer(index_type) and index_array is not None:
      warnings.warn(
        f"one_hot: indices should be integer-typed; got dtype={index_type.name} (float indices are deprecated, "
        "as in jax.nn.one_hot): pass indices.astype(jnp.int32)",
        DeprecationWarning,
        stacklevel=2,
      )
    canonical_axis = canonical_axis if numbers else None
  p.raise_if_any()
  assert index_array is not None and values is not None and canonical_axis is not None and length is not None
  return _functional_one_hot(index_array, values, length, canonical_axis, negative_indices == "from_end")


def _functional_one_hot(indices: jax.Array, values: jax.Array, depth: int, axis: int, from_end: bool) -> jax.Array:
  """:func:`_one_hot` for validated functional-path input of any rank and size."""
  shape = (*indices.shape[:axis], depth, *indices.shape[axis:])
  if indices.size == 0 or depth == 0:
    return jnp.zeros(shape, values.dtype)
  if indices.ndim >= axes_lib.MAX_RANK:  # one sequence per index, laid out along the new axis afterwards
    flat = _one_hot(indices.reshape(-1, 1), values, depth=depth, axis=1, from_end=from_end)
    return jnp.moveaxis(flat.reshape(*indices.shape, depth), -1, axis)
  expanded = jnp.expand_dims(indices, axis)
  return _one_hot(expanded, values, depth=depth, axis=axis, from_end=from_end)


_FIELDS_IN = ("indices_tensor", "values_tensor")
_FIELDS_OUT = ("output_tensor",)


def _check_layout(p: Problems, indices: TensorDesc, values: TensorDesc, axis: Any) -> int | None:
  """Descriptor-path rules: two values at least; ``axis`` in range, where the indices have size 1."""
  p.require(
    math.prod(values.sizes) >= 2,
    "values_tensor must have at least 2 elements (OffValue, OnValue)",
    f"values_tensor.sizes={values.sizes}",
  )
  canonical = axes_lib.canonical_axis(p, "axis", axis, indices.rank, allow_negative=False)
  if canonical is None or not p.require(
    indices.sizes[canonical] == 1,
    f"indices_tensor must have size 1 on axis {canonical}",
    f"indices_tensor.sizes={indices.sizes}",
  ):
    return None
  return canonical


def _output(indices_tensor: Any, values_tensor: Any, depth: Any, axis: Any) -> TensorDesc:
  """The output descriptor ``from_inputs`` fills in (raising for a bad input or attribute)."""
  p = Problems("ONE_HOT")
  ok = tensor_desc.well_formed(p, "indices_tensor", indices_tensor)
  ok &= tensor_desc.well_formed(p, "values_tensor", values_tensor)
  length = _check_depth(p, "depth", depth)
  canonical = _check_layout(p, indices_tensor, values_tensor, axis) if ok else None
  p.raise_if_any()
  assert canonical is not None and length is not None
  sizes = (*indices_tensor.sizes[:canonical], length, *indices_tensor.sizes[canonical + 1 :])
  return TensorDesc(values_tensor.data_type, sizes)


def execute_one_hot(desc: OneHotDesc, inputs: Sequence[Any], feature_level: Any) -> jax.Array:
  """The descriptor path of ONE_HOT (see :func:`dmljax.execute`)."""
  p = Problems("ONE_HOT")
  tensors_ok = descriptor_path.check_descriptor(
    p, desc, inputs, input_fields=_FIELDS_IN, output_fields=_FIELDS_OUT, table="ONE_HOT", feature_level=feature_level
  )
  axis = None
  if tensors_ok:
    out = desc.output_tensor
    value_type = DataType(desc.values_tensor.data_type)
    tensor_desc.output_type_matches(p, "output_tensor", out, [value_type])
    axis = _check_layout(p, desc.indices_tensor, desc.values_tensor, desc.axis)
    if axis is not None and out.rank == desc.indices_tensor.rank:
      depth = _check_depth(p, "output_tensor.sizes[axis]", out.sizes[axis])
      sizes = (*desc.indices_tensor.sizes[:axis], out.sizes[axis], *desc.indices_tensor.sizes[axis + 1 :])
      tensor_desc.output_sizes_match(p, "output_tensor", out, sizes)
      if depth is None:
        axis = None
  p.raise_if_any()
  assert axis is not None
  indices, values = descriptor_path.input_arrays(desc, inputs, _FIELDS_IN)
  return _one_hot(indices, values, depth=desc.output_tensor.sizes[axis], axis=axis, from_end=True)
