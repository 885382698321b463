"""ARGMIN and ARGMAX: the flat index of the extreme element over one or more axes.

DirectML semantics (``DML_ARGMIN_OPERATOR_DESC``; docs/semantics.rst, "ARGMIN and ARGMAX"):

* the output keeps the input's rank, with size 1 on every reduced axis;
* the index is the row-major flat index over the reduced axes only, taken in
  ascending axis order whatever order ``axes`` lists them in;
* INCREASING returns the first extreme element, DECREASING the last one;
* a NaN counts as the extreme for both argmin and argmax; -0.0 equals +0.0.

REDUCE's ARGMIN/ARGMAX functions are this operator with INCREASING.

Differentiation (docs/semantics.rst): the output is an integer index, so it carries a
float0 (zero) tangent; it can index into differentiated code freely.
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

from dmljax._src import axes as axes_lib
from dmljax._src import (
  cpu_route,
  descriptor_path,
  dtypes,
  fields,
  halving,
  platform,
  rank_keys,
  reduction_kernels,
  selection,
  symbolic,
  tensor_desc,
  trailing_peak,
)
from dmljax._src.axes import AxisDirection
from dmljax._src.dtypes import DataType
from dmljax._src.errors import Problems
from dmljax._src.fields import FUNCTIONAL, Fields
from dmljax._src.strategies import peak
from dmljax._src.tensor_desc import TensorDesc

INDEX_DATA_TYPES = (DataType.UINT32, DataType.INT32, DataType.UINT64, DataType.INT64)


@dataclasses.dataclass(frozen=True)
class ArgMinDesc:
  """``DML_ARGMIN_OPERATOR_DESC``: the flat index of the smallest element over ``axes``.

  The index is row-major over the reduced axes only, taken in ascending axis
  order; a NaN counts as the smallest; -0.0 equals +0.0. :func:`argmin` is the
  functional form.

  Attributes:
    input_tensor: ``InputTensor``, the tensor to reduce.
    output_tensor: ``OutputTensor``: INT32, INT64, UINT32 or UINT64, the
      input's sizes with 1 on every reduced axis.
    axes: ``Axes`` (``AxisCount`` is ``len(axes)``): one or more distinct axes
      in ``[0, rank - 1]``, in any order.
    axis_direction: ``AxisDirection``: INCREASING (default) returns the first
      extreme element, DECREASING the last one.

  Raises:
    DescriptorError: from :func:`execute` (constructing a descriptor never
      raises), at trace time and listing every broken rule: a tensor
      descriptor, data type or rank outside the feature level's table, unequal
      ranks, empty, repeated or out-of-range ``axes``, a bad
      ``axis_direction``, an output type that cannot index the reduced
      elements, a wrong output descriptor, or arrays that do not match.

  Example:
    >>> import dmljax as dml, numpy as np
    >>> desc = dml.ArgMinDesc(dml.TensorDesc(dml.DataType.FLOAT32, (5,)),
    ...                       dml.TensorDesc(dml.DataType.UINT32, (1,)), axes=(0,),
    ...                       axis_direction=dml.AxisDirection.DECREASING)
    >>> dml.execute(desc, np.array([1., 2., 3., 2., 1.], np.float32)).tolist()
    [4]
  """

  input_tensor: TensorDesc
  output_tensor: TensorDesc
  axes: tuple[int, ...]
  axis_direction: AxisDirection = AxisDirection.INCREASING

  @classmethod
  def from_inputs(
    cls,
    input_tensor: TensorDesc,
    *,
    axes: Sequence[int],
    axis_direction: AxisDirection = AxisDirection.INCREASING,
    output_data_type: DataType | str = DataType.UINT32,
  ) -> ArgMinDesc:
    """The descriptor with its output tensor inferred from the input and the attributes.

    Raises:
      DescriptorError: for a malformed input descriptor, bad ``axes`` or an
        ``output_data_type`` other than INT32, INT64, UINT32 or UINT64.

    Example:
      >>> import dmljax as dml, numpy as np
      >>> dml.ArgMinDesc.from_inputs(dml.TensorDesc(np.float32, (3, 3)), axes=(0, 1)).output_tensor
      TensorDesc(data_type=<DataType.UINT32: 3>, sizes=(1, 1))
    """
    output = _output("ARGMIN", input_tensor, axes, output_data_type)
    return cls(input_tensor, output, axes=tuple(axes), axis_direction=axis_direction)


@dataclasses.dataclass(frozen=True)
class ArgMaxDesc:
  """``DML_ARGMAX_OPERATOR_DESC``: the flat index of the largest element over ``axes``.

  ARGMIN's twin: the index is row-major over the reduced axes only, taken in
  ascending axis order; a NaN counts as the largest; -0.0 equals +0.0.
  :func:`argmax` is the functional form.

  Attributes:
    input_tensor: ``InputTensor``, the tensor to reduce.
    output_tensor: ``OutputTensor``: INT32, INT64, UINT32 or UINT64, the
      input's sizes with 1 on every reduced axis.
    axes: ``Axes`` (``AxisCount`` is ``len(axes)``): one or more distinct axes
      in ``[0, rank - 1]``, in any order.
    axis_direction: ``AxisDirection``: INCREASING (default) returns the first
      extreme element, DECREASING the last one.

  Raises:
    DescriptorError: from :func:`execute` (constructing a descriptor never
      raises), at trace time and listing every broken rule: a tensor
      descriptor, data type or rank outside the feature level's table, unequal
      ranks, empty, repeated or out-of-range ``axes``, a bad
      ``axis_direction``, an output type that cannot index the reduced
      elements, a wrong output descriptor, or arrays that do not match.

  Example:
    >>> import dmljax as dml, numpy as np
    >>> desc = dml.ArgMaxDesc(dml.TensorDesc(dml.DataType.FLOAT32, (5,)),
    ...                       dml.TensorDesc(dml.DataType.UINT32, (1,)), axes=(0,),
    ...                       axis_direction=dml.AxisDirection.INCREASING)
    >>> dml.execute(desc, np.array([1., 3., 2., 3., 1.], np.float32)).tolist()
    [1]
  """

  input_tensor: TensorDesc
  output_tensor: TensorDesc
  axes: tuple[int, ...]
  axis_direction: AxisDirection = AxisDirection.INCREASING

  @classmethod
  def from_inputs(
    cls,
    input_tensor: TensorDesc,
    *,
    axes: Sequence[int],
    axis_direction: AxisDirection = AxisDirection.INCREASING,
    output_data_type: DataType | str = DataType.UINT32,
  ) -> ArgMaxDesc:
    """The descriptor with its output tensor inferred from the input and the attributes.

    Raises:
      DescriptorError: for a malformed input descriptor, bad ``axes`` or an
        ``output_data_type`` other than INT32, INT64, UINT32 or UINT64.

    Example:
      >>> import dmljax as dml, numpy as np
      >>> dml.ArgMaxDesc.from_inputs(dml.TensorDesc(np.float32, (3, 3)), axes=(0, 1)).output_tensor
      TensorDesc(data_type=<DataType.UINT32: 3>, sizes=(1, 1))
    """
    output = _output("ARGMAX", input_tensor, axes, output_data_type)
    return cls(input_tensor, output, axes=tuple(axes), axis_direction=axis_direction)


# Flat indices are int32 up to here (tests lower this to cover the wider path).
INT32_FLAT_LARGEST_INDEX = int(np.iinfo(np.int32).max)


def check_reduced_index(
  p: Problems, f: Fields, shape: tuple[int, ...], axes: tuple[int, ...], index_dtype: np.dtype | None
) -> bool:
  """The flat index over the reduced axes must fit the index type."""
  if index_dtype is None:
    return True
  count = math.prod(shape[a] for a in axes)
  return dtypes.index_dtype_can_hold(
    p, f["index_dtype"], index_dtype, count - 1, f"the {count} reduced elements of {f['axis']} {axes}"
  )


def _check_arg_reduce(
  p: Problems, f: Fields, shape: tuple[int, ...], axes: Any, index_dtype: np.dtype | None, *, allow_negative: bool
) -> tuple[int, ...] | None:
  if not axes_lib.rank_in_range(p, f, "x", shape):
    return None
  canonical = axes_lib.canonical_axes(p, f["axis"], axes, len(shape), allow_negative=allow_negative, allow_empty=False)
  if canonical is None or not check_reduced_index(p, f, shape, canonical, index_dtype):
    return None
  return canonical


@functools.partial(jax.jit, static_argnames=("axes", "find_max", "last", "index_dtype", "keepdims", "choice"))
def arg_extreme(
  x: jax.Array,
  *,
  axes: tuple[int, ...],
  find_max: bool,
  last: bool,
  index_dtype: np.dtype,
  keepdims: bool,
  choice: platform.Choice,
) -> jax.Array:
  """First (or ``last``) flat index of the max (or min) over ``axes``; NaN is the extreme either way."""
  del choice  # a static argument so that a program traced under another choice is not reused
  out_shape = axes_lib.output_shape(x.shape, axes, keepdims)
  count = math.prod(x.shape[a] for a in axes)
  if symbolic.decide(lambda: count == 1, otherwise=False):
    return jnp.zeros(out_shape, index_dtype)
  flat_dtype: np.dtype = np.dtype(np.int32)  # over symbolic axes too, as jnp.argmax indexes them
  if symbolic.decide(lambda: count - 1 > INT32_FLAT_LARGEST_INDEX, otherwise=False):
    # The index type can hold count - 1 (checked), so uint32 does whenever x64 is off.
    flat_dtype = np.dtype(np.int64) if dtypes.x64_enabled() else np.dtype(np.uint32)
  peak_index = _first_or_last_peak(x, axes, flat_dtype, find_max=find_max, last=last)
  return peak_index.astype(index_dtype).reshape(out_shape)


def _first_or_last_peak(
  x: jax.Array, axes: tuple[int, ...], flat_dtype: np.dtype, *, find_max: bool, last: bool
) -> jax.Array:
  """The lowest (or highest) flat index over ``axes`` at which ``x``'s :func:`rank_keys.extreme_key` is largest.

  The route is :func:`cpu_route.choose`'s:

  * CPU, a program of one device, axes next to each other: the compiled kernel
    (:func:`reduction_kernels.arg_extreme`: one custom call that reads the input once on every core, its keys
    computed from the bits as :func:`rank_keys.extreme_key` computes them), for the types it takes and int32
    indices, where the library is loaded; without it, over trailing axes, REDUCE's fused halving
    (:func:`halving.peak_position`), the keys computed where they are read, so that nothing near the input's size
    is written (a top-1 selection reads the keys written out whole). An exported program holds the halving (or,
    over other axes, the variadic reduction below) in the kernel's place.
  * CPU, several devices (or a forced top-k strategy), trailing axes: a top-1 selection of the flattened axes
    (XLA:CPU's vectorised selection), each device flattening its own block (:mod:`trailing_peak`; over one
    axis, :mod:`selection`), so along sharded axes one candidate per device is exchanged. The last peak is
    the first of reversed rows.
  * Otherwise (GPUs, TPUs, other axes): one variadic reduction of (key, flat index) pairs
    (:func:`peak.peak_index`), as ``jnp.argmax`` compiles, over several axes at once with no reshape (a
    relayout on TPUs). XLA's SPMD partitioner splits it over a sharded axis, on automatic and explicit
    axes alike, so only a peak and an index per shard cross devices. On TPUs it is one fusion that
    reads the input once; XLA's estimate puts it at or under the TopK custom call, whose top-1 over an
    axis split on automatic axes (device-count chunks) partitions into sorts of every shard.
  """
  key_of = functools.partial(rank_keys.extreme_key, find_max=find_max)
  trailing = axes == tuple(range(x.ndim - len(axes), x.ndim))

  def by_reduction(x: jax.Array) -> jax.Array:
    return peak.peak_index(key_of(x), axes, flat_dtype, last=last)

  if flat_dtype != np.int32:
    return by_reduction(x)

  def by_selection(x: jax.Array) -> jax.Array:
    key = key_of(x)
    if len(axes) == 1:
      return selection.top_k_last_axis(key, 1, True, last)[1][..., 0]
    return trailing_peak.peak_index(key, len(axes), last=last)

  def by_halving(x: jax.Array) -> jax.Array:
    return halving.peak_position(x, axes, key_of, last=last)

  if trailing and platform.current().top_k is not None:  # a forced strategy: the selection that runs it
    return platform.branch(x, cpu=by_selection, default=by_reduction)

  def fallback(rows: jax.Array) -> jax.Array:
    """The kernel's composition on its (outer, n) or (outer, n, inner) rows: the one-device route without it."""
    if rows.ndim == 2:
      return halving.peak_position(rows, (1,), key_of, last=last)
    return peak.peak_index(key_of(rows), (1,), flat_dtype, last=last)

  def by_kernel(x: jax.Array) -> jax.Array:
    return reduction_kernels.arg_extreme(x, axes, find_max=find_max, last=last, fallback=fallback)

  kernel = by_kernel if np.dtype(x.dtype) in reduction_kernels.KERNEL_TYPES else None
  if trailing:
    return cpu_route.choose(
      x, axes, default=by_reduction, one_device=by_halving, kernel=kernel, several=by_selection, trace_several=True
    )
  return cpu_route.choose(x, axes, default=by_reduction, kernel=kernel)


