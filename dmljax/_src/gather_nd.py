"""GATHER_ND and GATHER_ND1: gather whole sub-blocks of the input addressed by index tuples.

DirectML semantics (``DML_GATHER_ND1_OPERATOR_DESC``; docs/semantics.rst, "GATHER_ND1 and GATHER_ND")::

    output[batch, i...] = input[batch, indices[batch, i..., :], ...]

* the first ``batch_dims`` dimensions of input and indices are batch dimensions
  and must have equal sizes; the last indices dimension ``q`` is the tuple
  length, ``1 <= q <= rank(input) - batch_dims``;
* output shape = ``indices.shape[:-1] + input.shape[batch_dims + q:]``;
* a negative signed index counts from the end (-1 is the last element), once;
  then every coordinate is clamped to ``[0, size - 1]`` (DirectML's promise
  that reads are clamped), so no index ever raises or reads out of bounds.

In the descriptor path only the trailing ``input_dimension_count`` and
``indices_dimension_count`` dimensions are meaningful (the rest are leading 1s),
and the output is right-aligned to the common rank with leading 1s.
GATHER_ND (v0) is GATHER_ND1 with ``batch_dimension_count = 0``.

Differentiation (docs/semantics.rst): the output is linear in the input, differentiable
in forward and reverse mode to any order (the second derivative is zero). The
reverse pass scatter-adds each output cotangent to the element it was read
from, after wrapping and clamping, so duplicate and clamped out-of-range
indices accumulate there; memory is O(input + output). float16 and bfloat16
cotangents accumulate in float32 and round once. The indices carry float0
(zero) tangents.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir
from jax.sharding import NamedSharding, PartitionSpec
from jax.typing import ArrayLike

from dmljax._src import (
  autodiff,
  descriptor_path,
  dtypes,
  fields,
  index_math,
  shardings,
  symbolic,
  tensor_desc,
  value_bits,
)
from dmljax._src import axes as axes_lib
from dmljax._src.dtypes import DataType
from dmljax._src.errors import Problems
from dmljax._src.fields import FUNCTIONAL, Fields
from dmljax._src.tensor_desc import TensorDesc


@dataclasses.dataclass(frozen=True)
class GatherNDDesc:
  """``DML_GATHER_ND_OPERATOR_DESC``: gathers the input's sub-blocks addressed by index tuples.

  GATHER_ND1 with ``batch_dimension_count = 0``:
  ``output[i...] = input[indices[i..., :], ...]``. :func:`gather_nd` is the
  functional form.

  Attributes:
    input_tensor: ``InputTensor``, the tensor to gather from; only its
      trailing ``input_dimension_count`` sizes are meaningful, the rest are 1.
    indices_tensor: ``IndicesTensor``: INT32, INT64, UINT32 or UINT64; only
      its trailing ``indices_dimension_count`` sizes are meaningful, and the
      last of them is the index tuple length ``q``. Negative signed indices
      count from the end; every coordinate is then clamped to the valid range.
    output_tensor: ``OutputTensor``: the input's data type; its meaningful
      sizes are the indices' without the last, then the input's after the
      batch dimensions and the ``q`` indexed ones, right-aligned with leading 1s.
    input_dimension_count: ``InputDimensionCount``, in ``[1, rank]``.
    indices_dimension_count: ``IndicesDimensionCount``, in ``[1, rank]``.

  Raises:
    DescriptorError: from :func:`execute` (constructing a descriptor never
      raises), at trace time and listing every broken rule: a tensor
      descriptor, data type or rank outside the feature level's table, unequal
      ranks, a dimension count out of range or non-1 sizes before the
      meaningful ones, a tuple length outside ``[1, input_dimension_count -
      batch_dimension_count]``, unequal batch sizes, a wrong output
      descriptor, or arrays that do not match.

  Example:
    >>> import dmljax as dml, numpy as np
    >>> f32, u32 = dml.DataType.FLOAT32, dml.DataType.UINT32
    >>> desc = dml.GatherNDDesc(dml.TensorDesc(f32, (2, 2)), dml.TensorDesc(u32, (2, 1)),
    ...                         dml.TensorDesc(f32, (2, 2)), input_dimension_count=2,
    ...                         indices_dimension_count=2)
    >>> dml.execute(desc, np.array([[0., 1.], [2., 3.]], np.float32),
    ...             np.array([[1], [0]], np.uint32)).tolist()
    [[2.0, 3.0], [0.0, 1.0]]
  """

  input_tensor: TensorDesc
  indices_tensor: TensorDesc
  output_tensor: TensorDesc
  input_dimension_count: int
  indices_dimension_count: int

  @classmethod
  def from_inputs(
    cls,
    input_tensor: TensorDesc,
    indices_tensor: TensorDesc,
    *,
    input_dimension_count: int | None = None,
    indices_dimension_count: int | None = None,
  ) -> GatherNDDesc:
    """The descriptor with its output tensor inferred; the dimension counts default to the ranks.

    Raises:
      DescriptorError: for malformed or unequal-rank input descriptors or bad
        dimension counts.

    Example:
      >>> import dmljax as dml, numpy as np
      >>> desc = dml.GatherNDDesc.from_inputs(dml.TensorDesc(np.float32, (2, 2)), dml.TensorDesc(np.uint32, (2, 1)))
      >>> desc.output_tensor
      TensorDesc(data_type=<DataType.FLOAT32: 1>, sizes=(2, 2))
    """
    output, counts = _output(
      "GATHER_ND", input_tensor, indices_tensor, input_dimension_count, indices_dimension_count, 0
    )
    return cls(input_tensor, indices_tensor, output, *counts)


@dataclasses.dataclass(frozen=True)
class GatherND1Desc:
  """``DML_GATHER_ND1_OPERATOR_DESC``: gathers sub-blocks addressed by index tuples, with batch dimensions.

  ``output[b..., i...] = input[b..., indices[b..., i..., :], ...]``, where the
  first ``batch_dimension_count`` meaningful dimensions of input and indices
  are shared batch dimensions of equal sizes. :func:`gather_nd` with
  ``batch_dims`` is the functional form.

  Attributes:
    input_tensor: ``InputTensor``, the tensor to gather from; only its
      trailing ``input_dimension_count`` sizes are meaningful, the rest are 1.
    indices_tensor: ``IndicesTensor``: INT32, INT64, UINT32 or UINT64; only
      its trailing ``indices_dimension_count`` sizes are meaningful, and the
      last of them is the index tuple length ``q``. Negative signed indices
      count from the end; every coordinate is then clamped to the valid range.
    output_tensor: ``OutputTensor``: the input's data type; its meaningful
      sizes are the indices' without the last, then the input's after the
      batch dimensions and the ``q`` indexed ones, right-aligned with leading 1s.
    input_dimension_count: ``InputDimensionCount``, in ``[1, rank]``.
    indices_dimension_count: ``IndicesDimensionCount``, in ``[1, rank]``.
    batch_dimension_count: ``BatchDimensionCount``, below
      ``indices_dimension_count``.

  Raises:
    DescriptorError: from :func:`execute` (constructing a descriptor never
      raises), at trace time and listing every broken rule: a tensor
      descriptor, data type or rank outside the feature level's table, unequal
      ranks, a dimension count out of range or non-1 sizes before the
      meaningful ones, a tuple length outside ``[1, input_dimension_count -
      batch_dimension_count]``, unequal batch sizes, a wrong output
      descriptor, or arrays that do not match.

  Example:
    >>> import dmljax as dml, numpy as np
    >>> f32, u32 = dml.DataType.FLOAT32, dml.DataType.UINT32
    >>> desc = dml.GatherND1Desc(dml.TensorDesc(f32, (2, 3)), dml.TensorDesc(u32, (2, 1)),
    ...                          dml.TensorDesc(f32, (1, 2)), input_dimension_count=2,
    ...                          indices_dimension_count=2, batch_dimension_count=1)
    >>> dml.execute(desc, np.arange(6, dtype=np.float32).reshape(2, 3),
    ...             np.array([[2], [0]], np.uint32)).tolist()
    [[2.0, 3.0]]
  """

  input_tensor: TensorDesc
  indices_tensor: TensorDesc
  output_tensor: TensorDesc
  input_dimension_count: int
  indices_dimension_count: int
  batch_dimension_count: int

  @classmethod
  def from_inputs(
    cls,
    input_tensor: TensorDesc,
    indices_tensor: TensorDesc,
    *,
    batch_dimension_count: int = 0,
    input_dimension_count: int | None = None,
    indices_dimension_count: int | None = None,
  ) -> GatherND1Desc:
    """The descriptor with its output tensor inferred; the dimension counts default to the ranks.

    Raises:
      DescriptorError: for malformed or unequal-rank input descriptors, bad
        dimension counts or unequal batch sizes.

    Example:
      >>> import dmljax as dml, numpy as np
      >>> desc = dml.GatherND1Desc.from_inputs(dml.TensorDesc(np.float32, (2, 3)), dml.TensorDesc(np.uint32, (2, 1)),
      ...                                      batch_dimension_count=1)
      >>> desc.output_tensor
      TensorDesc(data_type=<DataType.FLOAT32: 1>, sizes=(1, 2))
    """
    output, counts = _output(
      "GATHER_ND1", input_tensor, indices_tensor, input_dimension_count, indices_dimension_count, batch_dimension_count
    )
    return cls(input_tensor, indices_tensor, output, *counts, batch_dimension_count=batch_dimension_count)


_DESCRIPTOR = fields.descriptor(x="input_tensor", indices="indices_tensor", batch_dims="batch_dimension_count")


def _check_gather_nd(
  p: Problems, f: Fields, x_shape: tuple[int, ...], indices_shape: tuple[int, ...], batch_dims: Any
) -> tuple[int, ...] | None:
  """Shared rules on the meaningful shapes; returns the output shape."""
  if not (axes_lib.rank_in_range(p, f, "x", x_shape) & axes_lib.rank_in_range(p, f, "indices", indices_shape)):
    return None
  q = indices_shape[-1]
  batch_field = f["batch_dims"]
  if symbolic.is_symbolic(q):
    what = f"{f.shape('indices')}[-1] (the index tuple length)"
    p.add(
      symbolic.static_message(what, f"it sets how many dimensions of {f['x']} are indexed, so the output's rank"),
      f"{f.shape('indices')}={symbolic.describe(indices_shape)}",
    )
    return None
  # Batch dimensions come before the indices' tuple dimension and before at least one indexed dimension of x.
  most = min(len(indices_shape), len(x_shape)) - 1
  statement = (
    f"{batch_field} must be an integer in [0, {most}] (below the ranks of {f['x']} and {f['indices']}, "
    "leaving a dimension to index)"
  )
  if axes_lib.static_int(p, batch_field, batch_dims, statement, lambda b: 0 <= b <= most) is None:
    return None
  row_ids = ""
  if f is FUNCTIONAL and len(indices_shape) == 1 and q > len(x_shape) - batch_dims:
    row_ids = (
      f". 1-D indices are one index tuple of length {q}; for a list of row ids (as jnp.take(x, ids, axis=0) or "
      "x[ids]), pass indices[:, None]"
    )
  elif f is FUNCTIONAL and q > 1 and len(x_shape) - batch_dims == 1:
    # (100, 10) neighbour ids into (N,) labels: only tuples of length 1 can index x, so the last axis holds ids.
    row_ids = (
      f". The last axis of indices is the index tuple, so these are index tuples of length {q}; if indices holds "
      f"row ids of x (as x[ids] or jnp.take(x, ids, axis={batch_dims})), add a tuple axis of length 1: "
      "indices[..., None]"
    )
  ok = p.require(
    1 <= q <= len(x_shape) - batch_dims,
    f"{f.shape('indices')}[-1] (the index tuple length) must be in "
    f"[1, {len(x_shape) - batch_dims}] (rank of {f['x']} minus {batch_field}){row_ids}",
    f"{f.shape('indices')}={indices_shape}",
  )
  ok &= p.require(
    x_shape[:batch_dims] == indices_shape[:batch_dims],
    f"the {batch_dims} batch dimensions of {f['x']} and {f['indices']} must have equal sizes",
    f"{f.shape('x')}={x_shape}, {f.shape('indices')}={indices_shape}",
  )
  if not ok:
    return None
  for d in range(batch_dims, batch_dims + q):
    ok &= dtypes.positions_fit(p, f"{f.shape('x')}[{d - len(x_shape)}]", x_shape[d])
  out_shape = indices_shape[:-1] + x_shape[batch_dims + q :]
  got = f"{f.shape('x')}={x_shape}, {f.shape('indices')}={indices_shape}"
  what = f"the output ({f.shape('indices')}[:-1] + {f.shape('x')}[{batch_field} + tuple length:])"
  ok &= dtypes.extent_fits(p, what, out_shape, got)
  return out_shape if ok else None


def _explicit_output_spec(x: jax.Array, indices: jax.Array, batch_dims: int) -> tuple[Any, PartitionSpec] | None:
  """Where the inputs' types carry explicit shardings: the output's, which the gather cannot infer alone.

  Output dimensions take the indices' sharding (batch dimensions the input's where the indices' is
  unsharded), trailing dimensions the input's; a mesh axis already used is not used again. Sharded
  gathered dimensions are left to XLA's partitioner (a gather of clamped indices is exact either way).
  """
  found = shardings.explicit_spec(x) or shardings.explicit_spec(indices)
  if found is None:
    return None
  mesh = found[0]
  x_spec = shardings.full_spec(jax.typeof(x).sharding.spec, x.ndim)
  indices_spec = shardings.full_spec(jax.typeof(indices).sharding.spec, indices.ndim)
  q = indices.shape[-1]
  wanted = [entry if entry is not None or d >= batch_dims else x_spec[d] for d, entry in enumerate(indices_spec[:-1])]
  wanted += x_spec[batch_dims + q :]
  used: set[str] = set()
  out = []
  for entry in wanted:
    axis_names = shardings.names(entry)
    out.append(None if used & set(axis_names) else entry)
    used |= set(axis_names)
  return mesh, PartitionSpec(*out)


def _positions(
  x_shape: tuple[int, ...], indices: jax.Array, batch_dims: int, wrap: Callable[[jax.Array, int], jax.Array]
) -> list[jax.Array]:
  """Each coordinate of the index tuples through ``wrap(coordinate, size of the dimension it indexes)``."""
  q = indices.shape[-1]
  indexed_sizes = x_shape[batch_dims : batch_dims + q]
  return [wrap(indices[..., j], size) for j, size in enumerate(indexed_sizes)]


def _fill_forward(starts: jax.Array, rows: jax.Array) -> jax.Array:
  """Every row takes the value of the nearest start row at or above it.

  A Hillis-Steele scan of selects only: linear, bit-exact (no ``0 +`` that
  would turn -0.0 into +0.0, as ``lax.associative_scan``'s interleave does), and
  its transpose adds in a fixed order.
  """
  done = starts
  shift = 1
  while shift < rows.shape[0]:
    above = jnp.concatenate([jnp.zeros_like(rows[:shift]), rows[:-shift]])
    rows = jnp.where(done, rows, above)
    done = done | jnp.concatenate([jnp.ones_like(done[:shift]), done[:-shift]])
    shift *= 2
  return rows


def _gather_rows_deterministic(table: jax.Array, keys: jax.Array) -> jax.Array:
  """``table[keys]``, written so that reverse mode needs no colliding scatter-add.

  Only the first of each run of equal (sorted) keys reads the table; the rest
  copy it through a forward-fill scan. Transposed, the scan sums each run in a
  fixed order and the read scatters one non-zero row per table row, so the
  gradient is the same bits on every run and every device.
  """
  order = jnp.argsort(keys, stable=True)
  sorted_keys = keys[order]
  starts = jnp.concatenate([jnp.ones((1,), bool), sorted_keys[1:] != sorted_keys[:-1]])[:, None]
  firsts = jnp.where(starts, table[sorted_keys], jnp.zeros((), table.dtype))
  filled = _fill_forward(starts, firsts)
  inverse = jnp.zeros_like(order).at[order].set(jnp.arange(order.shape[0], dtype=order.dtype), unique_indices=True)
  return filled.at[inverse].get(unique_indices=True, mode="promise_in_bounds")


def _gather_nd_deterministic(x: jax.Array, indices: jax.Array, batch_dims: int) -> jax.Array:
  q = indices.shape[-1]
  lead = indices.shape[:-1]
  trailing = x.shape[batch_dims + q :]
  key_dtype = index_math.position_dtype(np.dtype(np.int32), math.prod(x.shape[: batch_dims + q]))
  keys = jnp.zeros(lead, key_dtype)
  stride = 1
  coordinates = [lax.broadcasted_iota(key_dtype, lead, d) for d in range(batch_dims)]
  coordinates += [pos.astype(key_dtype) for pos in _positions(x.shape, indices, batch_dims, index_math.wrap_and_clamp)]
  for coordinate, size in reversed(list(zip(coordinates, x.shape[: batch_dims + q], strict=True))):
    keys = keys + coordinate * np.array(stride, key_dtype)
    stride *= size
  table = x.reshape(-1, math.prod(trailing))
  rows = _gather_rows_deterministic(table, keys.reshape(-1))
  return rows.reshape(lead + trailing)


@functools.partial(jax.jit, static_argnames=("batch_dims", "deterministic"))
def _gather_nd(x: jax.Array, indices: jax.Array, *, batch_dims: int, deterministic: bool = False) -> jax.Array:
  kernel = functools.partial(_gather_kernel, batch_dims=batch_dims, deterministic=deterministic)
  explicit = _explicit_output_spec(x, indices, batch_dims)
  if explicit is not None:
    mesh, spec = explicit
    return jax.sharding.auto_axes(kernel, out_sharding=NamedSharding(mesh, spec))(x, indices)
  return kernel(x, indices)


def _gather_kernel(x: jax.Array, indices: jax.Array, *, batch_dims: int, deterministic: bool) -> jax.Array:
  plain = functools.partial(_plain_gather, batch_dims=batch_dims)
  if dtypes.is_complex(x.dtype):
    # A complex table's real and imaginary parts each move as a float table does (bit for bit, -0.0 included,
    # however XLA partitions the gather), and are joined again: both are exact, and both differentiate.
    gather = functools.partial(_gather_kernel, indices=indices, batch_dims=batch_dims, deterministic=deterministic)
    return lax.complex(gather(jnp.real(x)), gather(jnp.imag(x)))
  if not dtypes.is_float(x.dtype):
    if value_bits.carrier(x.dtype) == x.dtype:
      return plain(x, indices)  # integers have no derivative, and any gather moves them exactly
    return _values_p.bind(x, indices, batch_dims=batch_dims)  # 4- and 2-bit: widened where partitioned
  tangent_map = functools.partial(_gather_nd_deterministic, batch_dims=batch_dims) if deterministic else plain
  return _float_values(batch_dims, tangent_map, x, indices)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _float_values(
  batch_dims: int, tangent_map: Callable[[jax.Array, jax.Array], jax.Array], x: jax.Array, indices: jax.Array
) -> jax.Array:
  """The gathered values of a float ``x``, bit for bit however XLA partitions the gather (:data:`_values_p`).

  The tangent is ``tangent_map`` (the plain or the deterministic gather) of the input's tangent.
  """
  del tangent_map
  return _values_p.bind(x, indices, batch_dims=batch_dims)


@_float_values.defjvp
def _float_values_jvp(
  batch_dims: int,
  tangent_map: Callable[[jax.Array, jax.Array], jax.Array],
  primals: tuple[jax.Array, jax.Array],
  tangents: tuple[Any, Any],
) -> tuple[jax.Array, jax.Array]:
  x, indices = primals
  value = _float_values(batch_dims, tangent_map, x, indices)
  # The tangent map in float32 for narrow floats, so that its transpose (reverse mode) accumulates in float32.
  tangent = tangents[0]
  return value, tangent_map(tangent.astype(autodiff.accumulation_dtype(x.dtype)), indices).astype(tangent.dtype)


def _gather_bits(x: jax.Array, indices: jax.Array, *, batch_dims: int) -> jax.Array:
  return value_bits.from_bits(_plain_gather(value_bits.to_bits(x), indices, batch_dims=batch_dims), x.dtype)


# The gather of a float table's values, as a primitive whose lowering rule sees the program's device count. Where
# the table may be split over devices, XLA's partitioner makes a gather of masked gathers and an all-reduce SUM,
# which turns -0.0 into +0.0 and quietens signalling NaNs: there the table's bits are gathered, exact on integers
# (4- and 2-bit integers widened to 8 bits: XLA:CPU has no all-reduce for them).
# On one device the float gather is exact (8-bit floats apart: value_bits.moves_exactly) and costs what ``x[i]``
# costs (reading the table's bits would count the whole table in XLA's cost estimate, which decides whether XLA:CPU
# runs a small program inline).
_values_p = Primitive("dmljax_gather_nd_values")


@_values_p.def_impl
def _values_impl(x: jax.Array, indices: jax.Array, *, batch_dims: int) -> jax.Array:
  gather = _plain_gather if value_bits.moves_exactly(x.dtype) else _gather_bits
  return gather(x, indices, batch_dims=batch_dims)


@_values_p.def_abstract_eval
def _values_abstract_eval(x: Any, indices: Any, *, batch_dims: int) -> Any:
  args = (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(indices.shape, indices.dtype))
  out = jax.eval_shape(functools.partial(_plain_gather, batch_dims=batch_dims), *args)
  return x.update(shape=out.shape, dtype=out.dtype, weak_type=False)


def _values_lowering(ctx: Any, x: Any, indices: Any, *, batch_dims: int) -> Any:
  one_device = shardings.program_devices(ctx) == 1
  gather = _plain_gather if one_device and value_bits.moves_exactly(ctx.avals_in[0].dtype) else _gather_bits
  return mlir.lower_fun(functools.partial(gather, batch_dims=batch_dims), multiple_results=False)(ctx, x, indices)


mlir.register_lowering(_values_p, _values_lowering)


def _values_batched(args: Sequence[jax.Array], dims: Sequence[int | None], *, batch_dims: int) -> Any:
  """A batch is one more batch dimension, leading both arrays (the unbatched one broadcast)."""
  size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
  leading = [
    jnp.broadcast_to(a, (size, *a.shape)) if d is None else jnp.moveaxis(a, d, 0)
    for a, d in zip(args, dims, strict=True)
  ]
  return _values_p.bind(*leading, batch_dims=batch_dims + 1), 0


batching.primitive_batchers[_values_p] = _values_batched


def _plain_gather(x: jax.Array, indices: jax.Array, *, batch_dims: int) -> jax.Array:
  q = indices.shape[-1]
  # The gather clamps start indices itself (CLIP mode, as XLA's gather does): only negative indices are
  # wrapped here, the work of native indexing, so a small gather stays as cheap as ``x[i]``.
  positions = _positions(x.shape, indices, batch_dims, index_math.wrap_for_clipping_gather)
  common = np.result_type(*(pos.dtype for pos in positions))
  start = jnp.stack([pos.astype(common) for pos in positions], axis=-1)
  batch = tuple(range(batch_dims))
  indexed = tuple(range(batch_dims, batch_dims + q))
  trailing = x.shape[batch_dims + q :]
  dimension_numbers = lax.GatherDimensionNumbers(
    offset_dims=tuple(range(indices.ndim - 1, indices.ndim - 1 + len(trailing))),
    collapsed_slice_dims=indexed,
    start_index_map=indexed,
    operand_batching_dims=batch,
    start_indices_batching_dims=batch,
  )
  return lax.gather(
    x,
    start,
    dimension_numbers=dimension_numbers,
    slice_sizes=(1,) * (batch_dims + q) + trailing,
    mode=lax.GatherScatterMode.CLIP,
  )


def gather_nd(x: ArrayLike, indices: ArrayLike, *, batch_dims: int = 0, deterministic: bool = False) -> jax.Array:
  r"""Gathers sub-blocks of ``x`` addressed by the index tuples in ``indices``, DirectML GATHER_ND1.

  With :math:`b` = ``batch_dims`` and :math:`q` = ``indices.shape[-1]``:

  .. math::
     \mathrm{out}[\beta, i] = x[\beta, c(\mathrm{indices}[\beta, i, 0]), \ldots,
     c(\mathrm{indices}[\beta, i, q-1]), \ldots]

  where :math:`c` counts a negative index from the end once and then clamps to
  ``[0, size - 1]``: out-of-range indices never raise, under jit or not. Shapes
  follow TF/ONNX: ``indices.shape[:-1] + x.shape[batch_dims + q:]``.

  Args:
    x: array of any dtype, rank 1 to 8.
    indices: integer array (any signed or unsigned width), rank 1 to 8; its
      last dimension is the tuple length ``q``.
    batch_dims: number of leading batch dimensions shared by ``x`` and
      ``indices`` (equal sizes).
    deterministic: the gradient w.r.t. ``x`` sums the cotangents of duplicate
      indices. By default that is a scatter-add, which GPUs run with unordered
      atomics, so float gradients may differ in the last bits from run to run
      (CPU results are reproducible either way). ``True`` computes the same
      values with a formulation whose reverse mode sums duplicates in a fixed
      order (a sort and a scan, costlier), giving bitwise-reproducible
      gradients everywhere; forward mode and higher orders work unchanged.

  Returns:
    The gathered array, of ``x``'s dtype.

  Raises:
    DescriptorError: at trace time, for bad ranks, a non-integer ``indices``,
      ``batch_dims`` out of range, mismatched batch sizes or a tuple length
      outside ``[1, rank(x) - batch_dims]``.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> x = jnp.array([[0., 1.], [2., 3.]])
    >>> dml.gather_nd(x, jnp.array([[1], [-2]])).tolist()
    [[2.0, 3.0], [0.0, 1.0]]
  """
  p = Problems("gather_nd")
  array = dtypes.as_array(p, "x", x)
  index_array = dtypes.as_array(p, "indices", indices)
  if index_array is not None:
    dtypes.require_integer(p, "indices", np.dtype(index_array.dtype))
  if array is not None and index_array is not None:  # the shape rules hold whatever the indices' dtype
    out_shape = _check_gather_nd(p, FUNCTIONAL, array.shape, index_array.shape, batch_dims)
    if deterministic and out_shape is not None:
      keyed = array.shape[: batch_dims + index_array.shape[-1]]
      dtypes.positions_fit(p, f"the row count of x.shape{keyed} (deterministic=True)", math.prod(keyed))
  else:
    # The shared rules need both arrays; each one's own rank rule still runs.
    for role, given in (("x", array), ("indices", index_array)):
      if given is not None:
        axes_lib.rank_in_range(p, FUNCTIONAL, role, given.shape)
  p.raise_if_any()
  assert array is not None and index_array is not None
  return _gather_nd(array, index_array, batch_dims=int(batch_dims), deterministic=bool(deterministic))


_FIELDS_IN = ("input_tensor", "indices_tensor")
_FIELDS_OUT = ("output_tensor",)


def _meaningful(
  p: Problems, field: str, count_field: str, sizes: tuple[int, ...], count: Any
) -> tuple[int, ...] | None:
  if not p.require(
    axes_lib.is_int(count) and 1 <= count <= len(sizes),
    f"{count_field} must be an integer in [1, {len(sizes)}] (the rank of {field})",
    f"{count_field}={count!r}",
  ):
    return None
  leading = sizes[: len(sizes) - count]
  if not p.require(
    all(s == 1 for s in leading),
    f"{field}.sizes before the last {count_field}={count} must be 1",
    f"{field}.sizes={sizes}",
  ):
    return None
  return sizes[len(sizes) - count :]


def _output_sizes(
  p: Problems,
  input_tensor: TensorDesc,
  indices_tensor: TensorDesc,
  input_count: Any,
  indices_count: Any,
  batch_dims: Any,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
  """The meaningful input and indices sizes and the output's sizes at the common rank, or ``None``."""
  rank = input_tensor.rank
  x_shape = _meaningful(p, "input_tensor", "input_dimension_count", input_tensor.sizes, input_count)
  indices_shape = _meaningful(p, "indices_tensor", "indices_dimension_count", indices_tensor.sizes, indices_count)
  if x_shape is None or indices_shape is None:
    return None
  meaningful_out = _check_gather_nd(p, _DESCRIPTOR, x_shape, indices_shape, batch_dims)
  if meaningful_out is None or not p.require(
    len(meaningful_out) <= rank,
    f"the output's meaningful dimensions (indices_dimension_count - 1 + input_dimension_count - "
    f"batch_dimension_count - tuple length) must fit the rank {rank}",
    f"input_dimension_count={input_count}, indices_dimension_count={indices_count}, "
    f"batch_dimension_count={batch_dims} (output dimensions {meaningful_out})",
  ):
    return None
  return x_shape, indices_shape, (1,) * (rank - len(meaningful_out)) + meaningful_out


def _output(
  name: str, input_tensor: Any, indices_tensor: Any, input_count: Any, indices_count: Any, batch_dims: Any
) -> tuple[TensorDesc, tuple[int, int]]:
  """The output descriptor ``from_inputs`` fills in and the dimension counts, ``None`` ones as the ranks.

  Raises for bad inputs or attributes.
  """
  p = Problems(name)
  ok = tensor_desc.well_formed(p, "input_tensor", input_tensor)
  ok &= tensor_desc.well_formed(p, "indices_tensor", indices_tensor)
  found = None
  if ok and tensor_desc.same_rank(p, {"input_tensor": input_tensor, "indices_tensor": indices_tensor}):
    input_count = input_tensor.rank if input_count is None else input_count
    indices_count = indices_tensor.rank if indices_count is None else indices_count
    found = _output_sizes(p, input_tensor, indices_tensor, input_count, indices_count, batch_dims)
  p.raise_if_any()
  assert found is not None
  return TensorDesc(input_tensor.data_type, found[2]), (input_count, indices_count)


def execute_gather_nd(desc: GatherNDDesc | GatherND1Desc, inputs: Sequence[Any], feature_level: Any) -> jax.Array:
  """The descriptor path of GATHER_ND and GATHER_ND1 (see :func:`dmljax.execute`)."""
  name = "GATHER_ND1" if isinstance(desc, GatherND1Desc) else "GATHER_ND"
  batch_dims = desc.batch_dimension_count if isinstance(desc, GatherND1Desc) else 0
  p = Problems(name)
  tensors_ok = descriptor_path.check_descriptor(
    p, desc, inputs, input_fields=_FIELDS_IN, output_fields=_FIELDS_OUT, table=name, feature_level=feature_level
  )
  found = None
  if tensors_ok:
    tensor_desc.output_type_matches(p, "output_tensor", desc.output_tensor, [DataType(desc.input_tensor.data_type)])
    found = _output_sizes(
      p, desc.input_tensor, desc.indices_tensor, desc.input_dimension_count, desc.indices_dimension_count, batch_dims
    )
    if found is not None:
      tensor_desc.output_sizes_match(p, "output_tensor", desc.output_tensor, found[2])
  p.raise_if_any()
  assert found is not None
  x_shape, indices_shape, _ = found
  x, indices = descriptor_path.input_arrays(desc, inputs, _FIELDS_IN)
  out = _gather_nd(x.reshape(x_shape), indices.reshape(indices_shape), batch_dims=int(batch_dims))
  return out.reshape(desc.output_tensor.sizes)
