"""The nodes :mod:`dmljax.onnx`'s backend runs: the dmljax operators, the glue around them, and their static rules.

Each handler takes the node and its inputs (NumPy arrays for constants and values known when the graph is
traced, JAX values otherwise, ``None`` for an omitted optional input) and returns its outputs. TopK,
ArgMax/ArgMin, GatherND, Reduce* and OneHot are :mod:`dmljax.onnx`'s functions; Gather is GatherND of
one-element index tuples; the glue (Constant, Identity, Cast, CastLike, Reshape, Squeeze, Unsqueeze and the
elementwise Abs, Neg, Exp, Log, Sqrt, Add, Sub, Mul, Div) is plain ``jax.numpy``/``lax``, or NumPy for the
glue that the backend folds while tracing (:data:`FOLDABLE`), with the same results bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from onnx import TensorProto, helper, numpy_helper

from dmljax._src import axes as axes_lib
from dmljax._src import dtypes
from dmljax._src.errors import DescriptorError, Problems
from dmljax._src.onnx import ops


class ModelError(ValueError):
  """An ONNX model, node or input that :mod:`dmljax.onnx`'s backend cannot run.

  The message names the node (its name, or its position when unnamed) and its op type, or the graph input,
  and says what the model declares, what was given and how to fix it where one fix is clear.

  Attributes:
    node: the node's name (``None`` when the problem is not one node's).
    op_type: the node's op type (``None`` likewise).
    input_name: the graph input at fault (``None`` when the problem is not one input's).

  Example:
    >>> import dmljax.onnx as donnx
    >>> from onnx import TensorProto, helper
    >>> node = helper.make_node("Softmax", ["x"], ["y"], name="probs")
    >>> graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
    ...                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    >>> try:
    ...   donnx.Backend.prepare(helper.make_model(graph))
    ... except donnx.ModelError as error:
    ...   print(str(error)[:63])
    node 'probs' (Softmax): op type Softmax (domain 'ai.onnx') is n
  """

  def __init__(
    self, message: str, *, node: str | None = None, op_type: str | None = None, input_name: str | None = None
  ):
    self.node = node
    self.op_type = op_type
    self.input_name = input_name
    super().__init__(message)


@dataclasses.dataclass(frozen=True)
class Node:
  name: str
  op_type: str
  inputs: tuple[str, ...]
  outputs: tuple[str, ...]
  attrs: Mapping[str, Any]
  opset: int
  index: int = -1  # its position in the graph (names need not be unique)

  def error(self, message: str) -> ModelError:
    return ModelError(f"node {self.name!r} ({self.op_type}): {message}", node=self.name, op_type=self.op_type)

  def attr(self, name: str, default: Any) -> Any:
    return self.attrs.get(name, default)


# ---- types ----------------------------------------------------------------------------------------------

# The ONNX element types NumPy lacks, as ml_dtypes has them (named here: onnx before 1.18 maps them to float32
# or to structured bit patterns, which would compute a float8 cast in float32).
_ML_DTYPES = {
  "BFLOAT16": ml_dtypes.bfloat16,
  "FLOAT8E4M3FN": ml_dtypes.float8_e4m3fn,
  "FLOAT8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
  "FLOAT8E5M2": ml_dtypes.float8_e5m2,
  "FLOAT8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
  "FLOAT8E8M0": ml_dtypes.float8_e8m0fnu,
  "FLOAT4E2M1": ml_dtypes.float4_e2m1fn,
  "INT4": ml_dtypes.int4,
  "UINT4": ml_dtypes.uint4,
  "INT2": ml_dtypes.int2,
  "UINT2": ml_dtypes.uint2,
}
# ONNX element types JAX cannot hold: strings, and the 6-bit floats XLA has no type for.
_NO_JAX_TYPE = {"STRING", "FLOAT6E2M3", "FLOAT6E3M2"}
WIDE = (np.dtype(np.float64), np.dtype(np.complex128))  # refused without x64: never computed in 32 bits
WIDE_INTEGERS = (np.dtype(np.int64), np.dtype(np.uint64))  # computed in 32 bits without x64, where exact


def element_dtype(elem_type: int, where: str) -> np.dtype:
  """The NumPy dtype of an ONNX element type JAX can compute (``where`` names the tensor in the error)."""
  try:
    name = TensorProto.DataType.Name(elem_type)
  except ValueError as e:
    raise ModelError(f"{where} has element type {elem_type}, which ONNX does not define") from e
  if name in _NO_JAX_TYPE:
    raise ModelError(f"{where} has element type {name}: dmljax.onnx computes numbers only (JAX has no {name} type)")
  if name in _ML_DTYPES:
    return np.dtype(_ML_DTYPES[name])
  try:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
  except (KeyError, TypeError, ValueError) as e:
    raise ModelError(f"{where} has element type {name}, which has no NumPy type") from e


def tensor_array(tensor: TensorProto, where: str) -> np.ndarray:
  """A tensor's values, of :func:`element_dtype` (onnx before 1.18 returns some types as bit patterns)."""
  wanted = element_dtype(tensor.data_type, where)
  array = numpy_helper.to_array(tensor)
  if array.dtype == wanted:
    return array
  if array.dtype.fields:  # a structured view of the values' bits, or of small integers
    array = array.view(next(iter(array.dtype.fields.values()))[0])
  if _is_float(wanted) and array.dtype.kind in "iu" and array.dtype.itemsize == wanted.itemsize:
    return array.view(wanted)
  return array.astype(wanted)


def jax_dtype(dtype: np.dtype) -> np.dtype:
  """``dtype`` as JAX computes it: int64/uint64 as int32/uint32 without x64 (float64 is refused at prepare)."""
  return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def type_name(dtype: np.dtype, shape: tuple[Any, ...] | None) -> str:
  """``float32[N,10,4,5]``: ONNX's way of writing a tensor type (``?`` for an unknown dimension)."""
  if shape is None:
    return f"{dtype.name}[...]"
  return f"{dtype.name}[{','.join('?' if d is None else str(d) for d in shape)}]"


def numpy_fix(dtype: np.dtype) -> str:
  """The call that gives an array ``dtype``: ``np.asarray(x, np.float32)``."""
  module = "np" if hasattr(np, dtype.name) else "ml_dtypes"
  return f"np.asarray(x, {module}.{dtype.name})"


def narrowed(value: np.ndarray, error: Callable[[str], ModelError]) -> np.ndarray:
  """A NumPy array as JAX computes it without x64: 64-bit integers as 32-bit ones, which must hold its values
  (else ``error`` of why: the caller names the array)."""
  if value.dtype not in WIDE_INTEGERS or dtypes.x64_enabled():
    return value
  narrow = np.dtype(np.int32) if value.dtype == np.int64 else np.dtype(np.uint32)
  info = np.iinfo(narrow)
  if value.size and (value.min() < info.min or value.max() > info.max):
    raise error(
      f"{value.dtype.name} values in [{value.min()}, {value.max()}], beyond {narrow.name}, which jax_enable_x64 off "
      "computes them in: enable it with jax.config.update('jax_enable_x64', True) before prepare"
    )
  return value.astype(narrow)


def narrowed_constant(value: np.ndarray, what: str, node: Node | None) -> np.ndarray:
  """:func:`narrowed` of a constant ``what`` of ``node`` (or of the graph, for ``None``)."""
  return narrowed(value, lambda why: node.error(f"{what} holds {why}") if node else ModelError(f"{what} holds {why}"))


def to_jax(value: Any, what: str, node: Node | None) -> Any:
  """A NumPy constant as the JAX value a traced node computes with (see :func:`narrowed`); others unchanged."""
  if not isinstance(value, np.ndarray):
    return value
  return jnp.asarray(narrowed_constant(value, what, node))


# ---- the operators -------------------------------------------------------------------------------------


def _top_k(node: Node, args: list[Any]) -> list[Any]:
  k = node.attrs["k"] if "k" in node.attrs else args[1]
  values, indices = ops.top_k(
    args[0], k, axis=node.attr("axis", -1), largest=bool(node.attr("largest", 1)), sorted=bool(node.attr("sorted", 1))
  )
  return [values, indices]


def _arg(find_max: bool) -> Callable[[Node, list[Any]], list[Any]]:
  def convert(node: Node, args: list[Any]) -> list[Any]:
    function = ops.argmax if find_max else ops.argmin
    out = function(
      args[0],
      axis=node.attr("axis", 0),
      keepdims=bool(node.attr("keepdims", 1)),
      select_last_index=bool(node.attr("select_last_index", 0)),
    )
    return [out]

  return convert


def _gather_nd(node: Node, args: list[Any]) -> list[Any]:
  return [ops.gather_nd(args[0], args[1], batch_dims=node.attr("batch_dims", 0))]


def _gather(node: Node, args: list[Any]) -> list[Any]:
  """ONNX Gather along ``axis`` as dmljax's GATHER_ND of one-element index tuples (same index policy)."""
  data, indices = args[0], args[1]
  p = Problems("onnx.Gather")
  axis = axes_lib.canonical_axis(p, "axis", node.attr("axis", 0), data.ndim, allow_negative=True)
  p.raise_if_any()
  assert axis is not None
  count, rank = indices.ndim, data.ndim
  out = ops.gather_nd(jnp.moveaxis(data, axis, 0), jnp.expand_dims(indices, -1), batch_dims=0)
  # out: indices' dims, then data's dims but axis; ONNX puts indices' dims where axis was.
  order = [*range(count, count + axis), *range(count), *range(count + axis, count + rank - 1)]
  return [jnp.transpose(out, order) if order != sorted(order) else out]


def _reduce(node: Node, args: list[Any]) -> list[Any]:
  axes = node.attrs["axes"] if "axes" in node.attrs else (args[1] if len(args) > 1 else None)
  if isinstance(axes, (np.ndarray, np.generic, jax.Array)):
    require_vector(node, 1, np.ndim(axes))
  out = ops.reduce(
    node.op_type,
    args[0],
    axes,
    keepdims=bool(node.attr("keepdims", 1)),
    noop_with_empty_axes=bool(node.attr("noop_with_empty_axes", 0)),
  )
  return [out]


def _one_hot(node: Node, args: list[Any]) -> list[Any]:
  indices, depth, values = args[0], args[1], args[2]
  if node.opset < 11:
    # Before opset 11 a negative index is out of range: send it to the index type's minimum, below -depth for
    # every depth that type's positions can count to, where dmljax leaves the whole sequence off.
    wide = ops.index_dtype()
    indices = jnp.asarray(indices).astype(wide)  # as ops.one_hot would (ONNX truncates non-integer indices)
    indices = jnp.where(indices < 0, np.array(np.iinfo(wide).min, wide), indices)
  return [ops.one_hot(indices, depth, values, axis=node.attr("axis", -1))]


# ---- the glue ------------------------------------------------------------------------------------------


def _constant(node: Node, args: list[Any]) -> list[Any]:
  del args
  attrs = node.attrs
  if "value" in attrs:
    return [tensor_array(attrs["value"], f"node {node.name!r} (Constant) attribute 'value'")]
  for name, dtype in (
    ("value_float", np.float32),
    ("value_floats", np.float32),
    ("value_int", np.int64),
    ("value_ints", np.int64),
  ):
    if name in attrs:
      return [np.asarray(attrs[name], dtype)]
  raise node.error(f"only numeric dense constants are supported (attributes given: {sorted(attrs)})")


_FLOAT8 = tuple(
  np.dtype(t)
  for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz)
)
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)