TIES = ("first", "last")


def _last_on_ties(p: Problems, name: str, ties: Any, direction: Any) -> bool:
  """Whether ``ties`` (or the deprecated ``direction``, DirectML's word for it) asks for the last extreme."""
  if direction is not None:
    warnings.warn(
      f"{name}: direction= is DirectML's name for the tie rule and is deprecated in the functional path; "
      f"use ties='first' for direction='increasing' or ties='last' for direction='decreasing' "
      f"(the descriptor path keeps axis_direction)",
      DeprecationWarning,
      stacklevel=4,
    )
    canonical = axes_lib.canonical_direction(p, "direction", direction)
    if canonical is None:
      return False
    from_direction = TIES[int(canonical == AxisDirection.DECREASING)]
    p.require(
      ties in ("first", from_direction),
      "ties and the deprecated direction must agree when both are given (pass ties alone)",
      f"ties={ties!r}, direction={direction!r}",
    )
    return from_direction == "last"
  p.require(
    ties in TIES, "ties must be 'first' or 'last' (which index an extreme that occurs twice gives)", f"ties={ties!r}"
  )
  return ties == "last"


def functional_axes(
  p: Problems, name: str, shape: tuple[int, ...], axes: Any, index_dtype: np.dtype | None, *, allow_empty: bool
) -> tuple[int, ...] | None:
  """The functional path's rules for an arg-reduction: any rank, ``None`` every axis (of a rank-0 array: its one
  element), distinct axes (one or more unless ``allow_empty``: REDUCE's ARGMAX/ARGMIN of no axes index each element
  on its own), each of size 1 or more, whose flat index ``index_dtype`` can hold."""
  if not shape and axes is None:
    return ()
  canonical = axes_lib.canonical_axes(p, "axis", axes, len(shape), allow_negative=True, allow_empty=allow_empty)
  if canonical is None:
    return None
  statement = (
    f"attempt to get {name} of an empty sequence: every reduced axis needs size 1 or more (as for jnp.{name}); "
    "reduce over other axes"
  )
  ok = axes_lib.nonempty_blocks(p, "x", shape, canonical, statement)
  if not ok or not check_reduced_index(p, FUNCTIONAL, shape, canonical, index_dtype):
    return None
  return canonical


