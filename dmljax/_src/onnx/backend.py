"""An ``onnx.backend.base.Backend`` that turns an ONNX graph into one jitted JAX function.

The graph's TopK, ArgMax/ArgMin, GatherND, Reduce* and OneHot nodes run through :mod:`dmljax.onnx`'s
functions (the dmljax operators themselves); Gather runs as GatherND; the rest of the glue such graphs
contain (Constant, Identity, Cast, CastLike, Reshape, Squeeze, Unsqueeze, and the elementwise Abs, Neg, Exp,
Log, Sqrt, Add, Sub, Mul, Div) is plain ``jax.numpy``/``lax``. Nothing else is traced, so the jitted
function is the same XLA program as the dmljax calls written by hand.

:meth:`Backend.prepare` reads the model as a stranger's file (see :mod:`dmljax._src.onnx.model`), then
checks what can be checked without data: every shape-setting input is known when tracing; every attribute
and static input is valid; every tensor's size is within the limit; without ``jax_enable_x64``, no tensor
is float64 and no int64 result could leave 32 bits. Where the declared shapes fix every dimension it traces
the whole graph abstractly (``jax.eval_shape``), which runs every rule of every operator; where a dimension
is symbolic, the rules that need its value run when :meth:`BackendRep.run` first sees it, still before
anything executes. :meth:`BackendRep.run` checks every feed against the graph's declaration.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
import onnx
import onnx.backend.base
from onnx import helper

from dmljax._src import dtypes
from dmljax._src.errors import DescriptorError
from dmljax._src.onnx import model as model_lib
from dmljax._src.onnx.nodes import (
  FOLDABLE,
  HANDLERS,
  STATIC_SLOTS,
  SUPPORTED_OPS,
  WIDE,
  ModelError,
  Node,
  check_static_input,
  element_dtype,
  inexact_in_32_bits,
  jax_dtype,
  narrowed,
  narrowed_constant,
  numpy_fix,
  require_vector,
  tensor_array,
  to_jax,
  type_name,
)

__all__ = ["DEFAULT_MAX_ELEMENTS", "SUPPORTED_OPS", "Backend", "BackendRep", "ModelError"]

DEFAULT_MAX_ELEMENTS = 2**31 - 1
"""The most elements :meth:`Backend.prepare` lets any tensor of a graph have (``max_elements=`` changes it)."""
MAX_RANK = 64
"""The most dimensions a tensor of a graph may have: NumPy's limit (``rep.run`` returns NumPy arrays, and NumPy 2
holds at most 64 dimensions), checked at :meth:`Backend.prepare` for every value whose rank is known then."""

_SHAPE_SETTING = "it sets the output's shape, which JAX fixes when it traces the function"
Shape = tuple[int | str | None, ...]


class _Static:
  """A concrete array as a hashable static argument of ``jax.jit`` (equal by dtype, shape and bytes)."""

  def __init__(self, value: np.ndarray):
    self.value = value
    self._key = (value.dtype.str, value.shape, value.tobytes())

  def __hash__(self) -> int:
    return hash(self._key)

  def __eq__(self, other: object) -> bool:
    return isinstance(other, _Static) and self._key == other._key


class _Input:
  """A graph input as declared: what :meth:`BackendRep.run` checks each feed against.

  Everything :meth:`check` compares with is computed once, here, so that a call costs a few comparisons.
  """

  def __init__(self, name: str, dtype: np.dtype, shape: Shape | None, default: np.ndarray | None):
    self.name = name
    self.dtype = dtype  # the declared element type
    self.compute = jax_dtype(dtype)  # the type JAX computes it in
    self.narrow = self.compute != dtype  # a 64-bit integer computed in 32 bits (x64 off)
    self.shape = shape  # ints, names of symbolic dimensions, None where unknown; None: rank unknown
    self.default = default  # an initializer of the same name: a default the caller may override (ONNX IR)
    known = shape is not None and all(isinstance(d, int) for d in shape)
    self.fixed = tuple(d for d in shape if isinstance(d, int)) if known and shape is not None else None
    self.symbols = tuple((i, d) for i, d in enumerate(shape or ()) if isinstance(d, str))
    self.declared = type_name(dtype, shape)

  def error(self, got: str, why: str) -> ModelError:
    return ModelError(f"graph input {self.name!r} is declared {self.declared}; got {got}: {why}", input_name=self.name)

  def check(self, value: Any, seen: dict[str, tuple[int, str]]) -> Any:
    """``value`` checked against the declaration, as the array the graph function takes; ``seen`` collects the
    symbolic dimensions' values across inputs."""
    if type(value) is not np.ndarray:
      value = self._as_array(value)
    if value.dtype != self.dtype and not (isinstance(value, jax.Array) and value.dtype == self.compute):
      raise self.error(
        type_name(np.dtype(value.dtype), value.shape),
        f"the element type differs; give it as {numpy_fix(self.dtype)}",
      )
    if value.shape != self.fixed:
      self.check_shape(value.shape, seen)
    if self.narrow and isinstance(value, np.ndarray):
      value = narrowed(value, lambda why: self.error(type_name(self.dtype, value.shape), why))
    return value

  def _as_array(self, value: Any) -> Any:
    if value is None:
      raise self.error("None", "give an array")
    if isinstance(value, (jax.Array, np.generic)):
      return value if isinstance(value, jax.Array) else np.asarray(value)
    try:
      array = np.asarray(value)
    except (TypeError, ValueError) as e:
      raise self.error(f"a {type(value).__name__}", f"NumPy cannot read it as an array ({e})") from e
    if array.dtype != self.dtype:
      raise self.error(
        f"a {type(value).__name__}, which NumPy reads as {type_name(array.dtype, array.shape)}",
        f"give it as {numpy_fix(self.dtype)}",
      )
    return array

  def check_shape(self, shape: tuple[int, ...], seen: dict[str, tuple[int, str]]) -> None:
    if self.shape is None:
      return
    got = type_name(self.dtype, shape)
    if len(shape) != len(self.shape):
      raise self.error(got, f"rank {len(shape)}, where the graph declares rank {len(self.shape)}")
    for axis, (size, declared) in enumerate(zip(shape, self.shape, strict=True)):
      if isinstance(declared, int) and size != declared:
        raise self.error(got, f"dimension {axis} is {size}, where the graph fixes it at {declared}")
    for axis, symbol in self.symbols:
      first = seen.setdefault(symbol, (shape[axis], self.name))
      if first[0] != shape[axis]:
        raise self.error(
          got, f"dimension {axis} ({symbol}) is {shape[axis]}, but graph input {first[1]!r} gave {symbol} = {first[0]}"
        )