def _is_float(dtype: np.dtype) -> bool:
  return dtypes.is_float(dtype) or dtype in _FLOAT8 or dtype == _E8M0


_SMALL_INTS = tuple(np.dtype(t) for t in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2))


def _is_int(dtype: np.dtype) -> bool:
  return dtypes.is_integer(dtype) or dtype in _SMALL_INTS


def cast(x: Any, to: np.dtype, *, saturate: bool = True, round_mode: str = "up") -> Any:
  """ONNX Cast of ``x`` (NumPy or JAX) to ``to``, the same values whichever ``x`` is.

  Float to float8 with ``saturate`` clips to the type's finite range first (ONNX, opset 19); float to
  integer saturates at the type's range with NaN as 0 (XLA's conversion, which ONNX leaves undefined),
  and to a 4- or 2-bit integer goes through int32 and wraps (as ONNX's reference does);
  float to FLOAT8E8M0 rounds as ``round_mode`` says (ONNX, opset 24); everything else is the plain
  conversion, which NumPy and XLA compute alike.
  """
  xp: Any = np if isinstance(x, np.ndarray) else jnp
  source = np.dtype(x.dtype)
  target = to if xp is np else jax_dtype(to)
  if source == target:
    return x
  if xp is np:
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow to inf is the conversion's result, not a fault
      return _convert(np, x, source, to, saturate, round_mode)
  return _convert(jnp, x, source, target, saturate, round_mode)


