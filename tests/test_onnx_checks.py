"""dmljax.onnx on a stranger's model (issue 18): every feed checked at run, initializers as overridable defaults,
int64 without x64, the glue's ONNX semantics, every static rule at prepare, and errors that name the node.

Each reproducer of the issue is a test here, named after what it shows.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _helpers import peer

import dmljax as dml
import dmljax.onnx as donnx

onnx = peer("onnx")
TensorProto, helper = onnx.TensorProto, onnx.helper
ReferenceEvaluator = peer("onnx.reference").ReferenceEvaluator

F32, F16, I32, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64


def info(name, elem_type, shape):
  return helper.make_tensor_value_info(name, elem_type, shape)


def model_of(nodes, inputs, outputs, initializers=(), opset=18):
  """The model; outputs given without a shape get ONNX's inferred one where inference finds it (the checker
  wants one)."""
  graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
  try:
    return onnx.shape_inference.infer_shapes(model)
  except onnx.shape_inference.InferenceError:
    return model


def refused(call, *fragments):
  """``call()`` raises a ModelError whose message holds every fragment; returns the error."""
  with pytest.raises(donnx.ModelError) as error:
    call()
  for fragment in fragments:
    assert fragment in str(error.value), str(error.value)
  return error.value


# ---- feeds ---------------------------------------------------------------------------------------------------


def _mean_model():
  """X: float32[N,10,4,5] -> ReduceMean over the last axis."""
  node = helper.make_node("ReduceMean", ["X"], ["Y"], axes=[-1], keepdims=0, name="mean")
  return model_of([node], [info("X", F32, ["N", 10, 4, 5])], [info("Y", F32, ["N", 10, 4])], opset=13)


X = np.random.default_rng(0).normal(size=(2, 10, 4, 5)).astype(np.float32)


def test_a_wrong_static_dimension_is_refused_as_onnx_runtime_does():
  rep = donnx.Backend.prepare(_mean_model())
  error = refused(
    lambda: rep.run([X[:, :9]]),
    "graph input 'X' is declared float32[N,10,4,5]; got float32[2,9,4,5]: dimension 1 is 9, where the graph fixes it "
    "at 10",
  )
  assert error.input_name == "X"
  refused(lambda: rep.run([X[0]]), "got float32[10,4,5]: rank 3, where the graph declares rank 4")
  assert rep.run([X])[0].shape == (2, 10, 4)
  assert rep.run([X[:1]])[0].shape == (1, 10, 4)  # N is symbolic: any size


def test_a_wrong_element_type_is_refused_with_the_conversion_that_fixes_it():
  rep = donnx.Backend.prepare(_mean_model())
  refused(
    lambda: rep.run([X.astype(np.float16)]),
    "graph input 'X' is declared float32[N,10,4,5]; got float16[2,10,4,5]: the element type differs; give it as "
    "np.asarray(x, np.float32)",
  )
  refused(lambda: rep.run([X.astype(np.int32)]), "got int32[2,10,4,5]: the element type differs")
  refused(lambda: rep.run([X.tolist()]), "got a list, which NumPy reads as float64[2,10,4,5]: give it as np.asarray(x")
  with jax.enable_x64(True):  # never a silent float64 computation of a float32 graph
    refused(lambda: donnx.Backend.prepare(_mean_model()).run([X.tolist()]), "which NumPy reads as float64")


def test_missing_extra_and_misspelled_names_and_containers_are_errors():
  rep = donnx.Backend.prepare(_mean_model())
  error = refused(lambda: rep.run({}), "no value for graph input 'X' (declared float32[N,10,4,5])")
  assert error.input_name == "X"
  refused(lambda: rep.run({"x": X}), "no value for graph input 'X'", "'x' is not a graph input (did you mean 'X'?)")
  refused(lambda: rep.run({"X": X, "Z": X}), "'Z' is not a graph input")
  refused(lambda: rep.run([None]), "graph input 'X' is declared float32[N,10,4,5]; got None: give an array")
  refused(lambda: rep.run(None), "rep.run takes a list of arrays in the order ['X'] or a mapping")
  refused(lambda: rep.run(X), "got ndarray")
  refused(lambda: rep.run([X, X]), "the graph takes 1 inputs ['X']; got 2")
  assert rep.run({"X": X})[0].shape == (2, 10, 4) and rep.run((X,))[0].shape == (2, 10, 4)


def test_symbolic_dimensions_must_agree_across_inputs():
  node = helper.make_node("Add", ["a", "b"], ["c"])
  model = model_of([node], [info("a", F32, ["N", 3]), info("b", F32, ["N", 3])], [info("c", F32, ["N", 3])])
  rep = donnx.Backend.prepare(model)
  a = np.ones((4, 3), np.float32)
  refused(lambda: rep.run([a, a[:2]]), "graph input 'b'", "dimension 0 (N) is 2, but graph input 'a' gave N = 4")
  assert rep.run([a, a])[0].tolist() == (2 * a).tolist()
  with pytest.raises(donnx.ModelError, match="dimension 0 \\(N\\) is 2"):  # the graph function checks when it traces
    rep.function(a, a[:2])


def test_a_jax_array_feed_is_checked_against_the_type_jax_computes():
  rep = donnx.Backend.prepare(_mean_model())
  assert rep.run([jnp.asarray(X)])[0].shape == (2, 10, 4)
  refused(lambda: rep.run([jnp.asarray(X, jnp.float16)]), "got float16[2,10,4,5]")


def test_an_initializer_listed_as_a_graph_input_is_a_default_the_caller_may_override():
  node = helper.make_node("Add", ["x", "b"], ["y"])
  b = helper.make_tensor("b", F32, [1], [5.0])
  model = model_of([node], [info("x", F32, [1]), info("b", F32, [1])], [info("y", F32, [1])], [b])
  rep = donnx.Backend.prepare(model)
  assert rep.input_names == ("x",) and rep.overridable_inputs == ("b",)
  x, override = np.array([1.0], np.float32), np.array([100.0], np.float32)
  assert rep.run({"x": x, "b": override})[0].tolist() == [101.0]
  assert ReferenceEvaluator(model).run(None, {"x": x, "b": override})[0].tolist() == [101.0]
  assert rep.run({"x": x})[0].tolist() == [6.0] and rep.run([x])[0].tolist() == [6.0]
  refused(lambda: rep.run({"x": x, "b": np.array([1.0, 2.0], np.float32)}), "graph input 'b' is declared float32[1]")


def test_an_overridable_shape_setting_initializer_specialises_the_function():
  node = helper.make_node("TopK", ["x", "k"], ["v", "i"])
  k = helper.make_tensor("k", I64, [1], [1])
  model = model_of([node], [info("x", F32, [4]), info("k", I64, [1])], [info("v", F32, ["K"]), info("i", I64, ["K"])],
                   [k])  # fmt: skip
  rep = donnx.Backend.prepare(model)
  x = np.array([1.0, 4.0, 2.0, 3.0], np.float32)
  assert rep.static_inputs == ("k",)
  assert rep.run([x])[0].tolist() == [4.0]
  assert rep.run({"x": x, "k": np.array([3])})[0].tolist() == [4.0, 3.0, 2.0]


# ---- int64 without x64 ------------------------------------------------------------------------------------------


def test_int64_arithmetic_that_32_bits_could_get_wrong_is_refused_at_prepare_without_x64():
  """ReduceSum of [2e9, 2e9] gave -294967296 and Mul 100000 * 100000 gave 1410065408, both typed int64."""
  total = model_of([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0, name="sum")], [info("x", I64, [2])],
                   [info("y", I64, [])])  # fmt: skip
  square = model_of([helper.make_node("Mul", ["x", "x"], ["y"], name="square")], [info("x", I64, [1])],
                    [info("y", I64, [1])])  # fmt: skip
  fix = "jax.config.update('jax_enable_x64', True) before prepare"
  refused(lambda: donnx.Backend.prepare(total), "node 'sum' (ReduceSum): ReduceSum of int64 values can leave 32", fix)
  refused(lambda: donnx.Backend.prepare(square), "node 'square' (Mul): Mul of int64 values can leave 32 bits", fix)
  with jax.enable_x64(True):  # computed exactly
    assert donnx.Backend.run_model(total, [np.array([2 * 10**9, 2 * 10**9])])[0] == 4 * 10**9
    assert donnx.Backend.run_model(square, [np.array([100000])])[0].tolist() == [10**10]


def test_int64_values_that_only_move_run_in_32_bits_exactly_and_come_back_as_int64():
  nodes = [helper.make_node("ArgMax", ["x"], ["i"], axis=1, keepdims=0), helper.make_node("Gather", ["t", "i"], ["g"])]
  model = model_of(nodes, [info("x", F32, [3, 4]), info("t", I64, [4])], [info("g", I64, [3]), info("i", I64, [3])])
  x = np.array([[0, 3, 1, 2], [5, 0, 0, 0], [0, 0, 0, 9]], np.float32)
  t = np.array([-(2**31), 7, 2**31 - 1, 3], np.int64)
  g, i = donnx.Backend.run_model(model, [x, t])
  assert g.dtype == i.dtype == np.int64 and g.tolist() == [7, -(2**31), 3] and i.tolist() == [1, 0, 3]
  refused(lambda: donnx.Backend.run_model(model, [x, t + 2**40]), "graph input 't'", "beyond int32", "before prepare")


def test_a_float64_value_folded_into_a_shape_setting_input_needs_no_x64():
  """OneHot's depth may be a float64 tensor (ONNX truncates it): NumPy folds it, so no float64 is computed."""
  node = helper.make_node("OneHot", ["i", "depth", "values"], ["y"])
  consts = [helper.make_tensor("depth", TensorProto.DOUBLE, [], [3.0]), helper.make_tensor("values", F32, [2], [0, 1])]
  model = model_of([node], [info("i", I64, [2])], [info("y", F32, [2, 3])], consts)
  assert donnx.Backend.run_model(model, [np.array([2, 0])])[0].tolist() == [[0, 0, 1], [1, 0, 0]]


