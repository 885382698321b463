"""An ``onnx.backend.base.Backend`` that turns an ONNX graph into one jitted JAX function.

The graph's TopK, ArgMax/ArgMin, GatherND, Reduce* and OneHot nodes run through :mod:`dmljax.onnx`'s
functions (the dmljax operators themselves); Gather runs as GatherND; the rest of the glue such graphs
contain (Constant, Identity, Cast, CastLike, Reshape, Squeeze, Unsqueeze, and the elementwise Abs, Neg, Exp,
Log, Sqrt, Add, Sub, Mul, Div) is plain ``jax.numpy``/``lax``. Nothing else is traced, so the jitted
function is the same XLA program as the dmljax calls written by hand.

Inputs that set a shape in JAX (TopK's ``K``, the reductions' ``axes``, OneHot's ``depth``, the shapes
and axes of Reshape/Squeeze/Unsqueeze) must be known when the function is traced: an initializer, a
Constant node (possibly through Identity/Cast/Reshape/Squeeze/Unsqueeze), or a graph input given as a
concrete value, on which the function is specialised. Anything computed at run time in those positions
is refused at :meth:`Backend.prepare` with a :class:`ModelError` naming the node, the input and why.

64-bit types: with ``jax_enable_x64`` on, every ONNX type is computed as declared. With it off, int64
and uint64 tensors are computed as int32/uint32: :meth:`BackendRep.run` checks that every integer it
passes in fits (else a :class:`ModelError` names the input) and returns each output in the type the
graph declares (an int64 index output comes back as int64). float64 tensors are refused without x64,
as dmljax refuses them everywhere, rather than computed in float32 silently.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnx.backend.base
from jax import lax
from onnx import helper, numpy_helper

from dmljax._src import dtypes
from dmljax._src.errors import DescriptorError
from dmljax._src.onnx import ops


class ModelError(ValueError):
  """An ONNX model, node or input that :mod:`dmljax.onnx`'s backend cannot run.

  The message names the node (its name, or its position when unnamed), its op type and, where one input
  is the cause, that input and why.

  Attributes:
    node: the node's name (``None`` when the problem is a graph input).
    op_type: the node's op type (``None`` likewise).

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

  def __init__(self, message: str, *, node: str | None = None, op_type: str | None = None):
    self.node = node
    self.op_type = op_type
    super().__init__(message)


@dataclasses.dataclass(frozen=True)
class _Node:
  name: str
  op_type: str
  inputs: tuple[str, ...]
  outputs: tuple[str, ...]
  attrs: Mapping[str, Any]
  opset: int

  def error(self, message: str) -> ModelError:
    return ModelError(f"node {self.name!r} ({self.op_type}): {message}", node=self.name, op_type=self.op_type)

  def attr(self, name: str, default: Any) -> Any:
    return self.attrs.get(name, default)


# Inputs that set a shape, by op type: input position -> what the input is.
_SHAPE_SETTING = "it sets the output's shape, which JAX fixes when it traces the function"
_STATIC_SLOTS: dict[str, dict[int, str]] = {
  "TopK": {1: "K"},
  "OneHot": {1: "depth"},
  "Reshape": {1: "shape"},
  "Squeeze": {1: "axes"},
  "Unsqueeze": {1: "axes"},
  **{name: {1: "axes"} for name in ops.REDUCE_FUNCTIONS},
}
# Glue evaluated with NumPy when all its inputs are known, so that a Constant stays known through it.
_FOLDABLE = frozenset({"Constant", "Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze"})
_ONNX_DOMAINS = ("", "ai.onnx")


class _Static:
  """A concrete array as a hashable static argument of ``jax.jit`` (equal by dtype, shape and bytes)."""

  def __init__(self, value: np.ndarray):
    self.value = value
    self._key = (value.dtype.str, value.shape, value.tobytes())

  def __hash__(self) -> int:
    return hash(self._key)

  def __eq__(self, other: object) -> bool:
    return isinstance(other, _Static) and self._key == other._key