def _convert(xp: Any, x: Any, source: np.dtype, to: np.dtype, saturate: bool, round_mode: str) -> Any:
  """The conversion, in NumPy or in JAX (``to`` as JAX computes it there)."""
  if to == np.dtype(bool) and _is_float(source):
    # XLA on CPU flushes a subnormal to zero when it runs (False) but not when it folds a constant (True): a
    # subnormal is False everywhere, NumPy included.
    tiny = np.array(ml_dtypes.finfo(source).smallest_normal, source)
    return xp.isnan(x) | (xp.abs(x) >= tiny)
  if to == _E8M0 and _is_float(source):
    return _to_e8m0(xp, x, saturate, round_mode)
  if to in _FLOAT8 and saturate and source != np.dtype(bool):
    finite = ml_dtypes.finfo(to)
    if _is_int(source):
      x = x.astype(np.float32)  # an integer beyond float32's exact range is beyond every float8's range too
    x = xp.clip(x, np.array(float(finite.min), x.dtype), np.array(float(finite.max), x.dtype))
  elif _is_int(to) and _is_float(source):
    if to in _SMALL_INTS:
      return _to_small_int(xp, x, to)
    elif xp is np:
      x = _saturated_to_int(x, to)
  return x.astype(to)


def _ml_dtypes_zeroes_out_of_range() -> bool:
  """Whether the installed ml_dtypes converts a float outside a 4- or 2-bit integer's range to 0.

  ONNX leaves such a conversion undefined, and its reference (and its backend tests' expected outputs) take
  ml_dtypes' own: from ml_dtypes 0.7 a value whose truncation is out of range becomes 0; before, the value
  went through int32 and wrapped. Probed once, so that the backend agrees with ONNX's reference on every
  ml_dtypes release.
  """
  with np.errstate(over="ignore", invalid="ignore"):
    return bool(np.array([8.0], np.float32).astype(ml_dtypes.int4)[0] == 0)