def test_a_model_prepared_with_x64_on_refuses_to_run_with_it_off():
  rep = donnx.Backend.prepare(_mean_model())
  with jax.enable_x64(True):
    refused(lambda: rep.function(X), "prepared with jax_enable_x64 off and now runs with it on: prepare it again")


# ---- the glue's ONNX semantics -------------------------------------------------------------------------------


def _cast_model(to, source=F32, saturate=None, opset=19):
  attrs = {"to": to} if saturate is None else {"to": to, "saturate": saturate}
  return model_of([helper.make_node("Cast", ["x"], ["y"], **attrs)], [info("x", source, [2])], [info("y", to, [2])],
                  opset=opset)  # fmt: skip


def test_cast_to_float8_saturates_as_onnx_says():
  x = np.array([1000.0, -1000.0], np.float32)
  got = donnx.Backend.run_model(_cast_model(TensorProto.FLOAT8E4M3FN), [x])[0]
  assert got.dtype == ml_dtypes.float8_e4m3fn and got.astype(np.float32).tolist() == [448.0, -448.0]
  kept = donnx.Backend.run_model(_cast_model(TensorProto.FLOAT8E4M3FN, saturate=0), [x])[0]
  assert np.isnan(kept.astype(np.float32)).all()
  want = ReferenceEvaluator(_cast_model(TensorProto.FLOAT8E5M2)).run(None, {"x": x})[0]
  np.testing.assert_array_equal(donnx.Backend.run_model(_cast_model(TensorProto.FLOAT8E5M2), [x])[0], want)


