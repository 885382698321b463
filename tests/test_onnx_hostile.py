"""dmljax.onnx on malformed and hostile files (issue 18, point 2): a corpus and a mutation fuzz.

Every model of the corpus must make ``prepare`` raise a ModelError (ONNX's checker's own message wrapped
where the checker is the one to refuse it), within a time bound, without compiling (so without executing)
anything. The fuzz mutates valid models (flipped bytes, edited attributes, shapes and shape-setting
initializers) and asserts that only ModelError or DescriptorError ever escape, from ``prepare`` or from a
``run`` of what prepares, and that ``prepare`` stays within the bound. Nothing may crash the interpreter: a
crash would end this test process.
"""

from __future__ import annotations

import contextlib
import pathlib
import resource
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
import pytest
from _helpers import peer
from hypothesis import given
from hypothesis import strategies as st

import dmljax as dml
import dmljax.onnx as donnx

onnx = peer("onnx")
TensorProto, helper = onnx.TensorProto, onnx.helper

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
BOUND_S = 20.0  # generous: the machine is shared; each case takes well under a second alone
_COMPILE = "/jax/core/compile/backend_compile_duration"


def info(name, elem_type, shape):
  return helper.make_tensor_value_info(name, elem_type, shape)


def model_of(nodes, inputs, outputs, initializers=(), opset=18, **kwargs):
  graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
  return helper.make_model(graph, opset_imports=kwargs.pop("opsets", [helper.make_opsetid("", opset)]), **kwargs)


@pytest.fixture(autouse=True)
def bounded_memory() -> Iterator[None]:
  """At most 8 GiB more address space for each test: a model that makes something allocate without bound fails
  its test with a MemoryError instead of drawing the machine's out-of-memory killer (Linux only)."""
  statm = pathlib.Path("/proc/self/statm")
  if not statm.exists():
    yield
    return
  soft, hard = resource.getrlimit(resource.RLIMIT_AS)
  limit = int(statm.read_text().split()[0]) * resource.getpagesize() + 8 * 2**30
  resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
  try:
    yield
  finally:
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def compiles() -> Iterator[list[str]]:
  """The XLA compilations (hence executions) that happen inside the block."""
  seen: list[str] = []

  def listener(event: str, duration: float, **kwargs: Any) -> None:
    if event == _COMPILE:
      seen.append(event)

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    yield seen
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)


def _routing() -> onnx.ModelProto:
  """A valid graph of the backend's operators and glue, with a symbolic batch dimension."""
  nodes = [
    helper.make_node("TopK", ["x", "k"], ["v", "i"]),
    helper.make_node("ReduceLogSumExp", ["v", "last"], ["lse"], keepdims=1),
    helper.make_node("Sub", ["v", "lse"], ["d"]),
    helper.make_node("Exp", ["d"], ["gates"]),
    helper.make_node("Unsqueeze", ["i", "last"], ["idx"]),
    helper.make_node("GatherND", ["table", "idx"], ["picked"]),
    helper.make_node("ReduceSum", ["picked", "one"], ["mixed"], keepdims=0),
    helper.make_node("ArgMax", ["x"], ["first"], axis=-1, keepdims=0),
    helper.make_node("OneHot", ["first", "depth", "values"], ["hot"], axis=-1),
    helper.make_node("ReduceSum", ["hot", "zero"], ["load"], keepdims=0),
  ]
  consts = [
    helper.make_tensor("k", I64, [1], [2]),
    helper.make_tensor("last", I64, [1], [-1]),
    helper.make_tensor("one", I64, [1], [1]),
    helper.make_tensor("zero", I64, [1], [0]),
    helper.make_tensor("depth", I64, [], [8]),
    helper.make_tensor("values", F32, [2], [0.0, 1.0]),
  ]
  inputs = [info("x", F32, ["N", 8]), info("table", F32, [8, 4])]
  outputs = [info("mixed", F32, ["N", 4]), info("load", F32, [8]), info("gates", F32, ["N", 2])]
  return model_of(nodes, inputs, outputs, consts)