def _jax_dtype(dtype: np.dtype, node: _Node) -> np.dtype:
  """``dtype`` as JAX computes it: 64-bit integers narrow to 32 bits without x64, floats never do."""
  if not dtypes.x64_enabled() and dtype in (np.dtype(np.float64), np.dtype(np.complex128)):
    raise node.error(f"{dtype.name} needs jax.config.update('jax_enable_x64', True)")
  return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _as_jax(value: Any, what: str, node: _Node) -> Any:
  """A data input as a JAX value: constants go in with 64-bit integers checked to fit 32 bits without x64."""
  if not isinstance(value, np.ndarray):
    return value
  return jnp.asarray(_narrowed(value, what, lambda message: node.error(message)))


def _narrowed(value: np.ndarray, what: str, error: Callable[[str], ModelError]) -> np.ndarray:
  if dtypes.x64_enabled():
    return value
  if value.dtype in (np.dtype(np.float64), np.dtype(np.complex128)):
    raise error(f"{what} is {value.dtype.name}, which needs jax.config.update('jax_enable_x64', True)")
  if value.dtype in (np.dtype(np.int64), np.dtype(np.uint64)):
    narrow = np.dtype(np.int32) if value.dtype == np.int64 else np.dtype(np.uint32)
    info = np.iinfo(narrow)
    if value.size and (value.min() < info.min or value.max() > info.max):
      raise error(
        f"{what} is {value.dtype.name} with values outside {narrow.name} ([{value.min()}, {value.max()}]); "
        "without jax_enable_x64 they are computed as "
        f"{narrow.name}: enable it with jax.config.update('jax_enable_x64', True)"
      )
    return value.astype(narrow)
  return value


# ---- the operators -------------------------------------------------------------------------------------


def _top_k(node: _Node, args: list[Any]) -> list[Any]:
  k = node.attrs["k"] if "k" in node.attrs else args[1]
  values, indices = ops.top_k(
    args[0], k, axis=node.attr("axis", -1), largest=bool(node.attr("largest", 1)), sorted=bool(node.attr("sorted", 1))
  )
  return [values, indices]


def _arg(find_max: bool) -> Callable[[_Node, list[Any]], list[Any]]:
  def convert(node: _Node, args: list[Any]) -> list[Any]:
    function = ops.argmax if find_max else ops.argmin
    out = function(
      args[0],
      axis=node.attr("axis", 0),
      keepdims=bool(node.attr("keepdims", 1)),
      select_last_index=bool(node.attr("select_last_index", 0)),
    )
    return [out]

  return convert


def _gather_nd(node: _Node, args: list[Any]) -> list[Any]:
  return [ops.gather_nd(args[0], args[1], batch_dims=node.attr("batch_dims", 0))]


def _gather(node: _Node, args: list[Any]) -> list[Any]:
  """ONNX Gather along ``axis`` as dmljax's GATHER_ND of one-element index tuples (same index policy)."""
  data, indices = args[0], args[1]
  rank, count = data.ndim, indices.ndim
  axis = node.attr("axis", 0)
  if not -rank <= axis < rank:
    raise node.error(f"axis must be in [{-rank}, {rank - 1}]; got axis={axis}")
  axis %= rank
  out = ops.gather_nd(jnp.moveaxis(data, axis, 0), jnp.expand_dims(indices, -1), batch_dims=0)
  # out: indices' dims, then data's dims but axis; ONNX puts indices' dims where axis was.
  order = [*range(count, count + axis), *range(count), *range(count + axis, count + rank - 1)]
  return [jnp.transpose(out, order) if order != sorted(order) else out]


def _reduce(node: _Node, args: list[Any]) -> list[Any]:
  axes = node.attrs["axes"] if "axes" in node.attrs else (args[1] if len(args) > 1 else None)
  out = ops.reduce(
    node.op_type,
    args[0],
    axes,
    keepdims=bool(node.attr("keepdims", 1)),
    noop_with_empty_axes=bool(node.attr("noop_with_empty_axes", 0)),
  )
  return [out]


def _one_hot(node: _Node, args: list[Any]) -> list[Any]:
  indices, depth, values = args[0], args[1], args[2]
  count = ops.static_int(depth, "depth", "onnx.OneHot")
  if not dtypes.is_integer(indices.dtype):
    indices = indices.astype(ops.index_dtype())  # ONNX casts non-integer indices to int64 (truncation).
  if node.opset < 11 and dtypes.is_signed_integer(indices.dtype):
    # Before opset 11 a negative index is out of range; send it below -depth, where dmljax leaves it off.
    indices = indices.astype(ops.index_dtype())
    indices = jnp.where(indices < 0, np.array(-count - 1, indices.dtype), indices)
  return [ops.one_hot(indices, count, values, axis=node.attr("axis", -1))]