_EDGES = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 1e20, -1.5, -0.5, 0.5, 2.5, 255.9, 256.0, 1e-40, -0.0],
                  np.float32)  # fmt: skip


_TARGETS = "INT32 UINT8 INT8 INT4 UINT32 BOOL FLOAT16 BFLOAT16 FLOAT8E4M3FN FLOAT8E5M2FNUZ FLOAT8E8M0 FLOAT4E2M1 INT64"


@pytest.mark.parametrize("to", [getattr(TensorProto, t) for t in _TARGETS.split()], ids=_TARGETS.split())
def test_a_folded_cast_equals_the_cast_at_run_time(to):
  """The same values through Cast from a Constant (folded with NumPy where it sets a shape) and from an input."""
  from dmljax._src.onnx.nodes import cast

  target = np.dtype(helper.tensor_dtype_to_np_dtype(to))
  with jax.enable_x64(to == TensorProto.INT64):
    for saturate in (True, False):
      folded = cast(_EDGES, target, saturate=saturate)
      traced = np.asarray(jax.jit(lambda x, s=saturate: cast(x, target, saturate=s))(_EDGES))
      assert folded.dtype == target
      np.testing.assert_array_equal(folded.view(np.uint8), traced.astype(target).view(np.uint8))


@pytest.mark.parametrize("to", [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2])
@pytest.mark.parametrize("source", [np.float16, np.float32, np.float64])
def test_a_float_cast_to_a_4_or_2_bit_integer_is_the_installed_ml_dtypes_conversion(to, source):
  """ONNX leaves an out-of-range float-to-integer cast undefined and its reference takes ml_dtypes' conversion,
  which changed in ml_dtypes 0.7 (out of range: 0, where earlier releases wrapped): the backend's cast, in NumPy
  and under jit, has the bits of the installed ml_dtypes' ``astype`` on edges, values just out of range on
  either side, and random values from a fixed seed."""
  from dmljax._src.onnx.nodes import cast

  rng = np.random.default_rng(7)
  values = np.concatenate([
    _EDGES.astype(np.float64), np.arange(-20.0, 21.0) + 0.75, np.arange(-20.0, 21.0) - 0.25,
    [7.999, 8.0, -8.001, -9.0, 3.999, 4.0, 15.5, 16.0, -1e-3, 2.0**31, -(2.0**31) - 1e3, 2.0**40],
    rng.normal(scale=30.0, size=200),
  ])  # fmt: skip
  with jax.enable_x64(source == np.float64), np.errstate(over="ignore", invalid="ignore"):
    x = values.astype(source)
    want = x.astype(to)
    folded = cast(x, np.dtype(to))
    traced = np.asarray(jax.jit(lambda v: cast(v, np.dtype(to)))(x)).astype(to)
  for got in (folded, traced):
    assert got.dtype == np.dtype(to)
    mismatched = np.flatnonzero(got.view(np.uint8) != want.view(np.uint8))
    assert mismatched.size == 0, [(x[i], got[i], want[i]) for i in mismatched[:8]]