def _glue() -> onnx.ModelProto:
  """A valid graph of the glue, every shape fixed."""
  nodes = [
    helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
    helper.make_node("Cast", ["h"], ["f"], to=F32),
    helper.make_node("Reshape", ["f", "shape"], ["r"]),
    helper.make_node("Unsqueeze", ["r", "zero"], ["u"]),
    helper.make_node("Squeeze", ["u", "zero"], ["s"]),
    helper.make_node("ReduceMax", ["s"], ["m"], axes=[1], keepdims=1),
    helper.make_node("Gather", ["x", "cols"], ["g"], axis=1),
    helper.make_node("Neg", ["g"], ["n"]),
  ]
  consts = [
    helper.make_tensor("shape", I64, [2], [2, 12]),
    helper.make_tensor("zero", I64, [1], [0]),
    helper.make_tensor("cols", I64, [2], [0, 3]),
  ]
  return model_of(nodes, [info("x", F32, [4, 6])], [info("m", F32, [2, 1]), info("n", F32, [4, 2])], consts, opset=13)


SEEDS = {"routing": _routing(), "glue": _glue()}


def test_the_seeds_are_valid_and_run():
  for model in SEEDS.values():
    rep = donnx.Backend.prepare(model)
    assert all(np.isfinite(o).all() for o in rep.run(_feeds(rep)))


def _feeds(rep: donnx.BackendRep) -> list[np.ndarray]:
  rng = np.random.default_rng(0)
  feeds = []
  for name in rep.input_names:
    spec = rep._inputs[name]
    shape = tuple(d if isinstance(d, int) else 2 for d in spec.shape or ())
    feeds.append(
      (rng.integers(0, 3, size=shape) if spec.dtype.kind in "iub" else rng.normal(size=shape)).astype(spec.dtype)
    )
  return feeds


# ---- the corpus --------------------------------------------------------------------------------------------


def _identity_chain(count: int, last: str = "Identity", **attrs: Any) -> onnx.ModelProto:
  nodes = [helper.make_node("Identity", [f"v{i}"], [f"v{i + 1}"]) for i in range(count - 1)]
  nodes.append(helper.make_node(last, [f"v{count - 1}"], [f"v{count}"], **attrs))
  return model_of(nodes, [info("v0", F32, [3])], [info(f"v{count}", F32, [3])])


def _cycle() -> onnx.ModelProto:
  nodes = [helper.make_node("Identity", ["b"], ["a"]), helper.make_node("Identity", ["a"], ["b"])]
  return model_of(nodes, [info("x", F32, [1])], [info("b", F32, [1])])


def _subgraph() -> onnx.ModelProto:
  leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y0"])], "leaf", [], [info("y0", F32, [1])])
  node = helper.make_node("If", ["c"], ["y"], then_branch=leaf, else_branch=leaf)
  return model_of([node], [info("c", TensorProto.BOOL, []), info("x", F32, [1])], [info("y", F32, [1])])


def _field(number: int, payload: bytes) -> bytes:
  """A length-delimited protobuf field."""
  key, size, out = (number << 3) | 2, len(payload), bytearray()
  for value in (key, size):
    while value >= 0x80:
      out.append((value & 0x7F) | 0x80)
      value >>= 7
    out.append(value)
  return bytes(out) + payload


def _nested_subgraphs(depth: int) -> bytes:
  """A model whose If nodes nest ``depth`` deep, written as bytes (protobuf's own builders refuse such depth)."""
  graph = b""
  for _ in range(depth):  # GraphProto.node (1) > NodeProto.attribute (5) > AttributeProto.g (6) > GraphProto
    attribute = _field(1, b"then_branch") + _field(6, graph) + bytes([0xA0, 0x01, 0x05])  # type (20) = GRAPH
    graph = _field(1, _field(4, b"If") + _field(5, attribute))
  return _field(7, graph) + bytes([0x08, 0x08])  # ModelProto.graph (7), ir_version (1) = 8