# ---- the glue ------------------------------------------------------------------------------------------


def _constant(node: _Node, args: list[Any]) -> list[Any]:
  del args
  attrs = node.attrs
  if "value" in attrs:
    return [numpy_helper.to_array(attrs["value"])]
  for name, dtype in (
    ("value_float", np.float32),
    ("value_floats", np.float32),
    ("value_int", np.int64),
    ("value_ints", np.int64),
  ):
    if name in attrs:
      return [np.asarray(attrs[name], dtype)]
  raise node.error(f"only numeric constants are supported (attributes given: {sorted(attrs)})")


def _to_dtype(node: _Node, elem_type: int) -> np.dtype:
  try:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
  except (KeyError, TypeError, ValueError) as e:
    raise node.error(f"ONNX element type {elem_type} has no NumPy dtype") from e


def _cast_to(node: _Node, x: Any, dtype: np.dtype) -> Any:
  if isinstance(x, np.ndarray):
    return x.astype(dtype)
  return x.astype(_jax_dtype(dtype, node))


def _cast(node: _Node, args: list[Any]) -> list[Any]:
  return [_cast_to(node, args[0], _to_dtype(node, node.attrs["to"]))]


def _cast_like(node: _Node, args: list[Any]) -> list[Any]:
  return [_cast_to(node, args[0], np.dtype(args[1].dtype))]


def _xp(*args: Any) -> Any:
  return np if all(isinstance(a, np.ndarray) for a in args) else jnp


def _reshape(node: _Node, args: list[Any]) -> list[Any]:
  x, shape = args[0], [int(s) for s in np.asarray(args[1]).reshape(-1)]
  if not node.attr("allowzero", 0):
    shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
  return [_xp(x).reshape(x, shape)]


def _axes_of(node: _Node, args: list[Any]) -> tuple[int, ...] | None:
  if "axes" in node.attrs:
    return tuple(node.attrs["axes"])
  if len(args) > 1 and args[1] is not None:
    return tuple(int(a) for a in np.asarray(args[1]).reshape(-1))
  return None


def _squeeze(node: _Node, args: list[Any]) -> list[Any]:
  x = args[0]
  axes = _axes_of(node, args)
  if axes is None:
    axes = tuple(i for i, s in enumerate(x.shape) if s == 1)
  return [_xp(x).squeeze(x, axis=tuple(a % x.ndim for a in axes))]


def _unsqueeze(node: _Node, args: list[Any]) -> list[Any]:
  x = args[0]
  axes = _axes_of(node, args) or ()
  rank = x.ndim + len(axes)
  return [_xp(x).expand_dims(x, tuple(sorted(a % rank for a in axes)))]


def _identity(node: _Node, args: list[Any]) -> list[Any]:
  del node
  return [args[0]]


def _unary(function: Callable[[Any], Any]) -> Callable[[_Node, list[Any]], list[Any]]:
  def convert(node: _Node, args: list[Any]) -> list[Any]:
    del node
    return [function(args[0])]

  return convert


def _binary(function: Callable[[Any, Any], Any]) -> Callable[[_Node, list[Any]], list[Any]]:
  """ONNX's multidirectional broadcasting made explicit (no implicit rank promotion), then ``lax``."""

  def convert(node: _Node, args: list[Any]) -> list[Any]:
    a, b = args
    if a.dtype != b.dtype:
      raise node.error(f"inputs must have one type (got {np.dtype(a.dtype).name} and {np.dtype(b.dtype).name})")
    shape = np.broadcast_shapes(a.shape, b.shape)
    return [function(jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape))]

  return convert


_HANDLERS: dict[str, Callable[[_Node, list[Any]], list[Any]]] = {
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

SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(_HANDLERS))


# ---- the graph -----------------------------------------------------------------------------------------


def _opset(model: onnx.ModelProto) -> int:
  for entry in model.opset_import:
    if entry.domain in _ONNX_DOMAINS:
      return int(entry.version)
  return int(onnx.defs.onnx_opset_version())