def test_a_cast_of_a_constant_equals_the_cast_of_an_input():
  """The issue's reproducer: the same values gave different results from a Constant (folded) and from an input."""
  edges = _EDGES[np.isfinite(_EDGES) | np.isnan(_EDGES)]
  nodes = [helper.make_node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(edges, "c"))]
  outputs = []
  for to in (I32, TensorProto.UINT8, TensorProto.BOOL, TensorProto.FLOAT8E4M3FN):
    name = TensorProto.DataType.Name(to)
    nodes += [
      helper.make_node("Cast", ["c"], [f"c_{name}"], to=to),
      helper.make_node("Cast", ["x"], [f"x_{name}"], to=to),
    ]
    outputs += [info(f"c_{name}", to, [len(edges)]), info(f"x_{name}", to, [len(edges)])]
  model = model_of(nodes, [info("x", F32, [len(edges)])], outputs, opset=19)
  got = donnx.Backend.run_model(model, [edges])
  for from_constant, from_input in zip(got[::2], got[1::2], strict=True):
    np.testing.assert_array_equal(from_constant.view(np.uint8), from_input.view(np.uint8))


def test_a_constant_folded_into_k_casts_as_an_input_would():
  """K from Cast(Constant 2.9) is 2 (truncation, as a run-time Cast of 2.9 gives)."""
  nodes = [
    helper.make_node("Constant", [], ["kf"], value_floats=[2.9]),
    helper.make_node("Cast", ["kf"], ["k"], to=I64),
    helper.make_node("TopK", ["x", "k"], ["v", "i"]),
    helper.make_node("Cast", ["x"], ["xi"], to=I32),
  ]
  model = model_of(nodes, [info("x", F32, [4])], [info("v", F32, [2]), info("xi", I32, [4])])
  x = np.array([2.9, 1.0, -2.9, 3.5], np.float32)
  v, xi = donnx.Backend.run_model(model, [x])
  assert v.tolist() == x[[3, 0]].tolist() and xi.tolist() == [2, 1, -2, 3]


@pytest.mark.parametrize(("op", "axes", "shape"), [("Squeeze", [2], [3, 1]), ("Squeeze", [-3], [3, 1]),
                                                   ("Unsqueeze", [3], [3, 1]), ("Unsqueeze", [-4], [3, 1]),
                                                   ("Squeeze", [0], [])])  # fmt: skip
