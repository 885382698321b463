"""DirectML data types, their JAX dtypes, and the dtype rules shared by every operator."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dmljax._src import symbolic
from dmljax._src.errors import Problems


class DataType(enum.IntEnum):
  """``DML_TENSOR_DATA_TYPE``, with the numeric values of ``directml.h``.

  The data type of a :class:`TensorDesc`. Each maps to the NumPy/JAX dtype of
  the same name; the 64-bit ones need ``jax_enable_x64``, and asking for one
  without it raises :class:`DescriptorError` rather than silently narrowing.
  The functional path takes JAX dtypes directly (bfloat16 too, which has no
  DirectML data type).

  Example:
    >>> import dmljax as dml, numpy as np
    >>> dml.DataType.FLOAT32.value, dml.DataType(11).name
    (1, 'INT64')
    >>> dml.TensorDesc.like(np.zeros((2, 3), np.uint8)).data_type
    <DataType.UINT8: 5>
  """

  FLOAT32 = 1
  FLOAT16 = 2
  UINT32 = 3
  UINT16 = 4
  UINT8 = 5
  INT32 = 6
  INT16 = 7
  INT8 = 8
  FLOAT64 = 9
  UINT64 = 10
  INT64 = 11


_NUMPY_DTYPE: dict[DataType, np.dtype] = {
  DataType.FLOAT32: np.dtype(np.float32),
  DataType.FLOAT16: np.dtype(np.float16),
  DataType.FLOAT64: np.dtype(np.float64),
  DataType.UINT8: np.dtype(np.uint8),
  DataType.UINT16: np.dtype(np.uint16),
  DataType.UINT32: np.dtype(np.uint32),
  DataType.UINT64: np.dtype(np.uint64),
  DataType.INT8: np.dtype(np.int8),
  DataType.INT16: np.dtype(np.int16),
  DataType.INT32: np.dtype(np.int32),
  DataType.INT64: np.dtype(np.int64),
}
_DATA_TYPE = {dtype: data_type for data_type, dtype in _NUMPY_DTYPE.items()}

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint32), np.dtype(np.uint64))


def numpy_dtype(data_type: DataType) -> np.dtype:
  """The NumPy/JAX dtype of a DirectML data type."""
  return _NUMPY_DTYPE[DataType(data_type)]


def data_type_of(dtype: Any) -> DataType | None:
  """The DirectML data type of a dtype, or ``None`` where DirectML has none (bfloat16, bool)."""
  return _DATA_TYPE.get(np.dtype(dtype))


def x64_enabled() -> bool:
  return bool(jax.config.read("jax_enable_x64"))


def is_64bit(dtype: Any) -> bool:
  """Whether a type needs ``jax_enable_x64``: 64-bit numbers, and complex128 (two float64s), not complex64."""
  dtype = np.dtype(dtype)
  return dtype.itemsize == (16 if dtype.kind == "c" else 8)


def is_float(dtype: Any) -> bool:
  return bool(jnp.issubdtype(dtype, jnp.floating))


def is_integer(dtype: Any) -> bool:
  return bool(jnp.issubdtype(dtype, jnp.integer))


def is_signed_integer(dtype: Any) -> bool:
  return bool(jnp.issubdtype(dtype, jnp.signedinteger))


def dtype_name(dtype: Any) -> str:
  return np.dtype(dtype).name


def require_x64_for(p: Problems, field: str, dtype: Any, hint: Callable[[], str] | None = None) -> bool:
  """A 64-bit type without ``jax_enable_x64`` is an error, never a silent downcast; ``hint()`` ends the statement."""
  if not is_64bit(dtype) or x64_enabled():
    return True
  p.add(
    f"{field} of type {dtype_name(dtype)} needs jax.config.update('jax_enable_x64', True){hint() if hint else ''}",
    f"{field}={dtype_name(dtype)} with jax_enable_x64 off",
  )
  return False


# XLA counts every array's bytes in int64 and aborts the whole process (a failed C++ check, not a Python exception)
# when that count overflows. The widest element an operator creates is 16 bytes (complex128), so an output of at
# most this many elements (2**59 - 1) can never overflow it.
MAX_ELEMENTS = (2**63 - 1) // 16


def extent_fits(p: Problems, what: str, shape: tuple[int, ...], got: str) -> bool:
  """An output of ``shape`` must have at most :data:`MAX_ELEMENTS` elements (larger aborts XLA).

  A shape with symbolic dimensions passes: its size is known only when the exported program is called, on arrays
  that already exist.
  """
  count = math.prod(shape)
  return p.require(
    symbolic.decide(lambda: count <= MAX_ELEMENTS, otherwise=True),
    f"{what} must have at most 2**59 - 1 elements (XLA counts an array's bytes in int64, and past that it aborts "
    "the process)",
    f"{got} (output shape {tuple(shape)}, {count} elements)",
  )


def _narrowing_hint(field: str, x: Any, dtype: np.dtype) -> str:
  """How else a 64-bit NumPy value could be given without x64: the cast to its 32-bit type, where exact for integers."""
  if not isinstance(x, (np.ndarray, np.generic)):
    return ""
  if dtype.kind in "fc":
    narrow = "float32" if dtype.kind == "f" else "complex64"
    return f", or cast it: {field}.astype(np.{narrow}) (which rounds)"
  narrow = "int32" if dtype.kind == "i" else "uint32"
  values = np.asarray(x)
  info = np.iinfo(narrow)
  if values.size and (values.min() < info.min or values.max() > info.max):
    return f" (its values [{values.min()}, {values.max()}] do not fit {narrow})"
  return f", or cast it: {field}.astype(np.{narrow}) (its values fit)"


def canonical_index_dtype(p: Problems, field: str, index_dtype: Any) -> np.dtype | None:
  """Checks an ``index_dtype`` option: one of int32, int64, uint32, uint64; ``None`` is JAX's default integer."""
  if index_dtype is None:
    return default_int_dtype()
  try:
    dtype = np.dtype(index_dtype)
  except TypeError:
    dtype = None
  names = ", ".join(d.name for d in INDEX_DTYPES)
  shown = dtype.name if dtype is not None else repr(index_dtype)
  if not p.require(dtype in INDEX_DTYPES, f"{field} must be one of {names}", f"{field}={shown}"):
    return None
  assert dtype is not None
  return dtype if require_x64_for(p, field, dtype) else None