def _function_call() -> onnx.ModelProto:
  body = [helper.make_node("Neg", ["a"], ["b"])]
  function = helper.make_function("local", "negate", ["a"], ["b"], body, [helper.make_opsetid("", 18)])
  node = helper.make_node("negate", ["x"], ["y"], domain="local")
  opsets = [helper.make_opsetid("", 18), helper.make_opsetid("local", 1)]
  return model_of([node], [info("x", F32, [2])], [info("y", F32, [2])], opsets=opsets, functions=[function])


def _external(location: str) -> onnx.ModelProto:
  tensor = helper.make_tensor("w", F32, [2], [0.0, 0.0])
  tensor.ClearField("float_data")
  tensor.data_location = TensorProto.EXTERNAL
  tensor.external_data.add(key="location", value=location)
  node = helper.make_node("Add", ["x", "w"], ["y"])
  return model_of([node], [info("x", F32, [2])], [info("y", F32, [2])], [tensor])


def _typed_input(kind: str) -> onnx.ModelProto:
  element = helper.make_tensor_type_proto(F32, [2])
  value_type = {
    "sequence": helper.make_sequence_type_proto(element),
    "optional": helper.make_optional_type_proto(element),
  }[kind]
  value = helper.make_value_info("x", value_type)
  node = helper.make_node("Identity", ["x"], ["y"])
  return model_of([node], [value], [helper.make_value_info("y", value_type)], opset=18)


def _bad_raw_data() -> onnx.ModelProto:
  tensor = helper.make_tensor("w", F32, [1000], np.zeros(1000, np.float32).tobytes(), raw=True)
  tensor.raw_data = np.zeros(3, np.float32).tobytes()  # 1000 elements declared, 3 given
  return model_of([helper.make_node("Add", ["x", "w"], ["y"])], [info("x", F32, [1000])], [info("y", F32, [1000])],
                  [tensor])  # fmt: skip


def _huge_reshape() -> onnx.ModelProto:
  model = _glue()
  model.graph.initializer[0].CopyFrom(helper.make_tensor("shape", I64, [1], [2**31 - 1]))
  return model