def test_squeeze_and_unsqueeze_refuse_axes_out_of_range(op, axes, shape):
  """They wrapped (axes % rank), and Squeeze-11 axes=[0] on a scalar raised a bare ZeroDivisionError."""
  node = helper.make_node(op, ["x"], ["y"], axes=axes, name="sq")
  model = model_of([node], [info("x", F32, shape)], [info("y", F32, [3, 1, 1])], opset=11)
  error = refused(lambda: donnx.Backend.prepare(model), "node 'sq'", f"{op}")
  assert "ZeroDivisionError" not in str(error)


def _one_hot_model(values, depth=5, indices_shape=(3,), opset=11):
  node = helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=-1, name="hot")
  consts = [helper.make_tensor("depth", I64, [], [depth]),
            helper.make_tensor("values", F32, [len(values)], values)]  # fmt: skip
  out = [*indices_shape, depth]
  return model_of([node], [info("i", I64, list(indices_shape))], [info("y", F32, out)], consts, opset=opset)


def test_one_hot_values_must_hold_two_elements_and_indices_rank_one():
  refused(lambda: donnx.Backend.prepare(_one_hot_model([1.0])), "node 'hot' (OneHot): onnx.OneHot: values must have "
          "exactly two elements, [off_value, on_value]; got values.shape=(1,)")  # fmt: skip
  refused(lambda: donnx.Backend.prepare(_one_hot_model([0.0, 1.0], indices_shape=())), "node 'hot' (OneHot)",
          "indices must have rank 1 or more")  # fmt: skip
  with pytest.raises(dml.DescriptorError, match="values must have exactly two elements"):
    donnx.one_hot(jnp.array([1]), 3, jnp.array([1.0]))
  with pytest.raises(dml.DescriptorError, match="indices must have rank 1 or more"):
    donnx.one_hot(jnp.array(2), 5, jnp.array([0.0, 1.0]))


# ---- static rules at prepare, limits, and errors that name the node ---------------------------------------


def test_every_static_attribute_is_checked_at_prepare():
  node = helper.make_node("ArgMax", ["x"], ["y"], axis=7, name="pick")
  model = model_of([node], [info("x", F32, [2, 3, 4, 5])], [info("y", I64, [2, 3, 4, 5])])
  refused(lambda: donnx.Backend.prepare(model), "node 'pick' (ArgMax): argmax: axis must hold integers in [-4, 3]")
  node = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="route")
  zero = model_of([node], [info("x", F32, ["N", 4])], [info("v", F32, None), info("i", I64, None)],
                  [helper.make_tensor("k", I64, [1], [0])])  # fmt: skip
  refused(lambda: donnx.Backend.prepare(zero), "node 'route' (TopK): onnx.TopK: K must be an integer >= 1; got K=0")


def test_the_output_size_limit_is_checked_at_prepare_and_configurable():
  model = _one_hot_model([0.0, 1.0], depth=2**31 - 1, indices_shape=(1000,))
  refused(lambda: donnx.Backend.prepare(model), "more than the 2147483647", "max_elements=")
  small = _one_hot_model([0.0, 1.0], depth=50, indices_shape=(1000,))
  refused(lambda: donnx.Backend.prepare(small, max_elements=10_000), "50000 elements, more than the 10000")
  assert donnx.Backend.prepare(small).max_elements == donnx.DEFAULT_MAX_ELEMENTS == 2**31 - 1
  symbolic = _one_hot_model([0.0, 1.0], depth=2**40, indices_shape=("N",))  # unknown dimensions count as 1
  with jax.enable_x64(True):
    refused(lambda: donnx.Backend.prepare(symbolic), "1099511627776 elements, more than")
  big = [2**40, 8]
  huge = model_of([helper.make_node("Identity", ["x"], ["y"])], [info("x", F32, big)], [info("y", F32, big)])
  refused(lambda: donnx.Backend.prepare(huge), "graph input 'x' declares float32[1099511627776,8]")


def test_one_hot_depth_beyond_int32_names_the_node():
  """OneHot opset 9 with depth 2**31 raised a bare OverflowError."""
  error = refused(lambda: donnx.Backend.prepare(_one_hot_model([0.0, 1.0], depth=2**31, opset=9)), "node 'hot'")
  assert error.node == "hot" and error.op_type == "OneHot"