# ml_dtypes' types that JAX names but XLA has no type for: every platform refuses them alike.
_NO_XLA_TYPE = ("float6_",)


def as_array(p: Problems, field: str, x: Any, *, narrow: bool = False) -> jax.Array | None:
  """``jnp.asarray(x)``; 64-bit NumPy input without x64 is narrowed (``narrow``) or refused.

  The functional path narrows it, as ``jnp.asarray`` and the JAX calls it replaces do (float64 to
  float32, int64 to int32). Elsewhere (gather_nd, the ONNX backend) dmljax raises an error instead
  (docs/semantics.rst, "64-bit types"), which names the cast that would give the same call in 32 bits:
  exact for integers whose values fit (and said so), rounding for floats.
  """
  declared = getattr(x, "dtype", None)
  if declared is not None:
    if jnp.issubdtype(declared, jax.dtypes.extended):
      p.add(
        f"{field} must be an array of numbers (a PRNG key array holds keys: pass jax.random.key_data({field}))",
        f"{field}.dtype={declared}",
      )
      return None
    if not p.require(
      np.dtype(declared).kind in "biufc" or is_float(declared) or is_integer(declared),
      f"{field} must be an array of numbers",
      f"{field}.dtype={dtype_name(declared)}",
    ):
      return None
    if not narrow and not require_x64_for(p, field, declared, lambda: _narrowing_hint(field, x, np.dtype(declared))):
      return None
  if declared is not None and np.dtype(declared).name.startswith(_NO_XLA_TYPE):
    p.add(
      f"{field} must have a type XLA can hold ({dtype_name(declared)} has none on any platform): cast it, "
      "e.g. to float8_e4m3fn or float32",
      f"{field}.dtype={dtype_name(declared)}",
    )
    return None
  try:
    return jnp.asarray(x)
  except (TypeError, ValueError, OverflowError) as e:
    p.add(f"{field} must be an array of numbers", f"{field} of type {type(x).__name__} ({e})")
    return None