_ZERO_OUT_OF_RANGE = _ml_dtypes_zeroes_out_of_range()


def _to_small_int(xp: Any, x: Any, to: np.dtype) -> Any:
  """A float cast to a 4- or 2-bit integer, as the installed ml_dtypes converts it (NumPy and JAX alike).

  The value is truncated; from ml_dtypes 0.7 one outside the type's range becomes 0, before it wraps (as
  int32 does, with a value outside int32's range becoming 0). NaN becomes 0 either way.
  """
  # float64 stays float64; every narrower float is exact in float32, as are the bounds below:
  t = xp.trunc(x if x.dtype == np.float64 else x.astype(np.float32))
  if _ZERO_OUT_OF_RANGE:
    info = ml_dtypes.iinfo(to)
    inside = (t >= float(int(info.min))) & (t <= float(int(info.max)))  # False for NaN
  else:
    inside = (t >= -(2.0**31)) & (t < 2.0**31)  # the values int32 holds
  wide = xp.where(inside, t, xp.zeros_like(t)).astype(np.int32)
  return wide.astype(to if xp is np else jax_dtype(to))


def _saturated_to_int(x: np.ndarray, to: np.dtype) -> np.ndarray:
  """NumPy's float-to-integer conversion made XLA's: truncate, saturate at the type's range, NaN as 0."""
  info = np.iinfo(to)
  t = np.trunc(x.astype(np.float64))  # float64 holds every value of the narrower floats exactly
  # The type's bounds as float64 may round (2**63 - 1 rounds up): compare with the powers of two beyond them.
  above, below = t >= float(int(info.max) + 1), t < float(int(info.min))
  safe = np.where(above | below | np.isnan(t), 0.0, t)
  wide = np.dtype(np.uint64) if int(info.min) == 0 else np.dtype(np.int64)
  out = safe.astype(wide)
  out = np.where(above, np.array(int(info.max), wide), np.where(below, np.array(int(info.min), wide), out))
  return out