def _declared_dtype(value_info: onnx.ValueInfoProto) -> np.dtype | None:
  elem_type = value_info.type.tensor_type.elem_type
  if not value_info.type.HasField("tensor_type") or elem_type == onnx.TensorProto.UNDEFINED:
    return None
  try:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
  except (KeyError, TypeError, ValueError):
    return None


class BackendRep(onnx.backend.base.BackendRep):
  """A prepared ONNX graph: :meth:`run` on NumPy inputs, or :attr:`function` inside JAX code.

  Attributes:
    input_names: the graph inputs :meth:`run` and :attr:`function` take, in order (initializers are
      constants, not inputs).
    output_names: the graph outputs, in order.
    static_inputs: the inputs that set a shape (TopK's ``K``, ``axes``, ``depth``, ...): :attr:`function`
      needs them as concrete values and is compiled once per distinct value.
  """

  def __init__(self, graph: onnx.GraphProto, opset: int, device: str = "CPU"):
    self._device = onnx.backend.base.Device(device)
    self._constants: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    self.input_names: tuple[str, ...] = tuple(i.name for i in graph.input if i.name not in self._constants)
    self.output_names: tuple[str, ...] = tuple(o.name for o in graph.output)
    self._output_dtypes = tuple(_declared_dtype(o) for o in graph.output)
    self._nodes = tuple(self._read_node(i, n, opset) for i, n in enumerate(graph.node))
    self._static_consumers: dict[str, str] = {}
    self._check_graph()
    self.static_inputs: tuple[str, ...] = tuple(n for n in self.input_names if n in self._static_consumers)
    self._jitted = jax.jit(self._evaluate, static_argnums=0)
    # Without shape-setting inputs the graph function is a jax.jit object itself: no Python wrapper per call.
    self._plain = None if self.static_inputs else jax.jit(functools.partial(self._evaluate, ()))

  # -- preparation

  @staticmethod
  def _read_node(index: int, proto: onnx.NodeProto, opset: int) -> _Node:
    name = proto.name or f"#{index}"
    node = _Node(name, proto.op_type, tuple(proto.input), tuple(proto.output), {}, opset)
    if proto.domain not in _ONNX_DOMAINS or proto.op_type not in _HANDLERS:
      raise node.error(
        f"op type {proto.op_type} (domain {proto.domain or 'ai.onnx'!r}) is not supported by dmljax.onnx; "
        f"it runs {', '.join(SUPPORTED_OPS)}"
      )
    attrs = {}
    for attribute in proto.attribute:
      if attribute.ref_attr_name:
        raise node.error(f"attribute {attribute.name!r} refers to a function attribute, which is not supported")
      attrs[attribute.name] = helper.get_attribute_value(attribute)
    return dataclasses.replace(node, attrs=attrs)

  def _check_graph(self) -> None:
    """Every input that sets a shape must be known at trace time; unknown names are errors."""
    producers: dict[str, _Node] = {}
    available = set(self._constants) | set(self.input_names)
    for node in self._nodes:
      for position, name in enumerate(node.inputs):
        if name and name not in available:
          raise node.error(f"input {position} ({name!r}) is produced by no node, initializer or graph input")
      for position, what in _STATIC_SLOTS.get(node.op_type, {}).items():
        if position < len(node.inputs) and node.inputs[position]:
          self._require_static(node.inputs[position], node, position, what, producers)
      for name in node.outputs:
        producers[name] = node
        available.add(name)
    for name in self.output_names:
      if name not in available:
        raise ModelError(f"graph output {name!r} is produced by no node, initializer or graph input")

  def _require_static(self, name: str, node: _Node, position: int, what: str, producers: dict[str, _Node]) -> None:
    if name in self._constants:
      return
    if name in self.input_names:
      self._static_consumers.setdefault(name, f"node {node.name!r} ({node.op_type}) input {position} ({what})")
      return
    producer = producers[name]
    if producer.op_type in _FOLDABLE:
      for source in producer.inputs[:1] if producer.op_type != "Constant" else ():
        self._require_static(source, node, position, what, producers)
      return
    raise node.error(
      f"input {position} ({what}, {name!r}) must be known when the function is traced, because {_SHAPE_SETTING}; "
      f"it is computed at run time by node {producer.name!r} ({producer.op_type}). Give it as an initializer, "
      "a Constant node or a graph input"
    )

  # -- evaluation

  def _evaluate(self, statics: tuple[tuple[str, _Static], ...], *dynamic: Any) -> tuple[jax.Array, ...]:
    dynamic_names = [n for n in self.input_names if n not in self._static_consumers]
    if len(dynamic) != len(dynamic_names):
      raise ModelError(f"the graph function takes the inputs {dynamic_names} (in this order); got {len(dynamic)}")
    env: dict[str, Any] = dict(self._constants)
    env.update((name, static.value) for name, static in statics)
    env.update(zip(dynamic_names, dynamic, strict=True))
    for node in self._nodes:
      args = [env[name] if name else None for name in node.inputs]
      while args and args[-1] is None:
        args.pop()
      slots = _STATIC_SLOTS.get(node.op_type, {})
      if not (node.op_type in _FOLDABLE and all(isinstance(a, np.ndarray) for a in args if a is not None)):
        args = [
          a if i in slots or a is None else _as_jax(a, f"input {i} ({node.inputs[i]!r})", node)
          for i, a in enumerate(args)
        ]
      try:
        outputs = _HANDLERS[node.op_type](node, args)
      except ModelError:
        raise
      except (DescriptorError, ValueError, TypeError, IndexError, KeyError) as e:
        raise node.error(str(e)) from e
      env.update(zip(node.outputs, outputs, strict=False))  # A node may leave trailing outputs unnamed.
    out = []
    for name in self.output_names:
      value = env[name]
      out.append(_as_jax(value, f"output {name!r}", _Node("graph output", "-", (), (), {}, 0)))
    return tuple(out)

  def _split(self, inputs: Sequence[Any]) -> tuple[tuple[tuple[str, _Static], ...], Sequence[Any]]:
    if len(inputs) != len(self.input_names):
      raise ModelError(f"the graph takes {len(self.input_names)} inputs {list(self.input_names)}; got {len(inputs)}")
    if not self._static_consumers:  # The common case, kept to one check per call.
      return (), inputs
    statics, dynamic = [], []
    for name, value in zip(self.input_names, inputs, strict=True):
      if name in self._static_consumers:
        if isinstance(value, jax.core.Tracer):
          raise ModelError(
            f"graph input {name!r} feeds {self._static_consumers[name]}, which sets a shape: it must be a "
            "concrete value (a NumPy array or a Python number), not a traced one"
          )
        statics.append((name, _Static(np.asarray(value))))
      else:
        dynamic.append(value)
    return tuple(statics), dynamic

  @property
  def function(self) -> Callable[..., tuple[jax.Array, ...]]:
    """The graph as a jitted JAX function of its inputs (in :attr:`input_names` order) returning its outputs.

    Composes with ``jax.jit``, ``jax.grad``, ``jax.vmap`` and sharding like the dmljax operators it
    calls; the :attr:`static_inputs` must be concrete values. Without static inputs it is a ``jax.jit``
    object (``rep.function.lower(...)`` works); with them, a function that specialises one on their values.
    """
    return self._plain if self._plain is not None else self._call

  def _call(self, *inputs: Any) -> tuple[jax.Array, ...]:
    statics, dynamic = self._split(inputs)
    return self._jitted(statics, *dynamic)

  def lower(self, *inputs: Any) -> Any:
    """``jax.jit(...).lower`` of :attr:`function` on these inputs (for inspecting the XLA program)."""
    statics, dynamic = self._split(inputs)
    if self._plain is not None:
      return self._plain.lower(*dynamic)
    return self._jitted.lower(statics, *dynamic)

  def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
    """Runs the graph on NumPy inputs (a sequence in :attr:`input_names` order, or a name -> array map).

    Returns the outputs as NumPy arrays of the types the graph declares.
    """
    del kwargs
    if isinstance(inputs, Mapping):
      inputs = [inputs[name] for name in self.input_names]
    elif not isinstance(inputs, (list, tuple)):
      inputs = [inputs]
    if len(inputs) != len(self.input_names):
      raise ModelError(f"the graph takes {len(self.input_names)} inputs {list(self.input_names)}; got {len(inputs)}")
    prepared = []
    device = self._jax_device()
    for name, value in zip(self.input_names, inputs, strict=True):
      array = np.asarray(value)
      if name not in self._static_consumers:
        array = _narrowed(array, f"graph input {name!r}", lambda message: ModelError(message))
        prepared.append(jax.device_put(array, device))
      else:
        prepared.append(array)
    outputs = self.function(*prepared)
    result = []
    for value, declared in zip(outputs, self._output_dtypes, strict=True):
      array = np.asarray(value)
      if declared is not None and array.dtype != declared:
        array = array.astype(declared)
      result.append(array)
    return tuple(result)

  def _jax_device(self) -> jax.Device:
    platform = "cpu" if self._device.type == onnx.backend.base.DeviceType.CPU else "gpu"
    return jax.devices(platform)[self._device.device_id]


