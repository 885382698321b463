"""Reading an ONNX model that may be malformed or hostile, before anything of it runs.

In order, each failure a :class:`ModelError` that says what and where: the bytes must parse; the graph must
be flat (no subgraph attributes), hold only the ops and tensor types the backend runs, and keep its
external data inside the model's folder; then ONNX's checker and ONNX's strict shape inference must accept
it (their own messages are kept, wrapped). Every walk is a loop over the graph, never a recursion, so a
deep chain cannot exhaust Python's stack, and no subgraph is ever handed to ONNX's recursive C++ code.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from typing import Any

import onnx
from onnx import AttributeProto, TensorProto

from dmljax._src.onnx.nodes import HANDLERS, SUPPORTED_OPS, ModelError, element_dtype

ONNX_DOMAINS = ("", "ai.onnx")
_SUBGRAPH_TYPES = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
_SPARSE_TYPES = (AttributeProto.SPARSE_TENSOR, AttributeProto.SPARSE_TENSORS)


def read(model: Any) -> tuple[onnx.ModelProto, pathlib.Path | None]:
  """The model and the folder its external data may live in (that of its file; ``None`` for bytes or a proto)."""
  if isinstance(model, onnx.ModelProto):
    return model, None
  if isinstance(model, (str, os.PathLike)):
    path = pathlib.Path(model)
    try:
      data = path.read_bytes()
    except OSError as e:
      raise ModelError(f"the model file {str(path)!r} cannot be read: {e}") from e
    return _parse(data, f"the model file {str(path)!r}"), path.resolve().parent
  if isinstance(model, (bytes, bytearray, memoryview)):
    return _parse(bytes(model), "the model's bytes"), None
  raise ModelError(f"prepare takes an onnx.ModelProto, its serialized bytes or a path; got {type(model).__name__}")


def _parse(data: bytes, what: str) -> onnx.ModelProto:
  proto = onnx.ModelProto()
  try:
    proto.ParseFromString(data)
  except Exception as e:  # protobuf's DecodeError, or anything its parser raises on corrupt bytes
    raise ModelError(f"{what} are not an ONNX model (protobuf could not parse them: {e})") from e
  return proto


def node_name(proto: onnx.NodeProto, index: int) -> str:
  return proto.name or f"#{index}"


def _node_error(proto: onnx.NodeProto, index: int, message: str) -> ModelError:
  name = node_name(proto, index)
  return ModelError(f"node {name!r} ({proto.op_type}): {message}", node=name, op_type=proto.op_type)


def refuse_what_cannot_run(model: onnx.ModelProto) -> None:
  """Refuses, before ONNX's checker sees them, nodes and types the backend does not run."""
  newest = onnx.defs.onnx_opset_version()
  for entry in model.opset_import:
    if entry.domain in ONNX_DOMAINS and entry.version > newest:
      raise ModelError(
        f"the model imports ONNX opset {entry.version}, newer than this onnx package knows ({newest}): its "
        "operators' meaning is unknown to it (upgrade onnx, or export the model for an older opset)"
      )
  graph = model.graph
  functions = {(f.domain, f.name) for f in model.functions}
  for nodes in (*(f.node for f in model.functions), graph.node):
    for index, proto in enumerate(nodes):
      for attribute in proto.attribute:
        if attribute.type in _SUBGRAPH_TYPES or attribute.HasField("g") or len(attribute.graphs):
          raise _node_error(
            proto, index, f"attribute {attribute.name!r} holds a subgraph; dmljax.onnx runs flat graphs of its ops only"
          )
        if attribute.type in _SPARSE_TYPES or attribute.HasField("sparse_tensor"):
          raise _node_error(proto, index, f"attribute {attribute.name!r} is a sparse tensor, which is not supported")
  for index, proto in enumerate(graph.node):
    if proto.domain not in ONNX_DOMAINS or proto.op_type not in HANDLERS:
      local = " (a function defined in the model)" if (proto.domain, proto.op_type) in functions else ""
      raise _node_error(
        proto,
        index,
        f"op type {proto.op_type}{local} (domain {proto.domain or 'ai.onnx'!r}) is not supported by dmljax.onnx; "
        f"it runs {', '.join(SUPPORTED_OPS)}",
      )
  for kind, infos in (("input", graph.input), ("output", graph.output)):
    for info in infos:
      which = info.type.WhichOneof("value")
      if which != "tensor_type":
        what = {"sequence_type": "a sequence", "optional_type": "an optional", "map_type": "a map"}.get(
          which or "", f"a {which or 'missing'} type"
        )
        raise ModelError(f"graph {kind} {info.name!r} is {what}; dmljax.onnx runs tensors only", input_name=info.name)
      element_dtype(info.type.tensor_type.elem_type, f"graph {kind} {info.name!r}")
  if len(graph.sparse_initializer):
    raise ModelError(f"sparse initializer {graph.sparse_initializer[0].values.name!r} is not supported")


