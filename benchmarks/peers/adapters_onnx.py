"""ONNX Runtime contenders: a single-node ONNX model per workload, in a session with default options.

Nothing here changes ONNX Runtime's threading (its intra-op pool spins by default); :func:`settings`
records what a session runs with, for the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.harness import timing
from benchmarks.harness.timing import Contender, on_gpu
from benchmarks.harness.workload import OnnxNode

_SPIN = "session.intra_op.allow_spinning"


def load() -> Any | None:
  """The ``onnxruntime`` module, or ``None`` where it or ``onnx`` is not installed."""
  try:
    import onnx  # noqa: F401
    import onnxruntime
  except ImportError:
    return None
  return onnxruntime


def providers(ort: Any) -> list[str]:
  names = ["CPUExecutionProvider"]
  if on_gpu() and "CUDAExecutionProvider" in ort.get_available_providers():
    names.insert(0, "CUDAExecutionProvider")
  return names


def settings(ort: Any | None) -> dict[str, Any]:
  """The session options every ONNX Runtime contender runs with (the defaults)."""
  if ort is None:
    return {"installed": False}
  options = ort.SessionOptions()
  try:
    spinning = options.get_session_config_entry(_SPIN)
  except Exception:
    spinning = None
  return {
    "installed": True,
    "intra_op_num_threads": options.intra_op_num_threads,
    "inter_op_num_threads": options.inter_op_num_threads,
    "threads_note": "0 = ONNX Runtime's default (one intra-op thread per physical core)",
    "allow_spinning": spinning if spinning else "default (1: the intra-op pool spins)",
    "execution_mode": str(options.execution_mode),
    "graph_optimization_level": str(options.graph_optimization_level),
    "providers": providers(ort),
  }


def _elem(dtype: np.dtype) -> int:
  import onnx
  from onnx import helper

  if dtype.name == "bfloat16":
    return onnx.TensorProto.BFLOAT16
  return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _output_types(node: OnnxNode, first: tuple[np.ndarray, ...]) -> list[int]:
  import onnx

  if node.op_type == "TopK":
    return [_elem(first[0].dtype), onnx.TensorProto.INT64]
  if node.op_type in ("ArgMax", "ArgMin"):
    return [onnx.TensorProto.INT64]
  if node.op_type == "OneHot":
    return [_elem(first[1].dtype)]
  return [_elem(first[0].dtype)]


def model_bytes(node: OnnxNode, first: tuple[np.ndarray, ...]) -> bytes:
  """A one-node model (opset 18) on inputs shaped like ``first``, serialised."""
  from onnx import helper, numpy_helper

  graph_inputs = [helper.make_tensor_value_info(f"in{j}", _elem(a.dtype), a.shape) for j, a in enumerate(first)]
  names = node.inputs or (*(f"in{j}" for j in range(len(first))), *(c for c, _ in node.constants))
  outputs = [helper.make_tensor_value_info(f"out{j}", t, None) for j, t in enumerate(_output_types(node, first))]
  graph = helper.make_graph(
    [helper.make_node(node.op_type, list(names), [o.name for o in outputs], **node.attributes)],
    "workload",
    graph_inputs,
    outputs,
    initializer=[numpy_helper.from_array(value, cname) for cname, value in node.constants],
  )
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
  model.ir_version = 9
  return model.SerializeToString()


def contender(ort: Any, name: str, node: OnnxNode, np_inputs: Sequence[tuple[np.ndarray, ...]]) -> Contender:
  """A session on the one-node model, with default options; its creation time is the compile time."""
  prepared = [node.prepare(args) if node.prepare else args for args in np_inputs]
  serialized = model_bytes(node, prepared[0])
  session, compile_s = timing.timed(
    lambda: ort.InferenceSession(serialized, ort.SessionOptions(), providers=providers(ort))
  )
  feeds = [{f"in{j}": a for j, a in enumerate(args)} for args in prepared]

  def forward(i: int) -> None:
    session.run(None, feeds[i])

  return Contender(name, "onnxruntime", forward, compile_s=compile_s)