def require_ordered(p: Problems, name: str, dtype: np.dtype) -> bool:
  """An ordered type: integers, floats and bool (False < True); complex has no order (JAX refuses it too)."""
  return p.require(
    not dtypes.is_complex(dtype),
    f"{name} needs real x (complex numbers have no order; jnp.{name} refuses them too): pass jnp.abs(x) to "
    "order by magnitude, or x.real",
    f"x.dtype={dtype.name}",
  )


def _functional(
  name: str, find_max: bool, x: ArrayLike, axes: Any, ties: Any, direction: Any, keepdims: bool, index_dtype: Any
) -> jax.Array:
  p = Problems(name)
  array = dtypes.as_array(p, "x", x, narrow=True)
  last = _last_on_ties(p, name, ties, direction)
  canonical_index = dtypes.canonical_index_dtype(p, "index_dtype", index_dtype)
  canonical_axes = None
  if array is not None and require_ordered(p, name, np.dtype(array.dtype)):
    canonical_axes = functional_axes(p, name, array.shape, axes, canonical_index, allow_empty=False)
  p.raise_if_any()
  assert array is not None and canonical_axes is not None and canonical_index is not None
  return arg_program(
    array,
    axes=canonical_axes,
    find_max=find_max,
    last=last,
    index_dtype=canonical_index,
    keepdims=bool(keepdims),
    choice=platform.current(),
  )