_VALID = _glue().SerializeToString()
CORPUS: dict[str, tuple[Callable[[pathlib.Path], Any], str]] = {
  "truncated bytes": (lambda _: _VALID[: len(_VALID) // 2], "are not an ONNX model"),
  "corrupted bytes": (lambda _: bytes(b ^ 0x5A for b in _VALID), ""),
  "garbage bytes": (lambda _: b"\xff\xfe\x00\x01" * 64, ""),
  "empty bytes": (lambda _: b"", "ONNX's checker refuses the model"),
  "not a model": (lambda _: 42, "prepare takes an onnx.ModelProto"),
  "missing file": (lambda tmp: tmp / "nope.onnx", "cannot be read"),
  "cycle": (lambda _: _cycle(), "ONNX's checker refuses the model"),
  "undefined input": (
    lambda _: model_of([helper.make_node("Neg", ["nope"], ["y"])], [info("x", F32, [1])], [info("y", F32, [1])]),
    "ONNX's checker refuses the model",
  ),
  "duplicate output names": (
    lambda _: model_of(
      [helper.make_node("Neg", ["x"], ["y"]), helper.make_node("Abs", ["x"], ["y"])],
      [info("x", F32, [1])],
      [info("y", F32, [1])],
    ),
    "ONNX's checker refuses the model",
  ),
  "huge declared shape": (
    lambda _: model_of(
      [helper.make_node("Neg", ["x"], ["y"])], [info("x", F32, [2**62, 2**62])], [info("y", F32, [2**62, 2**62])]
    ),
    "more than the 2147483647",
  ),
  "negative declared dimension": (
    lambda _: model_of([helper.make_node("Neg", ["x"], ["y"])], [info("x", F32, [-3])], [info("y", F32, [-3])]),
    "negative dimension",
  ),
  "10,000-node chain ending in an unsupported op": (lambda _: _identity_chain(10_000, "Softmax"), "is not supported"),
  "subgraph (If)": (lambda _: _subgraph(), "holds a subgraph"),
  "subgraphs 20 deep": (lambda _: _nested_subgraphs(20), "holds a subgraph"),
  "subgraphs 10,000 deep": (lambda _: _nested_subgraphs(10_000), "are not an ONNX model"),
  "local function": (lambda _: _function_call(), "(a function defined in the model)"),
  "custom domain": (
    lambda _: model_of(
      [helper.make_node("Magic", ["x"], ["y"], domain="com.example")],
      [info("x", F32, [1])],
      [info("y", F32, [1])],
      opsets=[helper.make_opsetid("", 18), helper.make_opsetid("com.example", 1)],
    ),
    "domain 'com.example'",
  ),
  "unknown opset": (
    lambda _: model_of(
      [helper.make_node("Neg", ["x"], ["y"])], [info("x", F32, [1])], [info("y", F32, [1])], opset=10_000
    ),
    "newer than this onnx package",
  ),
  "external data outside the folder": (
    lambda tmp: _saved(tmp, _external("../outside.bin")),
    "outside the model's folder",
  ),
  "external data at an absolute path": (lambda tmp: _saved(tmp, _external("/etc/hostname")), "outside the model's"),
  "external data through a link out": (lambda tmp: _saved(tmp, _external("link.bin")), "outside the model's folder"),
  "external data in memory": (lambda _: _external("w.bin"), "give prepare the model's path"),
  "external data missing": (lambda tmp: _saved(tmp, _external("absent.bin")), "is not a file"),
  "sequence input": (lambda _: _typed_input("sequence"), "is a sequence"),
  "optional input": (lambda _: _typed_input("optional"), "is an optional"),
  "string input": (
    lambda _: model_of(
      [helper.make_node("Identity", ["x"], ["y"])],
      [info("x", TensorProto.STRING, [1])],
      [info("y", TensorProto.STRING, [1])],
    ),
    "element type STRING",
  ),
  "initializer data of the wrong size": (lambda _: _bad_raw_data(), "ONNX's checker refuses the model"),
  # ONNX's shape inference with data propagation allocated in proportion to this shape (found by the fuzz below).
  "a reshape to 2**31 - 1 elements": (lambda _: _huge_reshape(), "shape must keep the input's 24 elements"),
}


def _saved(folder: pathlib.Path, model: onnx.ModelProto) -> pathlib.Path:
  (folder / "model").mkdir()
  (folder / "outside.bin").write_bytes(np.zeros(2, np.float32).tobytes())
  (folder / "model" / "link.bin").symlink_to(folder / "outside.bin")
  path = folder / "model" / "model.onnx"
  path.write_bytes(model.SerializeToString())
  return path


@pytest.mark.parametrize("case", list(CORPUS))
def test_a_hostile_model_is_refused_at_prepare_in_bounded_time_without_running(case, tmp_path):
  make, fragment = CORPUS[case]
  model = make(tmp_path)
  with compiles() as compiled:
    start = time.perf_counter()
    with pytest.raises(donnx.ModelError) as error:
      donnx.Backend.prepare(model)
    elapsed = time.perf_counter() - start
  assert fragment in str(error.value), str(error.value)
  assert elapsed < BOUND_S and compiled == []
  if "checker" in fragment:  # the checker's own error, wrapped with context
    assert isinstance(error.value.__cause__, onnx.checker.ValidationError)


def test_a_valid_10000_node_chain_prepares_and_runs_in_bounded_time():
  start = time.perf_counter()
  rep = donnx.Backend.prepare(_identity_chain(10_000, "Neg").SerializeToString())
  assert rep.run([np.arange(3, dtype=np.float32)])[0].tolist() == [0.0, -1.0, -2.0]
  assert time.perf_counter() - start < 2 * BOUND_S


def test_external_data_inside_the_folder_is_read(tmp_path):
  (tmp_path / "w.bin").write_bytes(np.array([1.0, 2.0], np.float32).tobytes())
  path = tmp_path / "model.onnx"
  path.write_bytes(_external("w.bin").SerializeToString())
  assert donnx.Backend.prepare(path).run([np.zeros(2, np.float32)])[0].tolist() == [1.0, 2.0]


# ---- the fuzz ----------------------------------------------------------------------------------------------

_ESCAPES = (donnx.ModelError, dml.DescriptorError)
_INTS = st.one_of(st.integers(-3, 12), st.sampled_from([0, -1, 2**31 - 1, 2**31, 2**40, 2**62, -(2**63), 2**63 - 1]))


@st.composite
def mutants(draw: st.DrawFn) -> bytes | onnx.ModelProto:
  seed = SEEDS[draw(st.sampled_from(sorted(SEEDS)))]
  kind = draw(st.sampled_from(["bytes", "attribute", "shape", "initializer"]))
  if kind == "bytes":
    data = bytearray(seed.SerializeToString())
    for _ in range(draw(st.integers(1, 4))):
      data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)
  model = onnx.ModelProto()
  model.CopyFrom(seed)
  graph = model.graph
  if kind == "attribute":
    attributes = [
      a for n in graph.node for a in n.attribute if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)
    ]
    attribute = draw(st.sampled_from(attributes))
    if attribute.type == onnx.AttributeProto.INT:
      attribute.i = draw(_INTS)
    else:
      attribute.ClearField("ints")
      attribute.ints.extend(draw(st.lists(_INTS, max_size=3)))
  elif kind == "shape":
    value = draw(st.sampled_from([*graph.input, *graph.output]))
    dims = value.type.tensor_type.shape.dim
    dim = dims[draw(st.integers(0, len(dims) - 1))]
    choice = draw(st.one_of(_INTS.filter(lambda d: d >= -3), st.just("M")))
    if isinstance(choice, str):
      dim.dim_param = choice
    else:
      dim.dim_value = choice
  else:
    tensor = draw(st.sampled_from([t for t in graph.initializer if t.data_type == I64]))
    values = draw(st.lists(_INTS, min_size=1, max_size=1 if not tensor.dims else 3))
    tensor.CopyFrom(helper.make_tensor(tensor.name, I64, [len(values)] if tensor.dims else [], values))
  return model