def test_a_deep_chain_into_k_prepares_without_recursion():
  """1200 Identity nodes feeding TopK's K raised RecursionError at prepare."""
  nodes = [helper.make_node("Identity", [f"k{i}"], [f"k{i + 1}"]) for i in range(1200)]
  nodes.append(helper.make_node("TopK", ["x", "k1200"], ["v", "i"]))
  model = model_of(nodes, [info("x", F32, [5])], [info("v", F32, [2]), info("i", I64, [2])],
                   [helper.make_tensor("k0", I64, [1], [2])])  # fmt: skip
  v, i = donnx.Backend.run_model(model, [np.array([1, 5, 2, 4, 3], np.float32)])
  assert v.tolist() == [5.0, 4.0] and i.tolist() == [1, 3]


def test_reduce_axes_of_the_wrong_shape_say_so():
  node = helper.make_node("ReduceSum", ["x", "axes"], ["y"])
  bad_axes = helper.make_tensor("axes", I64, [2, 0], [])
  model = model_of([node], [info("x", F32, [2, 3])], [info("y", F32, [1, 1])], [bad_axes], opset=13)
  refused(lambda: donnx.Backend.prepare(model), "node '#0' (ReduceSum): onnx.ReduceSum: axes must be a 1-D tensor")
  with pytest.raises(dml.DescriptorError, match=re.escape("axes must be a 1-D tensor of axes; got axes.shape=(2, 0)")):
    donnx.reduce_sum(jnp.ones((2, 3)), np.zeros((2, 0), np.int64))


RANK_0_AXES = ("axes must be a 1-D tensor", "An axes tensor must be a vector tensor", "input 1 (axes) of rank 0")


def _reduce_model(axes_source: str):
  """ReduceSum of x: float32[2, 3] over axes given as a rank-0 tensor: an initializer, a Constant node, or a graph
  input declared rank 0."""
  nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0, name="sum")]
  inputs, initializers = [info("x", F32, [2, 3])], []
  if axes_source == "initializer":
    initializers.append(helper.make_tensor("axes", I64, [], [1]))
  elif axes_source == "Constant":
    nodes.insert(0, helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("v", I64, [], [1])))
  else:
    inputs.append(info("axes", I64, []))
  return model_of(nodes, inputs, [info("y", F32, [2])], initializers)


@pytest.mark.parametrize("axes_source", ["initializer", "Constant", "graph input"])
def test_a_rank_0_axes_tensor_is_refused_at_prepare(axes_source):
  """ONNX's Reduce* take their axes input as a list (a 1-D tensor), and ONNX Runtime refuses a scalar ("An axes
  tensor must be a vector tensor"); dmljax reduced over it. prepare refuses it, naming the node, the input and the
  rule, however the scalar comes; the 1-D tensor [1] runs."""
  refused(lambda: donnx.Backend.prepare(_reduce_model(axes_source)), "node 'sum' (ReduceSum)", *RANK_0_AXES)
  vector = helper.make_tensor("axes", I64, [1], [1])
  node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
  model = model_of([node], [info("x", F32, [2, 3])], [info("y", F32, [2])], [vector])
  (y,) = donnx.Backend.run_model(model, [np.arange(6, dtype=np.float32).reshape(2, 3)])
  assert y.tolist() == [3.0, 12.0]


def test_a_rank_0_axes_computed_from_fed_inputs_is_refused():
  """Axes computed from graph inputs (Reshape of an int64[1] input): to the constant shape [] the axes' rank is known
  at prepare, which refuses it; to a shape that is itself fed (int64["n"]) it is known only at run, which refuses a
  rank-0 result by the same rule and runs a vector."""
  reduce = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0, name="sum")
  reshape = helper.make_node("Reshape", ["axes_in", "shape"], ["axes"])
  inputs = [info("x", F32, [2, 3]), info("axes_in", I64, [1])]
  constant = model_of([reshape, reduce], inputs, [info("y", F32, [2])], [helper.make_tensor("shape", I64, [0], [])])
  refused(lambda: donnx.Backend.prepare(constant), "node 'sum' (ReduceSum)", *RANK_0_AXES)
  fed = model_of([reshape, reduce], [*inputs, info("shape", I64, ["n"])], [info("y", F32, ["m"])])
  rep = donnx.Backend.prepare(fed)
  x, axes = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1], np.int64)
  refused(lambda: rep.run({"x": x, "axes_in": axes, "shape": np.zeros(0, np.int64)}), "node 'sum'", *RANK_0_AXES)
  assert rep.run({"x": x, "axes_in": axes, "shape": np.array([1], np.int64)})[0].tolist() == [3.0, 12.0]


