"""``DML_BUFFER_TENSOR_DESC`` (without strides) and the descriptor-path checks on it.

These helpers are the descriptor half of the one validation layer: they check
tensor descriptors against DirectML's rules and feature-level tables, the arrays
given to :func:`dmljax.execute` against their descriptors, and output
descriptors against what the operator will produce. The operator rules
themselves (axis, K, batch dims, ...) live with each operator and are shared
with the functional path.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from dmljax._src import axes as axes_lib
from dmljax._src import dtypes, enums, symbolic
from dmljax._src.dtypes import DataType
from dmljax._src.errors import Problems
from dmljax._src.feature_levels import TensorSupport


@dataclasses.dataclass(frozen=True)
class TensorDesc:
  """A DirectML tensor descriptor: data type and sizes (``DML_BUFFER_TENSOR_DESC`` without strides).

  Constructing one never raises for a rule violation; :func:`dmljax.execute`
  checks it against the operator and the arrays it is given.

  Attributes:
    data_type: ``DataType``, a :class:`DataType` member, its numeric value, or
      the NumPy/JAX dtype of the same name (``np.float32``, ``"int64"``).
    sizes: ``Sizes`` (``DimensionCount`` is ``len(sizes)``), outermost first:
      1 to 8 dimensions, none of size 0. Under ``jax.export`` with symbolic
      shapes a size may be a symbolic dimension (``TensorDesc.like`` of the
      traced input keeps it), wherever the operator does not need it concrete.

  Raises:
    DescriptorError: from :func:`execute`, for an unknown data type, a rank
      outside 1 to 8, a size below 1, a 64-bit type without
      ``jax_enable_x64``, or an array whose dtype or shape differs.

  Example:
    >>> import dmljax as dml
    >>> dml.TensorDesc(dml.DataType.FLOAT32, (1, 1, 3, 4)).rank
    4
    >>> dml.TensorDesc(np.float16, (2, 3)).data_type
    <DataType.FLOAT16: 2>
  """

  data_type: DataType
  sizes: tuple[int, ...]

  def __post_init__(self) -> None:
    if isinstance(self.sizes, Sequence) and not isinstance(self.sizes, tuple):
      object.__setattr__(self, "sizes", tuple(self.sizes))
    if not isinstance(self.data_type, (int, np.integer)):
      # A dtype DirectML has no type for (bfloat16) stays as given, for execute to refuse with a message.
      try:
        data_type = dtypes.data_type_of(self.data_type)
      except TypeError:
        data_type = None
      if data_type is not None:
        object.__setattr__(self, "data_type", data_type)

  @property
  def rank(self) -> int:
    """The number of dimensions (DirectML's ``DimensionCount``)."""
    return len(self.sizes)

  @classmethod
  def like(cls, x: Any) -> TensorDesc:
    """The descriptor of an array (or ``jax.ShapeDtypeStruct``) with a DirectML dtype.

    Raises:
      TypeError: for a dtype DirectML has no data type for (bfloat16, bool).

    Example:
      >>> import dmljax as dml, numpy as np
      >>> dml.TensorDesc.like(np.zeros((2, 3), np.float16))
      TensorDesc(data_type=<DataType.FLOAT16: 2>, sizes=(2, 3))
    """
    data_type = dtypes.data_type_of(x.dtype)
    if data_type is None:
      raise TypeError(f"dtype {np.dtype(x.dtype).name} has no DirectML data type")
    return cls(data_type, tuple(s if symbolic.is_symbolic(s) else int(s) for s in x.shape))


def well_formed(p: Problems, field: str, desc: Any) -> bool:
  """Type, data type and sizes of a tensor descriptor, before any operator rule."""
  if not p.require(isinstance(desc, TensorDesc), f"{field} must be a dml.TensorDesc", f"{field}={type(desc).__name__}"):
    return False
  ok = True
  try:
    data_type = DataType(desc.data_type)
  except (ValueError, TypeError):
    data_type = None
  names = ", ".join(m.name for m in DataType)
  ok &= p.require(
    data_type is not None, f"{field}.data_type must be one of {names}", f"{field}.data_type={desc.data_type!r}"
  )
  sizes = desc.sizes
  if not p.require(
    isinstance(sizes, tuple) and all(axes_lib.is_int(s) or symbolic.is_symbolic(s) for s in sizes),
    f"{field}.sizes must be a sequence of integers (or jax.export's symbolic dimensions)",
    f"{field}.sizes={sizes!r}",
  ):
    return False
  ok &= p.require(
    1 <= len(sizes) <= axes_lib.MAX_RANK,
    f"{field} must have rank 1 to {axes_lib.MAX_RANK}",
    f"{field}.sizes={sizes} (rank {len(sizes)})",
  )
  ok &= p.require(
    all(symbolic.decide(functools.partial(operator.ge, s, 1), otherwise=False) for s in sizes),
    f"{field}.sizes must all be >= 1 (DirectML has no size-0 dimensions)",
    f"{field}.sizes={sizes}",
  )
  ok &= dtypes.extent_fits(p, field, sizes, f"{field}.sizes={sizes}")
  if data_type is not None:
    ok &= dtypes.require_x64_for(p, f"{field}.data_type", dtypes.numpy_dtype(data_type))
  return ok


def supported(p: Problems, field: str, desc: TensorDesc, support: TensorSupport, level_name: str) -> bool:
  """The feature-level table row: supported ranks and data types."""
  ok = p.require(
    desc.rank in support.ranks,
    f"{field} must have rank {support.describe_ranks()} at feature level {level_name}",
    f"{field}.sizes={desc.sizes} (rank {desc.rank})",
  )
  names = ", ".join(t.name for t in sorted(support.data_types, key=lambda t: t.name))
  ok &= p.require(
    DataType(desc.data_type) in support.data_types,
    f"{field}.data_type must be one of {names} at feature level {level_name}",
    f"{field}.data_type={DataType(desc.data_type).name}",
  )
  return ok


def same_rank(p: Problems, fields: dict[str, TensorDesc]) -> bool:
  ranks = {name: d.rank for name, d in fields.items()}
  listed = ", ".join(f"{name}.sizes={d.sizes}" for name, d in fields.items())
  return p.require(
    len(set(ranks.values())) == 1,
    f"{', '.join(ranks)} must have the same rank (DirectML pads the smaller tensors' sizes with leading 1s, "
    f"e.g. (3, 4) as (1, 3, 4))",
    listed,
  )


def output_sizes_match(p: Problems, field: str, desc: TensorDesc, sizes: tuple[int, ...]) -> bool:
  """An output descriptor's sizes must be what the operator produces."""
  return p.require(
    tuple(desc.sizes) == tuple(sizes), f"{field}.sizes must be {tuple(sizes)}", f"{field}.sizes={tuple(desc.sizes)}"
  )


def output_type_matches(p: Problems, field: str, desc: TensorDesc, data_types: Sequence[DataType]) -> bool:
  """An output descriptor's data type must be one the operator produces."""
  expected = " or ".join(t.name for t in data_types)
  return p.require(
    DataType(desc.data_type) in data_types,
    f"{field}.data_type must be {expected}",
    f"{field}.data_type={DataType(desc.data_type).name}",
  )


def data_type_option(p: Problems, field: str, value: Any, data_types: Sequence[DataType]) -> DataType | None:
  """A ``from_inputs`` option naming an output's data type (a :class:`DataType`, its value or its name).

  It must be one the operator produces; returns it, or ``None`` with the problem recorded in ``p``.
  """
  data_type = enums.parse_enum(p, field, value, DataType)
  if data_type is None:
    return None
  expected = " or ".join(t.name for t in data_types)
  ok = p.require(data_type in data_types, f"{field} must be {expected}", f"{field}={data_type.name}")
  return data_type if ok else None


def array_matches(p: Problems, field: str, x: Any, desc: TensorDesc) -> bool:
  """An array given to :func:`dmljax.execute` must have its descriptor's dtype and sizes.

  Arrays (and ``ShapeDtypeStruct`` tracers) must carry exactly the descriptor's
  dtype; nested Python lists carry none and are converted to it.
  """
  declared = getattr(x, "dtype", None)
  if declared is not None and not dtypes.require_x64_for(p, field, declared):
    return False
  if declared is None:
    want = dtypes.numpy_dtype(desc.data_type)
    try:
      x = jnp.asarray(x, want)
    except (TypeError, ValueError, OverflowError) as e:
      p.add(f"{field} array must hold numbers of type {want.name}", f"{field} array {type(x).__name__} ({e})")
      return False
  shape = tuple(np.shape(x))
  ok = p.require(
    shape == tuple(desc.sizes),
    f"{field} array must have shape {field}.sizes={tuple(desc.sizes)}",
    f"{field} array of shape {shape}",
  )
  if declared is not None:
    want = dtypes.numpy_dtype(desc.data_type)
    ok &= p.require(
      np.dtype(declared) == want,
      f"{field} array must have dtype {want.name} ({field}.data_type={DataType(desc.data_type).name})",
      f"{field} array of dtype {np.dtype(declared).name}",
    )
  return ok