@given(mutants())
def test_a_mutated_model_raises_only_model_or_descriptor_errors(mutant):
  start = time.perf_counter()
  try:
    rep = donnx.Backend.prepare(mutant, max_elements=10**6)
  except _ESCAPES:
    assert time.perf_counter() - start < BOUND_S
    return
  assert time.perf_counter() - start < BOUND_S
  try:
    rep.run(_feeds(rep))
  except _ESCAPES:
    pass


# Locations that make the path functions themselves raise (issue 22): a NUL byte (ValueError), a name longer than
# the file system allows (OSError), a symbolic link to itself (RuntimeError from pathlib's resolve before Python
# 3.13). Each must be a ModelError naming the tensor and the location.
@pytest.mark.parametrize(
  ("location", "fragment"),
  [("w\x00.bin", "NUL byte"), ("w" * 5000 + ".bin", "wwwwwwww"), ("loop", "'loop'")],
  ids=["NUL byte", "over-long name", "symlink loop"],
)
def test_an_external_data_location_the_file_system_refuses_is_a_model_error(location, fragment, tmp_path):
  (tmp_path / "loop").symlink_to(tmp_path / "loop")
  path = tmp_path / "model.onnx"
  path.write_bytes(_external(location).SerializeToString())
  with pytest.raises(donnx.ModelError) as error:
    donnx.Backend.prepare(path)
  assert fragment in str(error.value) and "initializer 'w'" in str(error.value), str(error.value)