def _shape_of(info: onnx.ValueInfoProto | onnx.TensorProto, where: str) -> Shape | None:
  if isinstance(info, onnx.TensorProto):
    return tuple(int(d) for d in info.dims)
  tensor = info.type.tensor_type
  if not tensor.HasField("shape"):
    return None
  shape: list[int | str | None] = []
  for dim in tensor.shape.dim:
    if dim.HasField("dim_value"):
      if dim.dim_value < 0:
        raise ModelError(f"{where} declares a negative dimension ({dim.dim_value})")
      shape.append(int(dim.dim_value))
    else:
      shape.append(dim.dim_param or None)
  return tuple(shape)


def _placement(device: str) -> jax.Device | None:
  """The JAX device ``device`` (ONNX's ``"CPU"``, ``"CUDA:1"``) names, where it is not JAX's default."""
  onnx_device = onnx.backend.base.Device(device)
  platform = "cpu" if onnx_device.type == onnx.backend.base.DeviceType.CPU else "gpu"
  try:
    chosen = jax.devices(platform)[onnx_device.device_id]
  except (RuntimeError, IndexError) as e:
    raise ModelError(f"device {device!r} is not available to JAX ({e})") from e
  return None if chosen == jax.devices()[0] else chosen


def _least_size(shape: Shape | None) -> int:
  """The fewest elements a tensor of ``shape`` can have (an unknown dimension counts as 1)."""
  return math.prod(d if isinstance(d, int) else 1 for d in shape or ())