def default_int_dtype() -> np.dtype:
  """JAX's default integer: int64 with ``jax_enable_x64``, int32 without (``jnp.argmax``'s result type)."""
  return np.dtype(jax.dtypes.canonicalize_dtype(int))


def default_uint_dtype() -> np.dtype:
  """JAX's default unsigned integer: uint64 with ``jax_enable_x64``, uint32 without."""
  return np.dtype(jax.dtypes.canonicalize_dtype(np.uint64))


def is_complex(dtype: Any) -> bool:
  return bool(jnp.issubdtype(dtype, jnp.complexfloating))


def is_bool(dtype: Any) -> bool:
  return np.dtype(dtype) == np.dtype(bool)


def summed_dtype(dtype: Any, *, promote_integers: bool) -> np.dtype:
  """The result type of ``jnp.sum``/``jnp.prod``: bool counts as int32; with ``promote_integers``, an integer
  narrower than JAX's default integer (unsigned: the default unsigned) widens to it."""
  dtype = np.dtype(dtype)
  if is_bool(dtype):
    dtype = np.dtype(np.int32)
  if promote_integers and is_integer(dtype):
    default = default_uint_dtype() if not is_signed_integer(dtype) else default_int_dtype()
    if jnp.iinfo(dtype).bits < jnp.iinfo(default).bits:
      return default
  return dtype


def inexact_dtype(dtype: Any) -> np.dtype:
  """The result type of ``jnp.mean`` and ``logsumexp``: floating and complex types stay; bool and integers up to
  32 bits become float32, 64-bit integers float64 (JAX's rule, whatever ``jax_enable_x64`` says)."""
  dtype = np.dtype(dtype)
  if is_float(dtype) or is_complex(dtype):
    return dtype
  return np.dtype(np.float64) if dtype.itemsize == 8 else np.dtype(np.float32)


def require_real(p: Problems, field: str, dtype: np.dtype, why: str) -> bool:
  """An integer or floating dtype (bfloat16 included); bool and complex are not supported, for the reason ``why``."""
  return p.require(
    is_float(dtype) or is_integer(dtype),
    f"{field} must have an integer or floating dtype ({why}); {dtype.name} is not supported",
    f"{field}.dtype={dtype.name}",
  )


def require_integer(p: Problems, field: str, dtype: np.dtype) -> bool:
  """Indices: any signed or unsigned integer dtype."""
  return p.require(is_integer(dtype), f"{field} must have an integer dtype", f"{field}.dtype={dtype.name}")


def index_dtype_can_hold(p: Problems, field: str, index_dtype: np.dtype, largest: Any, what: str) -> bool:
  """An index of ``largest`` must be representable in ``index_dtype`` (a symbolic one is assumed to be, as jax.lax
  assumes an int32 indexes a symbolic dimension)."""
  return p.require(
    symbolic.decide(lambda: largest <= int(np.iinfo(index_dtype).max), otherwise=True),
    f"{field} {index_dtype.name} cannot index {what} (largest index {largest}, "
    f"{index_dtype.name} holds at most {np.iinfo(index_dtype).max})",
    f"{field}={index_dtype.name}",
  )


def positions_fit(p: Problems, field: str, size: Any) -> bool:
  """Positions along a dimension are computed in int32 unless x64 is on (no silent downcast); along a symbolic
  dimension, in int32, as jax.lax computes them."""
  limit = int(np.iinfo(np.int32).max)
  return p.require(
    symbolic.decide(lambda: size - 1 <= limit, otherwise=True) or x64_enabled(),
    f"{field} = {size} needs 64-bit positions (int32 holds at most {limit}): "
    "enable jax.config.update('jax_enable_x64', True)",
    f"{field}={size} with jax_enable_x64 off",
  )