def _to_e8m0(xp: Any, x: Any, saturate: bool, round_mode: str) -> Any:
  """ONNX's float-to-FLOAT8E8M0 conversion (a power of two: the float32 exponent, rounded as ``round_mode``)."""
  bits = (
    x.astype(np.float32).view(np.uint32) if xp is np else lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
  )
  exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
  special = exponent == 0xFF
  fraction = bits & 0x7FFFFF
  if round_mode == "nearest":
    guard = (bits & 0x400000) > 0
    round_up = guard & (((bits & 0x200000) > 0) | ((bits & 0x1FFFFF) > 0) | (exponent > 0))
  elif round_mode == "up":
    round_up = fraction > 0
  else:  # "down"
    round_up = xp.zeros_like(special)
  round_up = round_up & ~special
  if saturate:
    round_up = round_up & (exponent != 0xFE)
  exponent = xp.where(special, np.uint16(0xFF), exponent + round_up.astype(np.uint16))
  exponent = xp.where(exponent > 0xFF, np.uint16(0xFF), exponent).astype(np.uint8)
  if xp is np:
    return exponent.view(_E8M0)
  return lax.bitcast_convert_type(exponent, jnp.float8_e8m0fnu)


def _cast_options(node: Node) -> tuple[bool, str]:
  saturate = node.attr("saturate", 1)
  round_mode = node.attr("round_mode", b"up")
  round_mode = round_mode.decode() if isinstance(round_mode, bytes) else str(round_mode)
  if saturate not in (0, 1):
    raise node.error(f"saturate must be 0 or 1; got saturate={saturate}")
  if round_mode not in ("up", "down", "nearest"):
    raise node.error(f"round_mode must be 'up', 'down' or 'nearest'; got round_mode={round_mode!r}")
  return bool(saturate), round_mode


def _cast(node: Node, args: list[Any]) -> list[Any]:
  to = element_dtype(node.attrs["to"], f"node {node.name!r} ({node.op_type}) attribute 'to'")
  saturate, round_mode = _cast_options(node)
  return [cast(args[0], to, saturate=saturate, round_mode=round_mode)]


def _cast_like(node: Node, args: list[Any]) -> list[Any]:
  saturate, round_mode = _cast_options(node)
  return [cast(args[0], np.dtype(args[1].dtype), saturate=saturate, round_mode=round_mode)]


def _xp(*args: Any) -> Any:
  return np if all(isinstance(a, np.ndarray) for a in args) else jnp


def _reshape(node: Node, args: list[Any]) -> list[Any]:
  x, target = args[0], args[1]
  p = Problems("onnx.Reshape")
  values = axes_lib.from_tensor(p, "shape", target, scalar=False)
  p.raise_if_any()
  parsed = [
    axes_lib.static_int(p, f"shape[{i}]", v, "shape must hold integers >= -1", lambda s: s >= -1)
    for i, v in enumerate(values)
  ]
  p.raise_if_any()
  shape = [s for s in parsed if s is not None]
  allow_zero = bool(node.attr("allowzero", 0))
  given = f"shape={tuple(shape)}"
  p.require(shape.count(-1) <= 1, "shape may hold -1 once", given)
  p.require(not (allow_zero and -1 in shape and 0 in shape), "shape may not hold both -1 and 0 with allowzero=1", given)
  p.require(
    allow_zero or all(i < x.ndim for i, s in enumerate(shape) if s == 0),
    f"a 0 in shape copies the input's dimension there, which x of rank {x.ndim} lacks",
    given,
  )
  p.raise_if_any()
  resolved = [x.shape[i] if s == 0 and not allow_zero else s for i, s in enumerate(shape)]
  known = math.prod(s for s in resolved if s != -1)
  size = math.prod(x.shape)
  fits = (known > 0 and size % known == 0) if -1 in resolved else known == size
  p.require(fits, f"shape must keep the input's {size} elements (x.shape={tuple(x.shape)})", given)
  p.raise_if_any()
  return [_xp(x).reshape(x, resolved)]


def _axes_input(node: Node, args: list[Any]) -> Any:
  if "axes" in node.attrs:
    return node.attrs["axes"]
  return args[1] if len(args) > 1 else None