class Backend(onnx.backend.base.Backend):
  """dmljax as an ONNX backend (``onnx.backend.base.Backend``): ``prepare``, ``run_model``, ``run_node``.

  Example:
    >>> import numpy as np, dmljax.onnx as donnx
    >>> from onnx import TensorProto, helper
    >>> node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1)
    >>> graph = helper.make_graph(
    ...   [node], "top2", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
    ...   [helper.make_tensor_value_info("values", TensorProto.FLOAT, [2, 2]),
    ...    helper.make_tensor_value_info("indices", TensorProto.INT64, [2, 2])],
    ...   initializer=[helper.make_tensor("k", TensorProto.INT64, [1], [2])])
    >>> rep = donnx.Backend.prepare(helper.make_model(graph))
    >>> values, indices = rep.run([np.array([[1, 3, 3, 2], [4, 0, 1, 4]], np.float32)])
    >>> values.tolist(), indices.tolist(), indices.dtype.name
    ([[3.0, 3.0], [4.0, 4.0]], [[1, 2], [0, 3]], 'int64')
  """

  @classmethod
  def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> BackendRep:
    """Checks ``model`` (a ``ModelProto``, its serialized bytes or a path) and builds its :class:`BackendRep`."""
    if isinstance(model, (str, os.PathLike)):
      model = onnx.load(model)
    elif isinstance(model, bytes):
      model = onnx.load_from_string(model)
    super().prepare(model, device, **kwargs)
    return BackendRep(model.graph, _opset(model), device)

  @classmethod
  def is_compatible(cls, model: Any, device: str = "CPU", **kwargs: Any) -> bool:
    """Whether :meth:`prepare` accepts ``model``: every node supported, every shape-setting input static."""
    try:
      cls.prepare(model, device, **kwargs)
    except (ModelError, onnx.checker.ValidationError):
      return False
    return True

  @classmethod
  def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
    return cls.prepare(model, device, **kwargs).run(inputs)

  @classmethod
  def run_node(
    cls,
    node: onnx.NodeProto,
    inputs: Any,
    device: str = "CPU",
    outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
    **kwargs: Any,
  ) -> tuple[np.ndarray, ...]:
    """Runs one node on NumPy ``inputs`` (in the node's input order; every input is a graph input)."""
    super().run_node(node, inputs, device, outputs_info, **kwargs)
    names = [name for name in node.input if name]
    arrays = [np.asarray(a) for a in (inputs.values() if isinstance(inputs, Mapping) else inputs)]
    graph_inputs = [
      helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
      for n, a in zip(names, arrays, strict=True)
    ]
    opset = int(kwargs.get("opset_version", onnx.defs.onnx_opset_version()))
    graph = helper.make_graph(
      [node], "run_node", graph_inputs, [helper.make_empty_tensor_value_info(n) for n in node.output]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    for output in model.graph.output:
      if output.name in types and _declared_dtype(types[output.name]) is not None:
        output.CopyFrom(types[output.name])
    if outputs_info is not None:
      for output, (dtype, _) in zip(model.graph.output, outputs_info, strict=False):
        output.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return BackendRep(model.graph, opset, device).run(arrays)

  @classmethod
  def supports_device(cls, device: str) -> bool:
    """CPU always; CUDA when JAX has a GPU."""
    kind = onnx.backend.base.Device(device).type
    if kind == onnx.backend.base.DeviceType.CPU:
      return True
    try:
      return bool(jax.devices("gpu"))
    except RuntimeError:
      return False


prepare = Backend.prepare
run_model = Backend.run_model
run_node = Backend.run_node
supports_device = Backend.supports_device