@functools.partial(jax.jit, static_argnames=("axes", "find_max", "last", "index_dtype", "keepdims", "choice"))
def arg_program(
  x: jax.Array,
  *,
  axes: tuple[int, ...],
  find_max: bool,
  last: bool,
  index_dtype: np.dtype,
  keepdims: bool,
  choice: platform.Choice,
) -> jax.Array:
  """:func:`arg_extreme` of validated input of any rank and size (bool ordered as uint8), with its conversions: the
  one program of both paths."""
  out_shape = axes_lib.output_shape(x.shape, axes, keepdims)
  if x.size == 0:  # only kept axes are empty (checked): no index to compute
    return jnp.zeros(out_shape, index_dtype)
  if dtypes.is_bool(x.dtype):
    x = x.astype(np.uint8)
  return axes_lib.reduce_folded(
    x,
    axes,
    out_shape,
    lambda folded, folded_axes: arg_extreme(
      folded,
      axes=folded_axes,
      find_max=find_max,
      last=last,
      index_dtype=index_dtype,
      keepdims=keepdims,
      choice=choice,
    ),
  )


_DOC = r"""The flat index of the {extreme} element over ``axes``, DirectML {op}.

  Over the elements :math:`x[\ldots]` selected by ``axes``, returns the row-major
  flat index :math:`\sum_j i_{{a_j}} \prod_{{l>j}} n_{{a_l}}` (axes :math:`a_j` in
  ascending order) of the {extreme} element: the first one on ties
  (``ties="first"``, as ``jnp.{func}``; DirectML's INCREASING) or the last one
  (``ties="last"``; DECREASING). A NaN counts as the {extreme}; -0.0 equals +0.0.

  Over axes sharded across devices, each shard contributes one candidate (its
  peak and the global index of it), and only those candidates are combined,
  with the same tie rule, so the result is exactly the unsharded one.

  Args:
    x: array of any integer or floating dtype (bfloat16 included) or bool,
      any rank and shape (every reduced axis of size 1 or more).
    axis: an axis or a tuple of distinct axes (negative count from the end),
      static Python ints; ``None`` (default) means every axis.
    ties: ``"first"`` (default, as ``jnp.{func}``) or ``"last"``: which index
      an extreme that occurs more than once gives.
    keepdims: keep the reduced axes with size 1 (DirectML's layout); default
      ``False``, as ``jnp.{func}``.
    index_dtype: ``None`` (default): JAX's default integer, as ``jnp.{func}``
      (int32, or int64 with ``jax_enable_x64``); or int32, int64, uint32 or
      uint64 (DirectML's output types).
    direction: deprecated, DirectML's name for ``ties``: ``"increasing"`` is
      ``ties="first"``, ``"decreasing"`` ``ties="last"`` (a
      ``DeprecationWarning``; the descriptor path keeps axis_direction).

  Returns:
    The indices, of ``index_dtype``.

  Raises:
    DescriptorError: at trace time, for complex ``x``, bad axes (or one of
      size 0), ties or index dtype, or when the reduced element count cannot
      be indexed by it.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> x = jnp.array([[1., 2., 3.], [3., 0., 4.], [2., 5., 2.]])
    >>> dml.{func}(x, (0, 1)).tolist()
    {example}
    >>> dml.{func}(x, 1).tolist()
    {rows}
    >>> dml.{func}(jnp.array([1., 1., 1.]), ties="last").tolist()
    2
  """