def _squeeze(node: Node, args: list[Any]) -> list[Any]:
  x = args[0]
  p = Problems(f"onnx.{node.op_type}")
  if isinstance(args[1] if len(args) > 1 else None, (np.ndarray, np.generic, jax.Array)):
    require_vector(node, 1, np.ndim(args[1]))
  given = axes_lib.from_tensor(p, "axes", _axes_input(node, args), scalar=False)
  p.raise_if_any()
  if given is None or len(given) == 0:
    axes: tuple[int, ...] | None = tuple(i for i, s in enumerate(x.shape) if s == 1)
  else:
    axes = axes_lib.canonical_axes(p, "axes", given, x.ndim, allow_negative=True, allow_empty=True)
    if axes is not None:
      p.require(
        all(x.shape[a] == 1 for a in axes), "axes must name dimensions of size 1", f"axes={given}, x.shape={x.shape}"
      )
  p.raise_if_any()
  return [_xp(x).squeeze(x, axis=axes)]


def _unsqueeze(node: Node, args: list[Any]) -> list[Any]:
  x = args[0]
  p = Problems(f"onnx.{node.op_type}")
  given = axes_lib.from_tensor(p, "axes", _axes_input(node, args), scalar=False)
  p.raise_if_any()
  count = len(given) if isinstance(given, (tuple, list)) else 0
  axes = axes_lib.canonical_axes(p, "axes", given, x.ndim + count, allow_negative=True, allow_empty=False)
  p.raise_if_any()
  assert axes is not None
  return [_xp(x).expand_dims(x, axes)]


def _identity(node: Node, args: list[Any]) -> list[Any]:
  del node
  return [args[0]]


def _unary(function: Callable[[Any], Any]) -> Callable[[Node, list[Any]], list[Any]]:
  def convert(node: Node, args: list[Any]) -> list[Any]:
    del node
    return [function(args[0])]

  return convert


def _binary(function: Callable[[Any, Any], Any]) -> Callable[[Node, list[Any]], list[Any]]:
  """ONNX's multidirectional broadcasting made explicit (no implicit rank promotion), then ``lax``."""

  def convert(node: Node, args: list[Any]) -> list[Any]:
    a, b = args
    if a.dtype != b.dtype:
      raise node.error(f"inputs must have one type (got {np.dtype(a.dtype).name} and {np.dtype(b.dtype).name})")
    try:
      shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError as e:
      raise node.error(f"the inputs' shapes {a.shape} and {b.shape} do not broadcast (ONNX's rule)") from e
    return [function(jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape))]

  return convert


HANDLERS: dict[str, Callable[[Node, list[Any]], list[Any]]] = {
  "TopK": _top_k,
  "ArgMax": _arg(True),
  "ArgMin": _arg(False),
  "GatherND": _gather_nd,
  "Gather": _gather,
  "OneHot": _one_hot,
  **{name: _reduce for name in ops.REDUCE_FUNCTIONS},
  "Constant": _constant,
  "Identity": _identity,
  "Cast": _cast,
  "CastLike": _cast_like,
  "Reshape": _reshape,
  "Squeeze": _squeeze,
  "Unsqueeze": _unsqueeze,
  "Abs": _unary(jnp.abs),
  "Neg": _unary(jnp.negative),
  "Exp": _unary(jnp.exp),
  "Log": _unary(jnp.log),
  "Sqrt": _unary(jnp.sqrt),
  "Add": _binary(lax.add),
  "Sub": _binary(lax.sub),
  "Mul": _binary(lax.mul),
  "Div": _binary(lax.div),
}

SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(HANDLERS))

# Inputs that set a shape, by op type: input position -> what the input is.
STATIC_SLOTS: dict[str, dict[int, str]] = {
  "TopK": {1: "K"},
  "OneHot": {1: "depth"},
  "Reshape": {1: "shape"},
  "Squeeze": {1: "axes"},
  "Unsqueeze": {1: "axes"},
  **{name: {1: "axes"} for name in ops.REDUCE_FUNCTIONS},
}
# Glue evaluated with NumPy where its inputs are known when tracing, so that a shape-setting value stays known.
FOLDABLE = frozenset({"Constant", "Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze"})


# Inputs ONNX takes as 1-D tensors only, by op type: input position -> what the input is. (Unsqueeze's axes are not
# here: ONNX Runtime takes a scalar there.)
VECTOR_INPUTS: dict[str, dict[int, str]] = {
  "Squeeze": {1: "axes"},
  **{name: {1: "axes"} for name in ops.REDUCE_FUNCTIONS},
}