def _squeeze_model(op_type, rank):
  """Squeeze of x: float32[2, 1] or Unsqueeze of x: float32[2, 3], axes 1 as a tensor of ``rank`` (0 or 1)."""
  node = helper.make_node(op_type, ["x", "axes"], ["y"], name="s")
  shape, out = ([2, 1], [2]) if op_type == "Squeeze" else ([2, 3], [2, 1, 3])
  axes = helper.make_tensor("axes", I64, [1] * rank, [1])
  return model_of([node], [info("x", F32, shape)], [info("y", F32, out)], [axes]), np.ones(shape, np.float32)


def test_squeeze_takes_its_axes_as_a_vector_and_unsqueeze_as_either():
  """ONNX Runtime refuses a rank-0 axes for Squeeze (as for the reductions) and takes one for Unsqueeze: so does
  dmljax."""
  model, _ = _squeeze_model("Squeeze", 0)
  refused(lambda: donnx.Backend.prepare(model), "node 's' (Squeeze)", *RANK_0_AXES)
  for op_type, rank, shape in (("Squeeze", 1, (2,)), ("Unsqueeze", 0, (2, 1, 3)), ("Unsqueeze", 1, (2, 1, 3))):
    model, x = _squeeze_model(op_type, rank)
    assert donnx.Backend.run_model(model, [x])[0].shape == shape, (op_type, rank)


def test_onnx_runtime_refuses_the_rank_0_axes_dmljax_refuses():
  """The rule is ONNX Runtime's: the same models fail in its session with the words dmljax quotes, and the Unsqueeze
  of a rank-0 axes runs there as in dmljax."""
  ort = peer("onnxruntime")

  def session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

  for model, x in ((_reduce_model("initializer"), np.ones((2, 3), np.float32)), _squeeze_model("Squeeze", 0)):
    with pytest.raises(Exception, match="An axes tensor must be a vector tensor"):
      session(model).run(None, {"x": x})
  model, x = _squeeze_model("Unsqueeze", 0)
  assert session(model).run(None, {"x": x})[0].shape == (2, 1, 3)


@pytest.mark.parametrize(
  ("call", "fragment"),
  [
    (lambda: donnx.top_k(jnp.arange(5.0), 2.7), "k must be a Python int (not a float)"),
    (lambda: donnx.top_k(jnp.arange(5.0), True), "got k=True"),
    (lambda: donnx.top_k(jnp.arange(5.0), np.array([2.0])), "k must be a Python int (not a float)"),
    (lambda: donnx.argmax(jnp.ones((2, 3)), axis=1.0), "axis must be a Python int (not a float)"),
    (lambda: donnx.gather_nd(jnp.ones((2, 3)), jnp.zeros((2, 1), jnp.int32), batch_dims=1.7), "batch_dims must be a"),
    (lambda: donnx.reduce_sum(jnp.ones((2, 3)), [1.0]), "axis must be a Python int (not a float)"),
  ],
  ids=["k=2.7", "k=True", "K=[2.0]", "axis=1.0", "batch_dims=1.7", "axes=[1.0]"],
)
def test_the_onnx_functions_refuse_what_core_dmljax_refuses(call, fragment):
  with pytest.raises(dml.DescriptorError, match=re.escape(fragment)):
    call()