def argmin(
  x: ArrayLike,
  axis: int | Sequence[int] | None = None,
  *,
  ties: Literal["first", "last"] = "first",
  keepdims: bool = False,
  index_dtype: Any = None,
  direction: AxisDirection | str | None = None,
) -> jax.Array:
  return _functional("argmin", False, x, axis, ties, direction, keepdims, index_dtype)


def argmax(
  x: ArrayLike,
  axis: int | Sequence[int] | None = None,
  *,
  ties: Literal["first", "last"] = "first",
  keepdims: bool = False,
  index_dtype: Any = None,
  direction: AxisDirection | str | None = None,
) -> jax.Array:
  return _functional("argmax", True, x, axis, ties, direction, keepdims, index_dtype)


argmin.__doc__ = _DOC.format(extreme="smallest", op="ARGMIN", func="argmin", example="4", rows="[0, 1, 0]")
argmax.__doc__ = _DOC.format(extreme="largest", op="ARGMAX", func="argmax", example="7", rows="[2, 2, 1]")

_FIELDS_IN = ("input_tensor",)
_FIELDS_OUT = ("output_tensor",)
_DESCRIPTOR = fields.descriptor(x="input_tensor", axis="axes", index_dtype="output_tensor.data_type")


def _output(name: str, input_tensor: Any, axes: Any, output_data_type: Any) -> TensorDesc:
  """The output descriptor ``from_inputs`` fills in (raising for a bad input or attribute)."""
  p = Problems(name)
  sizes = None
  if tensor_desc.well_formed(p, "input_tensor", input_tensor):
    canonical = _check_arg_reduce(p, _DESCRIPTOR, input_tensor.sizes, axes, None, allow_negative=False)
    if canonical is not None:
      sizes = axes_lib.reduced_shape(input_tensor.sizes, canonical)
  data_type = tensor_desc.data_type_option(p, "output_data_type", output_data_type, INDEX_DATA_TYPES)
  p.raise_if_any()
  assert sizes is not None and data_type is not None
  return TensorDesc(data_type, sizes)