def require_vector(node: Node, position: int, rank: int | None) -> None:
  """ONNX's rule that a Reduce* or Squeeze node's ``axes`` input is a 1-D tensor (``rank``: its rank, ``None``
  where unknown)."""
  what = VECTOR_INPUTS.get(node.op_type, {}).get(position)
  if what is None or rank is None or rank == 1:
    return
  raise node.error(
    f"onnx.{node.op_type}: {what} must be a 1-D tensor (ONNX's rule: the input is a list of axes; ONNX Runtime "
    f'refuses other ranks: "An axes tensor must be a vector tensor"); got input {position} ({what}) of rank {rank}: '
    "give the axes as a vector, e.g. [1] for axis 1"
  )


def check_static_input(node: Node, position: int, value: np.ndarray) -> None:
  """The rules on a shape-setting input that hold whatever the shapes: ``K >= 1``, ``depth >= 1``, integer axes,
  shape entries >= -1 (the rest, ``K <=`` the axis's size and so on, need the shapes and run when tracing)."""
  what = STATIC_SLOTS[node.op_type][position]
  p = Problems(f"onnx.{node.op_type}")
  if what in ("K", "depth"):
    given = ops.one_hot_depth(p, value) if what == "depth" else axes_lib.from_tensor(p, what, value, scalar=True)
    if not p:
      axes_lib.static_int(p, what, given, f"{what} must be an integer >= 1", lambda v: v >= 1)
  else:
    entries = axes_lib.from_tensor(p, what, value, scalar=False)
    rule, lowest = ("shape must hold integers >= -1", -1) if what == "shape" else ("axes must hold integers", None)
    for i, entry in enumerate(entries if not p else ()):
      axes_lib.static_int(p, f"{what}[{i}]", entry, rule, lambda v: lowest is None or v >= lowest)
  try:
    p.raise_if_any()
  except DescriptorError as e:
    raise node.error(str(e)) from e
  require_vector(node, position, np.ndim(value))


# ---- 64-bit integers without x64 ---------------------------------------------------------------------------

# What an int64 (uint64) value computed in int32 (uint32) stays exact through: every op that moves, selects or
# compares values. These ops compute new ones, which can leave 32 bits.
_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Neg", "Abs"})
_SUMMING = frozenset({"ReduceSum", "ReduceProd", "ReduceSumSquare", "ReduceL1"})
# Source types whose every value a 32-bit int (uint) holds: a cast from them to int64 (uint64) stays exact.
_FITS_INT32 = frozenset(np.dtype(t) for t in ("bool", "int8", "int16", "int32", "uint8", "uint16", "int64"))
_FITS_UINT32 = frozenset(np.dtype(t) for t in ("bool", "uint8", "uint16", "uint32", "uint64"))
_FITS_INT32 |= {
  np.dtype(ml_dtypes.int4),
  np.dtype(ml_dtypes.uint4),
  np.dtype(ml_dtypes.int2),
  np.dtype(ml_dtypes.uint2),
}
_FITS_UINT32 |= {np.dtype(ml_dtypes.uint4), np.dtype(ml_dtypes.uint2)}


def inexact_in_32_bits(node: Node, inputs: list[np.dtype | None], outputs: list[np.dtype | None]) -> str | None:
  """Why ``node`` could give a wrong int64/uint64 result computed in 32 bits (x64 off), or ``None``."""
  op = node.op_type
  first = inputs[0] if inputs else None
  out = outputs[0] if outputs else None
  if first is None or out is None:  # (np.dtype(None) is float64: never compare a dtype with None)
    return None
  if op in _ARITHMETIC and out in WIDE_INTEGERS:
    return f"{op} of {out.name} values can leave 32 bits"
  if op in _SUMMING and first in WIDE_INTEGERS:
    return f"{op} of {first.name} values can leave 32 bits"
  if op in ("Cast", "CastLike"):
    if out == np.dtype(np.int64) and first not in _FITS_INT32:
      return f"a cast from {first.name} to int64 can give values beyond int32"
    if out == np.dtype(np.uint64) and first not in _FITS_UINT32:
      return f"a cast from {first.name} to uint64 can give values beyond uint32"
  return None