class BackendRep(onnx.backend.base.BackendRep):
  """A prepared ONNX graph: :meth:`run` on NumPy inputs, or :attr:`function` inside JAX code.

  Attributes:
    input_names: the graph inputs :meth:`run` and :attr:`function` take, in order (those without an
      initializer).
    overridable_inputs: graph inputs that also have an initializer: their default, which :meth:`run` takes a
      value for by name (ONNX IR).
    output_names: the graph outputs, in order.
    static_inputs: the inputs that set a shape (TopK's ``K``, ``axes``, ``depth``, ...): :attr:`function`
      needs them as concrete values and is compiled once per distinct value.
    max_elements: the most elements a tensor of the graph may have (see :meth:`Backend.prepare`).
  """

  def __init__(self, model: onnx.ModelProto, device: str = "CPU", *, max_elements: int | None = DEFAULT_MAX_ELEMENTS):
    self._placement = _placement(device)
    self._x64 = dtypes.x64_enabled()
    self.max_elements = dtypes.MAX_ELEMENTS if max_elements is None else min(int(max_elements), dtypes.MAX_ELEMENTS)
    graph = model.graph
    opset = model_lib.opset(model)
    self._types = self._value_types(graph)
    self._constants: dict[str, np.ndarray] = {}
    for tensor in graph.initializer:
      self._constants[tensor.name] = self._initializer(tensor)
    self._inputs = {info.name: self._input(info) for info in graph.input}
    self.input_names: tuple[str, ...] = tuple(n for n, i in self._inputs.items() if i.default is None)
    self.overridable_inputs: tuple[str, ...] = tuple(n for n, i in self._inputs.items() if i.default is not None)
    for name in self.overridable_inputs:
      del self._constants[name]
    self.output_names: tuple[str, ...] = tuple(o.name for o in graph.output)
    declared = [element_dtype(o.type.tensor_type.elem_type, f"graph output {o.name!r}") for o in graph.output]
    self._output_casts = tuple((i, d) for i, d in enumerate(declared) if jax_dtype(d) != d)
    self._checks = tuple(self._inputs[n].check for n in self.input_names)
    nodes = [self._read_node(i, n, opset) for i, n in enumerate(graph.node)]
    self._static_consumers: dict[str, str] = {}
    self._producers = {name: node for node in nodes for name in node.outputs if name}
    self._fold = frozenset(self._analyse(nodes))
    self._nodes = tuple(self._fold_constants(nodes))
    if not self._x64:
      self._check_32_bits()
    self.static_inputs: tuple[str, ...] = tuple(n for n in self._inputs if n in self._static_consumers)
    self._dynamic_names = functools.cache(self._dynamic_names_uncached)
    self._jitted = jax.jit(self._evaluate, static_argnums=0)
    # Without shape-setting inputs the graph function is a jax.jit object itself: no Python wrapper per call.
    plain = not any(n in self._static_consumers for n in self.input_names)
    self._plain = jax.jit(functools.partial(self._evaluate, ((), ()))) if plain else None
    self._trace_at_prepare()

  # -- reading

  def _value_types(self, graph: onnx.GraphProto) -> dict[str, tuple[np.dtype, Shape | None]]:
    """Every value's type, as declared or as ONNX's shape inference found it."""
    types: dict[str, tuple[np.dtype, Shape | None]] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
      if info.type.WhichOneof("value") == "tensor_type" and info.type.tensor_type.elem_type:
        where = f"value {info.name!r}"
        types[info.name] = (element_dtype(info.type.tensor_type.elem_type, where), _shape_of(info, where))
    for tensor in graph.initializer:
      where = f"initializer {tensor.name!r}"
      types[tensor.name] = (element_dtype(tensor.data_type, where), _shape_of(tensor, where))
    return types

  def _initializer(self, tensor: onnx.TensorProto) -> np.ndarray:
    try:
      return tensor_array(tensor, f"initializer {tensor.name!r}")
    except ModelError:
      raise
    except Exception as e:
      raise ModelError(f"initializer {tensor.name!r} cannot be read: {type(e).__name__}: {e}") from e

  def _input(self, info: onnx.ValueInfoProto) -> _Input:
    where = f"graph input {info.name!r}"
    dtype = element_dtype(info.type.tensor_type.elem_type, where)
    shape = _shape_of(info, where)
    self._within_rank(None if shape is None else len(shape), f"{where} declares {len(shape or ())} dimensions")
    self._within_limit(_least_size(shape), f"{where} declares {type_name(dtype, shape)}")
    return _Input(info.name, dtype, shape, self._constants.get(info.name))

  @staticmethod
  def _read_node(index: int, proto: onnx.NodeProto, opset: int) -> Node:
    name = model_lib.node_name(proto, index)
    node = Node(name, proto.op_type, tuple(proto.input), tuple(proto.output), {}, opset, index)
    attrs = {}
    for attribute in proto.attribute:
      if attribute.ref_attr_name:
        raise node.error(f"attribute {attribute.name!r} refers to a function attribute, which is not supported")
      try:
        attrs[attribute.name] = helper.get_attribute_value(attribute)
      except Exception as e:
        raise node.error(f"attribute {attribute.name!r} cannot be read: {e}") from e
    return dataclasses.replace(node, attrs=attrs)

  @staticmethod
  def _within_rank(rank: int | None, what: str, node: Node | None = None) -> None:
    if rank is not None and rank > MAX_RANK:
      message = (
        f"{what}: rank {rank}, where a tensor may have at most {MAX_RANK} dimensions (NumPy's limit, so that "
        "rep.run can return it)"
      )
      raise node.error(message) if node is not None else ModelError(message)

  def _within_limit(self, count: int, what: str, node: Node | None = None) -> None:
    if count > self.max_elements:
      message = (
        f"{what}: {count} elements, more than the {self.max_elements} this backend was prepared to allow "
        "(Backend.prepare(model, max_elements=...) raises the limit)"
      )
      raise node.error(message) if node is not None else ModelError(message)

  # -- what is known when tracing

  def _analyse(self, nodes: list[Node]) -> set[int]:
    """Checks that every shape-setting input is known when tracing; returns the nodes folded to get them.

    A value is known from the graph inputs it is folded from (none for a constant); a value computed by a
    node that is not :data:`FOLDABLE` is not known, and the node is named if a shape-setting input needs it.
    """
    known: dict[str, frozenset[str] | Node] = {name: frozenset() for name in self._constants}
    known.update((name, frozenset({name})) for name in self._inputs)
    needed: list[str] = []
    for node in nodes:
      for position, what in STATIC_SLOTS.get(node.op_type, {}).items():
        if position >= len(node.inputs) or not node.inputs[position]:
          continue
        name = node.inputs[position]
        source = known.get(name)
        if source is None:
          raise node.error(f"input {position} ({what}, {name!r}) is produced by no node, initializer or graph input")
        if isinstance(source, Node):
          raise node.error(
            f"input {position} ({what}, {name!r}) must be known when the function is traced, because "
            f"{_SHAPE_SETTING}; it is computed at run time by node {source.name!r} ({source.op_type}). Give it as "
            "an initializer, a Constant node or a graph input"
          )
        for graph_input in source:
          self._static_consumers.setdefault(
            graph_input, f"node {node.name!r} ({node.op_type}) input {position} ({what})"
          )
        needed.append(name)
      sources = [known.get(name, node) for name in node.inputs if name]
      if node.op_type in FOLDABLE and not any(isinstance(s, Node) for s in sources):
        result: frozenset[str] | Node = frozenset().union(*sources)  # type: ignore[arg-type]
      else:
        result = node
      known.update((name, result) for name in node.outputs if name)
    fold: set[int] = set()
    while needed:  # back from the shape-setting inputs through the foldable nodes that compute them
      producer = self._producers.get(needed.pop())
      if producer is not None and producer.index not in fold:
        fold.add(producer.index)
        needed.extend(name for name in producer.inputs if name)
    fold.update(n.index for n in nodes if n.op_type == "Constant")
    return fold

  def _fold_constants(self, nodes: list[Node]) -> list[Node]:
    """Evaluates with NumPy the folded nodes whose inputs are all constants; returns the nodes left to trace."""
    left = []
    for node in nodes:
      inputs = [self._constants.get(name) for name in node.inputs if name]
      if node.index in self._fold and all(v is not None for v in inputs):
        for name, value in zip(node.outputs, self._call_handler(node, inputs), strict=False):
          self._within_limit(value.size, f"output {name!r} has shape {value.shape}", node)
          self._constants[name] = value
      else:
        left.append(node)
    return left

  def _check_32_bits(self) -> None:
    """Without x64: float64 data is refused, and so is any node whose int64 result 32 bits could get wrong.

    Values only folded into shape-setting inputs (NumPy computes them, in their own type) are exempt.
    """
    fix = "enable it with jax.config.update('jax_enable_x64', True) before prepare"
    data = {*self.output_names, *(n for n in self._inputs if n not in self._static_consumers)}
    for node in self._nodes:
      if node.index in self._fold:
        continue
      slots = STATIC_SLOTS.get(node.op_type, {})
      data.update(name for position, name in enumerate(node.inputs) if name and position not in slots)
      data.update(name for name in node.outputs if name)
      ins = [self._types.get(name, (None, None))[0] for name in node.inputs]
      outs = [self._types.get(name, (None, None))[0] for name in node.outputs]
      why = inexact_in_32_bits(node, ins, outs)
      if why is not None:
        raise node.error(f"{why}, which jax_enable_x64 off would compute in 32 bits: {fix}")
      for position, name in enumerate(node.inputs):
        if position not in slots and name in self._constants:
          narrowed_constant(self._constants[name], f"input {position} ({name!r})", node)
    for name in self.output_names:
      if name in self._constants:
        narrowed_constant(self._constants[name], f"graph output {name!r}", None)
    for name in sorted(data):
      dtype = self._types.get(name, (None, None))[0]
      if dtype is not None and dtype in WIDE:
        raise ModelError(
          f"value {name!r} is {dtype.name}, which dmljax computes only with jax_enable_x64 (never in 32 bits): {fix}",
          input_name=name if name in self._inputs else None,
        )

  def _trace_at_prepare(self) -> None:
    """Every rule that shapes fix, at prepare: the whole graph traced abstractly where the declared shapes are all
    numbers and no shape-setting input is still to come; else each tensor's least size against the limit."""
    for node in self._nodes:
      for position in STATIC_SLOTS.get(node.op_type, {}):
        name = node.inputs[position] if position < len(node.inputs) else ""
        value = self._constants.get(name)
        if value is not None:
          check_static_input(node, position, value)
        elif name:  # fed at run: its declared (or inferred) rank, where known
          shape = self._types.get(name, (None, None))[1]
          require_vector(node, position, None if shape is None else len(shape))
    for name, (dtype, shape) in self._types.items():
      producer = self._producers.get(name)
      where = "output" if producer else "value"
      self._within_rank(None if shape is None else len(shape), f"{where} {name!r}", producer)
      self._within_limit(_least_size(shape), f"{where} {name!r} has {type_name(dtype, shape)}", producer)
    specs = [self._inputs[n] for n in self._dynamic_names(((), ()))]
    if self._plain is None or any(s.fixed is None for s in specs):
      return
    structs = [jax.ShapeDtypeStruct(s.fixed, s.compute) for s in specs]
    try:
      jax.eval_shape(self._plain, *structs)  # (jax.jit keeps the trace: the first run of these shapes reuses it)
    except ModelError:
      raise
    except Exception as e:
      raise ModelError(f"the graph cannot be traced: {type(e).__name__}: {e}") from e

  # -- evaluation

  def _dynamic_names_uncached(self, key: tuple[Any, Any]) -> tuple[str, ...]:
    statics, overridden = key
    static = {name for name, _ in statics}
    names = [n for n in self.input_names if n not in static]
    return (*names, *(n for n in overridden if n not in static))

  def _call_handler(self, node: Node, args: list[Any]) -> list[Any]:
    while args and args[-1] is None:
      args.pop()
    try:
      return HANDLERS[node.op_type](node, args)
    except ModelError:
      raise
    except DescriptorError as e:
      raise node.error(str(e)) from e
    except Exception as e:  # anything the node's inputs make an operator raise is the model's problem
      raise node.error(f"{type(e).__name__}: {e}") from e

  def _evaluate(self, key: tuple[Any, Any], *dynamic: Any) -> tuple[jax.Array, ...]:
    if dtypes.x64_enabled() != self._x64:
      raise ModelError(
        f"the graph was prepared with jax_enable_x64 {'on' if self._x64 else 'off'} and now runs with it "
        f"{'on' if not self._x64 else 'off'}: prepare it again"
      )
    statics, overridden = key
    names = self._dynamic_names(key)
    if len(dynamic) != len(names):
      raise ModelError(f"the graph function takes the inputs {list(names)} (in this order); got {len(dynamic)}")
    env: dict[str, Any] = dict(self._constants)
    env.update((n, self._inputs[n].default) for n in self.overridable_inputs if n not in overridden)
    env.update((name, static.value) for name, static in statics)
    seen: dict[str, tuple[int, str]] = {}
    for name, value in zip(names, dynamic, strict=True):
      spec = self._inputs[name]
      if np.dtype(value.dtype) != spec.compute:
        raise spec.error(type_name(np.dtype(value.dtype), value.shape), f"JAX computes it as {spec.compute.name}")
      spec.check_shape(tuple(value.shape), seen)
      env[name] = value
    for node in self._nodes:
      args = [env[name] if name else None for name in node.inputs]
      if node.index not in self._fold:
        slots = STATIC_SLOTS.get(node.op_type, {})
        args = [
          a if i in slots or a is None else to_jax(a, f"input {i} ({node.inputs[i]!r})", node)
          for i, a in enumerate(args)
        ]
      outputs = self._call_handler(node, args)
      for name, value in zip(node.outputs, outputs, strict=False):  # a node may leave trailing outputs unnamed
        if name:
          self._within_rank(len(value.shape), f"output {name!r}", node)
          self._within_limit(math.prod(value.shape), f"output {name!r} has shape {tuple(value.shape)}", node)
          env[name] = value
    return tuple(to_jax(env[name], f"graph output {name!r}", None) for name in self.output_names)

  # -- calling

  def _invoke(self, values: Mapping[str, Any], *, checked: bool) -> tuple[jax.Array, ...]:
    """The graph function on named inputs: the required ones, and any overridden defaults (``checked``: by
    :meth:`run`; else the shape-setting ones are checked here, as they are not traced)."""
    statics = []
    for name in self.static_inputs:
      if name in values:
        value = values[name]
        if isinstance(value, jax.core.Tracer):
          raise ModelError(
            f"graph input {name!r} feeds {self._static_consumers[name]}, which sets a shape: it must be a "
            "concrete value (a NumPy array), not a traced one",
            input_name=name,
          )
        if not checked:
          value = self._inputs[name].check(value, {})
        statics.append((name, _Static(np.asarray(value))))
    overridden = tuple(n for n in self.overridable_inputs if n in values)
    key = (tuple(statics), overridden)
    dynamic = [values[n] for n in self._dynamic_names(key)]
    if self._plain is not None and key == ((), ()):
      return self._plain(*dynamic)
    return self._jitted(key, *dynamic)

  @property
  def function(self) -> Callable[..., tuple[jax.Array, ...]]:
    """The graph as a jitted JAX function of its inputs (in :attr:`input_names` order) returning its outputs.

    Composes with ``jax.jit``, ``jax.grad``, ``jax.vmap`` and sharding like the dmljax operators it
    calls; the :attr:`static_inputs` must be concrete values. Without static inputs it is a ``jax.jit``
    object (``rep.function.lower(...)`` works); with them, a function that specialises one on their values.
    Each new input type and shape is checked against the graph when it is traced.
    """
    if self._plain is None:
      return self._call
    if not any(self._inputs[n].narrow for n in self.input_names):
      return self._plain
    return _NarrowedFeeds(self._plain, self._narrowed_feeds)

  def _narrowed_feeds(self, inputs: Sequence[Any]) -> list[Any]:
    """``inputs`` (in :attr:`input_names` order) with each NumPy feed of a 64-bit integer input that JAX computes in
    32 bits (x64 off) narrowed as :meth:`run` narrows it: refused, with run's message, where its values do not fit.

    ``jax.jit`` would convert such a feed to 32 bits without a word, wrapping values beyond int32. Shape-setting
    inputs are left to :meth:`_invoke`, which checks them whole.
    """
    fed = list(inputs)
    for index, (name, value) in enumerate(zip(self.input_names, inputs, strict=False)):
      spec = self._inputs[name]
      if not spec.narrow or name in self._static_consumers or not isinstance(value, (np.ndarray, np.generic)):
        continue
      array = np.asarray(value)
      if array.dtype == spec.dtype:
        fed[index] = narrowed(array, functools.partial(_refusal, spec, array.shape))
    return fed

  def _call(self, *inputs: Any) -> tuple[jax.Array, ...]:
    if len(inputs) != len(self.input_names):
      raise ModelError(f"the graph takes {len(self.input_names)} inputs {list(self.input_names)}; got {len(inputs)}")
    return self._invoke(dict(zip(self.input_names, self._narrowed_feeds(inputs), strict=True)), checked=False)

  def lower(self, *inputs: Any) -> Any:
    """``jax.jit(...).lower`` of :attr:`function` on these inputs (for inspecting the XLA program)."""
    inputs = tuple(self._narrowed_feeds(inputs))
    if self._plain is not None:
      return self._plain.lower(*inputs)
    values = dict(zip(self.input_names, inputs, strict=True))
    statics = tuple((n, _Static(np.asarray(values[n]))) for n in self.static_inputs if n in values)
    key = (statics, ())
    return self._jitted.lower(key, *(values[n] for n in self._dynamic_names(key)))

  def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
    """Runs the graph on NumPy inputs and returns NumPy outputs, of the types the graph declares.

    ``inputs`` is a list (or tuple) in :attr:`input_names` order, or a mapping from input names to arrays,
    which may also override the default of an :attr:`overridable_inputs` name. Every feed is checked: no
    name missing or unknown, its element type exactly the declared one, its rank and every fixed dimension
    as declared, and each symbolic dimension the same across inputs; a failure is a :class:`ModelError`
    naming the input, what the graph declares and what was given.
    """
    del kwargs
    if self._placement is not None:
      with jax.default_device(self._placement):
        return self._run(inputs)
    return self._run(inputs)

  def _run(self, inputs: Any) -> tuple[np.ndarray, ...]:
    seen: dict[str, tuple[int, str]] = {}
    if type(inputs) is list or type(inputs) is tuple:  # the common case, kept short: it runs on every call
      if len(inputs) != len(self._checks):
        raise ModelError(self._count_message(len(inputs)))
      converted: list[Any] | None = None  # made only where a check converts a feed (a list, a narrowed int64)
      for index, (check, value) in enumerate(zip(self._checks, inputs, strict=False)):
        array = check(value, seen)
        if array is not value:
          converted = converted or list(inputs)
          converted[index] = array
      checked = inputs if converted is None else converted
      if self._plain is not None:
        return self._numpy(self._plain(*checked))
      return self._numpy(self._invoke(dict(zip(self.input_names, checked, strict=True)), checked=True))
    if not isinstance(inputs, Mapping):
      raise ModelError(
        f"rep.run takes a list of arrays in the order {list(self.input_names)} or a mapping from their names to "
        f"arrays; got {type(inputs).__name__}"
      )
    self._check_names(inputs)
    return self._numpy(self._invoke({n: self._inputs[n].check(v, seen) for n, v in inputs.items()}, checked=True))

  def _count_message(self, count: int) -> str:
    return f"the graph takes {len(self.input_names)} inputs {list(self.input_names)}; got {count}"

  def _check_names(self, inputs: Mapping[str, Any]) -> None:
    problems = []
    for name in self.input_names:
      if name not in inputs:
        problems.append(f"no value for graph input {name!r} (declared {self._inputs[name].declared})")
    for name in inputs:
      if name not in self._inputs:
        same = [n for n in self._inputs if n.lower() == str(name).lower()]
        close = same or difflib.get_close_matches(str(name), list(self._inputs), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(f"{name!r} is not a graph input{hint}")
    if problems:
      optional = f", and may override {list(self.overridable_inputs)}" if self.overridable_inputs else ""
      missing = [n for n in self.input_names if n not in inputs]
      raise ModelError(
        f"rep.run's inputs do not match the graph, which takes {list(self.input_names)}{optional}: "
        + "; ".join(problems),
        input_name=missing[0] if missing else next(n for n in inputs if n not in self._inputs),
      )

  def _numpy(self, outputs: tuple[jax.Array, ...]) -> tuple[np.ndarray, ...]:
    if not self._output_casts:
      return tuple(map(np.asarray, outputs))
    result = list(map(np.asarray, outputs))
    for index, dtype in self._output_casts:  # int64 outputs computed in 32 bits, returned as declared
      result[index] = result[index].astype(dtype)
    return tuple(result)


def _refusal(spec: _Input, shape: tuple[int, ...], why: str) -> ModelError:
  return spec.error(type_name(spec.dtype, shape), why)


class _NarrowedFeeds:
  """:attr:`BackendRep.function` of a graph with a 64-bit integer input computed in 32 bits: the jitted graph, called
  (or lowered) after its NumPy feeds are narrowed as :meth:`BackendRep.run` narrows them; anything else of the
  ``jax.jit`` object is its own."""

  def __init__(self, jitted: Any, narrow: Callable[[Sequence[Any]], list[Any]]):
    self._jitted = jitted
    self._narrow = narrow

  def __call__(self, *inputs: Any) -> tuple[jax.Array, ...]:
    return self._jitted(*self._narrow(inputs))

  def lower(self, *inputs: Any) -> Any:
    return self._jitted.lower(*self._narrow(inputs))

  def __getattr__(self, name: str) -> Any:
    return getattr(self._jitted, name)


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
  def prepare(
    cls, model: Any, device: str = "CPU", *, max_elements: int | None = DEFAULT_MAX_ELEMENTS, **kwargs: Any
  ) -> BackendRep:
    """Reads and checks ``model`` (a ``ModelProto``, its serialized bytes or a path) and builds its :class:`BackendRep`.

    Nothing of the model runs here: every failure is a :class:`ModelError`. ``max_elements`` is the most
    elements any tensor of the graph may have (default :data:`DEFAULT_MAX_ELEMENTS`, 2**31 - 1); ``None``
    keeps only the bound past which XLA would abort (2**59 - 1).
    """
    del kwargs
    proto, folder = model_lib.read(model)
    model_lib.refuse_what_cannot_run(proto)
    model_lib.load_external_data(proto, folder)
    model_lib.check(proto)
    try:
      inferred = model_lib.infer(proto, strict=True)
    except ModelError as refusal:
      # Where the backend's own reading finds the fault too, its message names the node and the rule its way.
      try:
        BackendRep(model_lib.infer(proto, strict=False), device, max_elements=max_elements)
      except ModelError as ours:
        raise ours from refusal
      except Exception:
        pass
      raise
    return BackendRep(inferred, device, max_elements=max_elements)

  @classmethod
  def is_compatible(cls, model: Any, device: str = "CPU", **kwargs: Any) -> bool:
    """Whether :meth:`prepare` accepts ``model``: every node supported, every shape-setting input static."""
    try:
      cls.prepare(model, device, **kwargs)
    except ModelError:
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
    names = [name for name in node.input if name]
    arrays = [np.asarray(a) for a in (inputs.values() if isinstance(inputs, Mapping) else inputs)]
    graph_inputs = [
      helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
      for n, a in zip(names, arrays, strict=True)
    ]
    opset = int(kwargs.pop("opset_version", onnx.defs.onnx_opset_version()))
    graph = helper.make_graph(
      [node], "run_node", graph_inputs, [helper.make_empty_tensor_value_info(n) for n in node.output]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
      inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as e:
      raise ModelError(f"ONNX's shape inference refuses the node: {e}") from e
    types = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    for output in model.graph.output:
      if output.name in types and types[output.name].type.tensor_type.elem_type:
        output.CopyFrom(types[output.name])
    if outputs_info is not None:
      for output, (dtype, _) in zip(model.graph.output, outputs_info, strict=False):
        output.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return cls.prepare(model, device, **kwargs).run(arrays)

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