def execute_arg_reduce(desc: ArgMinDesc | ArgMaxDesc, inputs: Sequence[Any], feature_level: Any) -> jax.Array:
  """The descriptor path of ARGMIN and ARGMAX (see :func:`dmljax.execute`)."""
  name = "ARGMAX" if isinstance(desc, ArgMaxDesc) else "ARGMIN"
  p = Problems(name)
  direction = axes_lib.canonical_direction(p, "axis_direction", desc.axis_direction)
  tensors_ok = descriptor_path.check_descriptor(
    p, desc, inputs, input_fields=_FIELDS_IN, output_fields=_FIELDS_OUT, table=name, feature_level=feature_level
  )
  axes = None
  if tensors_ok:
    shape = desc.input_tensor.sizes
    index_type = DataType(desc.output_tensor.data_type)
    index_dtype = dtypes.numpy_dtype(index_type) if index_type in INDEX_DATA_TYPES else None
    tensor_desc.output_type_matches(p, "output_tensor", desc.output_tensor, INDEX_DATA_TYPES)
    axes = _check_arg_reduce(p, _DESCRIPTOR, shape, desc.axes, index_dtype, allow_negative=False)
    if axes is not None:
      tensor_desc.output_sizes_match(p, "output_tensor", desc.output_tensor, axes_lib.reduced_shape(shape, axes))
  p.raise_if_any()
  assert axes is not None
  (x,) = descriptor_path.input_arrays(desc, inputs, _FIELDS_IN)
  return arg_program(
    x,
    axes=axes,
    find_max=name == "ARGMAX",
    last=direction == AxisDirection.DECREASING,
    index_dtype=dtypes.numpy_dtype(desc.output_tensor.data_type),
    keepdims=True,
    choice=platform.current(),
  )