def test_an_unexpected_exception_in_a_node_is_a_model_error_naming_it(monkeypatch):
  """Whatever an operator raises on a node's inputs comes back as a ModelError naming the node, with its cause."""
  from dmljax._src.onnx import nodes

  def broken(node, args):
    return [1 // 0]

  monkeypatch.setitem(nodes.HANDLERS, "Neg", broken)
  model = model_of([helper.make_node("Neg", ["x"], ["y"], name="negate")], [info("x", F32, [2])], [info("y", F32, [2])])
  error = refused(lambda: donnx.Backend.prepare(model), "node 'negate' (Neg): ZeroDivisionError: integer division")
  assert isinstance(error.__cause__, ZeroDivisionError) and error.node == "negate"


# ---- issue 22 -------------------------------------------------------------------------------------------------


def _gather_by_int64():
  node = helper.make_node("Gather", ["data", "idx"], ["y"], axis=0)
  return model_of([node], [info("data", F32, [4]), info("idx", I64, [2])], [info("y", F32, [2])])


def test_the_graph_function_refuses_an_int64_feed_beyond_int32_as_run_does():
  if jax.config.read("jax_enable_x64"):
    pytest.skip("x64 on: int64 is computed as such")
  rep = donnx.Backend.prepare(_gather_by_int64())
  data, idx = np.arange(4, dtype=np.float32), np.array([2**32 + 1, 1], np.int64)
  by_run = refused(lambda: rep.run([data, idx]), "beyond int32")
  by_function = refused(lambda: rep.function(data, idx), "beyond int32")
  assert str(by_function) == str(by_run)
  refused(lambda: rep.function.lower(data, idx), "beyond int32")
  # Values that fit still run, and a JAX array (already 32-bit) is taken as it is.
  assert rep.function(data, np.array([3, -1], np.int64))[0].tolist() == [3.0, 3.0]
  assert rep.function(data, jnp.array([3, 1], jnp.int32))[0].tolist() == [3.0, 1.0]


def test_the_graph_function_with_a_shape_setting_input_refuses_an_int64_feed_beyond_int32():
  if jax.config.read("jax_enable_x64"):
    pytest.skip("x64 on: int64 is computed as such")
  gather = helper.make_node("Gather", ["data", "idx"], ["g"], axis=0)
  top = helper.make_node("TopK", ["g", "k"], ["v", "i"])
  inputs = [info("data", F32, [4]), info("idx", I64, [3]), info("k", I64, [1])]
  rep = donnx.Backend.prepare(model_of([gather, top], inputs, [info("v", F32, None), info("i", I64, None)]))
  data, k = np.arange(4, dtype=np.float32), np.array([2], np.int64)
  refused(lambda: rep.function(data, np.array([2**40, 1, 0], np.int64), k), "beyond int32")
  assert rep.function(data, np.array([3, 1, 0], np.int64), k)[0].tolist() == [3.0, 1.0]


@pytest.mark.parametrize("rank", [64, 65])
def test_values_of_rank_beyond_64_are_refused_at_prepare(rank):
  """NumPy holds at most 64 dimensions: a model whose value has more cannot return it, so prepare refuses it."""
  axes = helper.make_tensor("axes", I64, [rank - 1], list(range(1, rank)))
  node = helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="up")
  model = model_of([node], [info("x", F32, [1])], [helper.make_tensor_value_info("y", F32, None)], [axes])
  if rank == 64:
    assert donnx.Backend.prepare(model).run([np.ones(1, np.float32)])[0].shape == (1,) * 64
  else:
    refused(lambda: donnx.Backend.prepare(model), "'up'", "rank 65", "at most 64")


def test_a_graph_input_declared_beyond_rank_64_is_refused_at_prepare():
  node = helper.make_node("Identity", ["x"], ["y"])
  shape = [1] * 65
  model = helper.make_model(
    helper.make_graph([node], "g", [info("x", F32, shape)], [info("y", F32, shape)]),
    opset_imports=[helper.make_opsetid("", 18)],
  )
  refused(lambda: donnx.Backend.prepare(model), "graph input 'x'", "rank 65", "at most 64")


@pytest.mark.parametrize("value", [np.array([None], object), np.array(None, object), np.array([2], object)])
def test_a_k_of_python_objects_is_a_descriptor_error(value):
  with pytest.raises(dml.DescriptorError, match=re.escape("K must be a tensor of integers")):
    donnx.top_k(jnp.arange(5.0), value)


def test_axes_and_depth_of_python_objects_are_descriptor_errors():
  with pytest.raises(dml.DescriptorError, match=re.escape("axes must be a tensor of integers")):
    donnx.reduce_sum(jnp.ones((2, 3)), np.array([None], object))
  with pytest.raises(dml.DescriptorError, match=re.escape("depth must be a tensor of integers")):
    donnx.one_hot(jnp.array([0, 1]), np.array([None], object), jnp.array([0.0, 1.0]))