def _tensors(model: onnx.ModelProto) -> Iterator[tuple[TensorProto, str]]:
  """Every dense tensor the graph and its functions hold, with where it is (for messages)."""
  for tensor in model.graph.initializer:
    yield tensor, f"initializer {tensor.name!r}"
  for nodes in (model.graph.node, *(f.node for f in model.functions)):
    for index, proto in enumerate(nodes):
      for attribute in proto.attribute:
        where = f"attribute {attribute.name!r} of node {node_name(proto, index)!r}"
        if attribute.HasField("t"):
          yield attribute.t, where
        for tensor in attribute.tensors:
          yield tensor, where


def load_external_data(model: onnx.ModelProto, folder: pathlib.Path | None) -> None:
  """Reads the tensors stored outside the model, each from a regular file inside ``folder``."""
  external = [(t, where) for t, where in _tensors(model) if t.data_location == TensorProto.EXTERNAL]
  if not external:
    return
  root = folder.resolve() if folder is not None else None
  for tensor, where in external:
    entries = {entry.key: entry.value for entry in tensor.external_data}
    location = entries.get("location", "")
    if root is None:
      raise ModelError(
        f"{where} keeps its data in the external file {location!r}: give prepare the model's path, so that "
        "the file can be found in the model's folder"
      )
    if "\x00" in location:
      raise ModelError(f"{where} keeps its data at {location!r}, a path with a NUL byte, which no file can have")
    try:
      target = (root / location).resolve()
      inside = bool(location) and not pathlib.PurePath(location).is_absolute() and target.is_relative_to(root)
      is_file = inside and target.is_file()
    except (OSError, RuntimeError, ValueError) as e:  # a name too long, a symbolic link loop (RuntimeError)
      raise ModelError(
        f"{where} keeps its data at {location!r}, which cannot be looked up in the model's folder "
        f"{str(root)!r}: {type(e).__name__}: {e}"
      ) from e
    if not inside:
      raise ModelError(
        f"{where} keeps its data at {location!r}, outside the model's folder {str(root)!r}: refused (external data "
        "must be a relative path inside the folder)"
      )
    if not is_file:
      raise ModelError(f"{where} keeps its data in {location!r}, which is not a file in {str(root)!r}")
  try:
    onnx.external_data_helper.load_external_data_for_model(model, str(root))
  except Exception as e:
    raise ModelError(f"the model's external data cannot be read: {type(e).__name__}: {e}") from e


def check(model: onnx.ModelProto) -> None:
  """ONNX's checker."""
  try:
    onnx.checker.check_model(model)
  except Exception as e:
    raise ModelError(f"ONNX's checker refuses the model: {e}") from e


def infer(model: onnx.ModelProto, *, strict: bool) -> onnx.ModelProto:
  """The model with every value's type as ONNX's shape inference finds it; ``strict``: refusing any inconsistency."""
  try:
    # (No data propagation: ONNX's allocates in proportion to the dimensions a model declares, so a hostile one
    # could exhaust memory there; the backend traces the graph itself where shapes matter.)
    return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=strict)
  except Exception as e:
    raise ModelError(f"ONNX's shape inference refuses the model: {str(e).strip()}") from e


def opset(model: onnx.ModelProto) -> int:
  for entry in model.opset_import:
    if entry.domain in ONNX_DOMAINS:
      return int(entry.version)
  return int(onnx.defs.onnx_opset_version())
