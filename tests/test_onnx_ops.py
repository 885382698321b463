"""dmljax.onnx: the ONNX-semantics functions, the backend's opset variants, its errors, its x64 policy, and
that its jitted function is the XLA program of the dmljax calls written by hand."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import peer

import dmljax as dml
import dmljax.onnx as donnx

onnx = peer("onnx")
TensorProto, helper = onnx.TensorProto, onnx.helper
ReferenceEvaluator = peer("onnx.reference").ReferenceEvaluator

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def model_of(nodes, inputs, outputs, initializers=(), opset=18):
  graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
  return onnx.shape_inference.infer_shapes(model)  # fills the outputs' shapes, which the checker needs


def info(name, elem_type, shape):
  return helper.make_tensor_value_info(name, elem_type, shape)


def agree_with_reference(model, feeds, *, exact=True):
  """The backend's outputs equal ONNX's reference evaluator's (dtype included)."""
  want = ReferenceEvaluator(model).run(None, feeds)
  got = donnx.Backend.run_model(model, [feeds[i.name] for i in model.graph.input])
  assert len(got) == len(want)
  for g, w in zip(got, want, strict=True):
    assert g.dtype == w.dtype and g.shape == w.shape
    if exact:
      np.testing.assert_array_equal(g, w)
    else:
      np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# ---- the functions -----------------------------------------------------------------------------------


def test_top_k_keeps_ascending_index_order_on_ties_in_both_directions():
  x = jnp.array([[3.0, 1.0, 3.0, 1.0, 2.0, 3.0]])
  values, indices = donnx.top_k(x, 3, axis=1, largest=True)
  assert values.tolist() == [[3.0, 3.0, 3.0]] and indices.tolist() == [[0, 2, 5]]
  values, indices = donnx.top_k(x, 2, axis=-1, largest=False)
  assert values.tolist() == [[1.0, 1.0]] and indices.tolist() == [[1, 3]]
  assert indices.dtype == donnx.index_dtype() == np.int32


def test_top_k_takes_k_as_a_one_element_array_and_refuses_a_traced_one():
  x = jnp.arange(5.0)
  assert donnx.top_k(x, np.array([2], np.int64))[1].tolist() == [4, 3]
  with pytest.raises(dml.DescriptorError, match="k must be a static Python int, because it sets the output's shape"):
    jax.jit(lambda k: donnx.top_k(x, k))(2)


def test_arg_extremes_select_last_index_and_keepdims():
  x = jnp.array([[2.0, 5.0, 5.0], [1.0, 1.0, 0.0]])
  assert donnx.argmax(x, axis=1).tolist() == [[1], [0]]
  assert donnx.argmax(x, axis=1, select_last_index=True, keepdims=False).tolist() == [2, 1]
  assert donnx.argmin(x, axis=-1, keepdims=False).tolist() == [0, 2]
  assert donnx.argmin(x).shape == (1, 3)  # ONNX's default axis is 0, keepdims 1.


def test_gather_nd_batch_dims_and_negative_indices():
  rng = np.random.default_rng(0)
  data = rng.normal(size=(2, 3, 4)).astype(np.float32)
  indices = np.array([[[2, -1]], [[0, 1]]], np.int32)
  got = donnx.gather_nd(data, indices, batch_dims=1)
  np.testing.assert_array_equal(got, np.stack([data[0, 2, 3], data[1, 0, 1]])[:, None])


REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
              "ReduceLogSumExp", "ReduceSumSquare"]  # fmt: skip


@pytest.mark.parametrize("operator", REDUCTIONS)
def test_reductions_match_onnx_reference_with_axes_keepdims_and_noop(operator):
  rng = np.random.default_rng(1)
  data = rng.uniform(0.5, 2.0, size=(3, 4, 5)).astype(np.float32)
  cases = [([0, 2], 1, 0), ([-1], 0, 0), ([], 1, 0), ([], 0, 1)]
  for axes, keepdims, noop in cases:
    node = helper.make_node(operator, ["x", "axes"], ["y"], keepdims=keepdims, noop_with_empty_axes=noop)
    model = model_of(
      [node], [info("x", F32, data.shape)], [info("y", F32, None)], [helper.make_tensor("axes", I64, [len(axes)], axes)]
    )
    agree_with_reference(model, {"x": data}, exact=False)


def test_named_reductions_are_the_generic_one():
  x = jnp.arange(1.0, 7.0).reshape(2, 3)
  assert donnx.reduce_sum_square(x, [1], keepdims=False).tolist() == [14.0, 77.0]
  assert donnx.reduce_prod(x).tolist() == [[720.0]]
  assert donnx.reduce_mean(x, [0], noop_with_empty_axes=True).tolist() == [[2.5, 3.5, 4.5]]
  assert donnx.reduce_l1(-x, [], noop_with_empty_axes=True).tolist() == x.tolist()  # elementwise |x|
  assert donnx.reduce_log_sum(jnp.float32(np.e)).tolist() == pytest.approx(1.0)  # a scalar
  assert donnx.reduce_max.__name__ == "reduce_max" and donnx.reduce_mean.__name__ == "reduce_mean"


def test_one_hot_inserts_the_axis_and_leaves_out_of_range_rows_off():
  indices = jnp.array([[0, 9], [-1, -10]])
  got = donnx.one_hot(indices, np.float32(3.7), jnp.array([-1.0, 5.0]), axis=1)  # depth truncates to 3
  assert got.shape == (2, 3, 2)
  expected = np.full((2, 3, 2), -1.0, np.float32)
  expected[0, 0, 0] = 5.0  # 0 -> position 0; 9 is out of range: all off
  expected[1, 2, 0] = 5.0  # -1 -> the last position; -10 is out of range: all off
  np.testing.assert_array_equal(got, expected)
  floats = donnx.one_hot(jnp.array([1.9, -0.5]), 2, jnp.array([0, 1], jnp.int32))  # truncated: 1 and 0
  assert floats.tolist() == [[0, 1], [1, 0]] and floats.dtype == jnp.int32
  with pytest.raises(dml.DescriptorError, match="axis must be an integer in"):
    donnx.one_hot(indices, 3, jnp.array([0.0, 1.0]), axis=3)


def test_functions_compose_with_grad_and_vmap():
  rng = np.random.default_rng(2)
  x = jnp.asarray(rng.normal(size=(4, 6)).astype(np.float32))

  def loss(x):
    values, _ = donnx.top_k(x, 2, axis=1)
    return jnp.sum(donnx.reduce_log_sum_exp(values, [1], keepdims=False))

  got = jax.grad(loss)(x)
  top, _ = jax.lax.top_k(x, 2)
  want = jax.grad(lambda x: jnp.sum(jax.nn.logsumexp(jax.lax.top_k(x, 2)[0], axis=1)))(x)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  batched = jax.vmap(lambda row: donnx.argmax(row, axis=0, keepdims=False))(x)
  np.testing.assert_array_equal(batched, np.argmax(np.asarray(x), axis=1))
  assert top.shape == (4, 2)


# ---- the backend: opset variants -----------------------------------------------------------------------


def test_top_k_opsets_1_10_and_11():
  rng = np.random.default_rng(3)
  x = rng.permutation(24).reshape(4, 6).astype(np.float32)
  outs = [info("v", F32, None), info("i", I64, None)]
  k = [helper.make_tensor("k", I64, [1], [3])]
  v1 = model_of([helper.make_node("TopK", ["x"], ["v", "i"], k=3, axis=0)], [info("x", F32, [4, 6])], outs, opset=1)
  v10 = model_of([helper.make_node("TopK", ["x", "k"], ["v", "i"])], [info("x", F32, [4, 6])], outs, k, opset=10)
  v11 = model_of(
    [helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=0, axis=-2)], [info("x", F32, [4, 6])], outs, k, opset=11
  )
  for model in (v1, v10, v11):
    agree_with_reference(model, {"x": x})


def test_reductions_with_axes_as_attribute_before_opset_13_and_18():
  rng = np.random.default_rng(4)
  x = rng.normal(size=(2, 3, 4)).astype(np.float32)
  for operator, opset in (("ReduceSum", 11), ("ReduceLogSumExp", 13), ("ReduceMax", 13)):
    node = helper.make_node(operator, ["x"], ["y"], axes=[0, -1], keepdims=0)
    agree_with_reference(model_of([node], [info("x", F32, x.shape)], [info("y", F32, None)], opset=opset), {"x": x},
                         exact=False)  # fmt: skip


def test_one_hot_before_opset_11_leaves_negative_indices_off():
  indices = np.array([0, -1, 2, 5], np.int64)
  node = helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=-1)
  consts = [helper.make_tensor("depth", I64, [], [3]), helper.make_tensor("values", F32, [2], [0.0, 1.0])]
  model9 = model_of([node], [info("i", I64, [4])], [info("y", F32, None)], consts, opset=9)
  got = donnx.Backend.run_model(model9, [indices])[0]
  np.testing.assert_array_equal(got, [[1, 0, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0]])
  model11 = model_of([node], [info("i", I64, [4])], [info("y", F32, None)], consts, opset=11)
  assert donnx.Backend.run_model(model11, [indices])[0][1].tolist() == [0, 0, 1]


def test_glue_nodes_and_constants_feeding_static_inputs():
  """K from a Constant through Cast and Reshape; axes from a Constant through Squeeze; Unsqueeze and arithmetic."""
  rng = np.random.default_rng(5)
  x = rng.normal(size=(3, 5)).astype(np.float32)
  nodes = [
    helper.make_node("Constant", [], ["k_float"], value_floats=[2.0]),
    helper.make_node("Cast", ["k_float"], ["k_int"], to=I64),
    helper.make_node("Reshape", ["k_int", "one"], ["k"]),
    helper.make_node("Constant", [], ["axes_2d"], value=helper.make_tensor("a", I64, [1, 1], [1])),
    helper.make_node("Squeeze", ["axes_2d", "zero"], ["axes"]),
    helper.make_node("TopK", ["x", "k"], ["v", "i"]),
    helper.make_node("Neg", ["v"], ["nv"]),
    helper.make_node("Abs", ["nv"], ["av"]),
    helper.make_node("Sqrt", ["av"], ["sv"]),
    helper.make_node("Div", ["sv", "two"], ["dv"]),
    helper.make_node("Add", ["dv", "dv"], ["ev"]),
    helper.make_node("Sub", ["ev", "dv"], ["fv"]),
    helper.make_node("ReduceSum", ["fv", "axes"], ["s"], keepdims=1),
    helper.make_node("Unsqueeze", ["s", "zero"], ["u"]),
    helper.make_node("Identity", ["u"], ["out"]),
  ]
  consts = [
    helper.make_tensor("one", I64, [1], [1]),
    helper.make_tensor("zero", I64, [1], [0]),
    helper.make_tensor("two", F32, [], [2.0]),
  ]
  model = model_of(nodes, [info("x", F32, [3, 5])], [info("out", F32, [1, 3, 1]), info("i", I64, [3, 2])], consts)
  rep = donnx.Backend.prepare(model)
  assert rep.static_inputs == ()
  agree_with_reference(model, {"x": x}, exact=False)


def test_run_node_and_supports_device():
  node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0, select_last_index=1)
  (got,) = donnx.Backend.run_node(node, [np.array([[1.0, 3.0, 3.0]], np.float32)])
  assert got.tolist() == [2] and got.dtype == np.int64  # ONNX's declared type, from shape inference
  assert donnx.supports_device("CPU")
  assert donnx.supports_device("CUDA") == any(d.platform == "gpu" for d in jax.devices())


# ---- the backend: errors ---------------------------------------------------------------------------------


def test_an_unsupported_node_is_named_with_its_op_type():
  nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="route"), helper.make_node("Softmax", ["v"], ["p"])]
  model = model_of(nodes, [info("x", F32, [2, 4])], [info("p", F32, None)], [helper.make_tensor("k", I64, [1], [2])])
  with pytest.raises(donnx.ModelError, match=r"node '#1' \(Softmax\): op type Softmax .* not supported") as error:
    donnx.Backend.prepare(model)
  assert error.value.node == "#1" and error.value.op_type == "Softmax"


def test_a_shape_setting_input_computed_at_run_time_is_refused_at_prepare():
  nodes = [
    helper.make_node("ArgMax", ["x"], ["amax"], axis=1, keepdims=0, name="pick"),
    helper.make_node("ReduceMax", ["amax"], ["kmax"], keepdims=1, name="kmax"),
    helper.make_node("Add", ["kmax", "one"], ["k"], name="plus_one"),
    helper.make_node("TopK", ["x", "k"], ["v", "i"], name="route"),
  ]
  model = model_of(nodes, [info("x", F32, [2, 4])], [info("v", F32, None)], [helper.make_tensor("one", I64, [1], [1])])
  pattern = (
    r"node 'route' \(TopK\): input 1 \(K, 'k'\) must be known when the function is traced.*node 'plus_one' \(Add\)"
  )
  with pytest.raises(donnx.ModelError, match=pattern):
    donnx.Backend.prepare(model)


def test_a_graph_input_that_sets_a_shape_is_static_and_refuses_a_tracer():
  node = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="route")
  model = model_of([node], [info("x", F32, [2, 4]), info("k", I64, [1])], [info("v", F32, None), info("i", I64, None)])
  rep = donnx.Backend.prepare(model)
  assert rep.static_inputs == ("k",)
  x = np.arange(8, dtype=np.float32).reshape(2, 4)
  assert rep.run([x, np.array([3])])[1].tolist() == [[3, 2, 1], [3, 2, 1]]
  assert rep.run([x, np.array([1])])[0].tolist() == [[3.0], [7.0]]  # specialised on the value
  with pytest.raises(donnx.ModelError, match=r"graph input 'k' feeds node 'route' \(TopK\) input 1 \(K\)"):
    jax.jit(rep.function)(x, np.array([2]))


def test_operator_errors_are_reported_with_the_node():
  node = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="route")
  model = model_of([node], [info("x", F32, [2, 4])], [info("v", F32, [2, 9])], [helper.make_tensor("k", I64, [1], [9])])
  with pytest.raises(donnx.ModelError, match=r"node 'route' \(TopK\): top_k: k must satisfy"):
    donnx.Backend.run_model(model, [np.zeros((2, 4), np.float32)])


def test_without_x64_int64_is_checked_and_float64_refused():
  node = helper.make_node("GatherND", ["x", "i"], ["y"], name="gather")
  model = model_of([node], [info("x", F32, [4]), info("i", I64, [2, 1])], [info("y", F32, None)])
  x = np.arange(4, dtype=np.float32)
  assert donnx.Backend.run_model(model, [x, np.array([[3], [-4]], np.int64)])[0].tolist() == [3.0, 0.0]
  declared = r"graph input 'i' is declared int64\[2,1\]; got int64\[2,1\]: int64 values in"
  with pytest.raises(donnx.ModelError, match=declared):
    donnx.Backend.run_model(model, [x, np.array([[2**40], [0]], np.int64)])
  with jax.enable_x64(True):  # with x64 the same index is exact, and out of range: clamped (dmljax's policy)
    assert donnx.Backend.run_model(model, [x, np.array([[2**40], [0]], np.int64)])[0].tolist() == [3.0, 0.0]
  double = model_of([helper.make_node("ReduceSum", ["x"], ["y"])], [info("x", TensorProto.DOUBLE, [3])],
                    [info("y", TensorProto.DOUBLE, None)])  # fmt: skip
  with pytest.raises(donnx.ModelError, match="value 'x' is float64, which dmljax computes only with jax_enable_x64"):
    donnx.Backend.run_model(double, [np.ones(3)])
  with jax.enable_x64(True):
    assert donnx.Backend.run_model(double, [np.ones(3)])[0].dtype == np.float64


# ---- the backend under jit and grad, and its XLA program ---------------------------------------------------


def routing_model():
  nodes = [
    helper.make_node("TopK", ["x", "k"], ["v", "i"]),
    helper.make_node("ReduceLogSumExp", ["v", "axes"], ["lse"], keepdims=0),
    helper.make_node("Unsqueeze", ["i", "axes"], ["idx"]),
    helper.make_node("GatherND", ["table", "idx"], ["picked"]),
    helper.make_node("ReduceSum", ["picked", "axes"], ["total"], keepdims=0),
  ]
  consts = [helper.make_tensor("k", I64, [1], [3]), helper.make_tensor("axes", I64, [1], [-1])]
  inputs = [info("x", F32, [8, 16]), info("table", F32, [16, 5])]
  return model_of(nodes, inputs, [info("lse", F32, None), info("total", F32, None)], consts)


def direct(x, table):
  v, i = dml.top_k(x, 3, axis=-1, direction="decreasing", index_dtype=jnp.int32)
  lse = dml.reduce(v, dml.ReduceFunction.LOG_SUM_EXP, (-1,), keepdims=False, index_dtype=jnp.int32)
  picked = dml.gather_nd(table, jnp.expand_dims(i, -1), batch_dims=0)
  total = dml.reduce(picked, dml.ReduceFunction.SUM, (-1,), keepdims=False, index_dtype=jnp.int32)
  return lse, total


def normalized_hlo(text):
  text = text.split("\nFileNames")[0]  # the source locations that follow differ by construction
  text = re.sub(r", metadata=\{[^}]*\}", "", text)
  text = re.sub(r"HloModule \S+", "HloModule m", text)
  names = {}
  return re.sub(r"%[\w.\-]+", lambda m: names.setdefault(m.group(0), f"%v{len(names)}"), text)


def test_the_jitted_graph_is_the_xla_program_of_direct_dmljax_calls():
  rng = np.random.default_rng(6)
  x = rng.normal(size=(8, 16)).astype(np.float32)
  table = rng.normal(size=(16, 5)).astype(np.float32)
  rep = donnx.Backend.prepare(routing_model())
  backend_hlo = rep.lower(x, table).compile().as_text()
  direct_hlo = jax.jit(direct).lower(x, table).compile().as_text()
  assert normalized_hlo(backend_hlo) == normalized_hlo(direct_hlo)
  for got, want in zip(rep.run([x, table]), direct(x, table), strict=True):
    np.testing.assert_array_equal(got, want)


def test_the_graph_function_composes_with_jit_grad_and_vmap():
  rng = np.random.default_rng(7)
  x = rng.normal(size=(8, 16)).astype(np.float32)
  table = rng.normal(size=(16, 5)).astype(np.float32)
  rep = donnx.Backend.prepare(routing_model())

  def loss(function, x, table):
    lse, total = function(x, table)
    return jnp.sum(lse) + jnp.sum(total**2)

  got = jax.jit(jax.grad(lambda *a: loss(rep.function, *a), argnums=(0, 1)))(x, table)
  want = jax.grad(lambda *a: loss(direct, *a), argnums=(0, 1))(x, table)
  for g, w in zip(got, want, strict=True):
    np.testing.assert_allclose(g, w, rtol=1e-6)
  assert float(jnp.abs(got[0]).sum()) > 0 and float(jnp.abs(got[1]).sum()) > 0
  batched = jax.vmap(rep.function, in_axes=(0, None))(np.stack([x, -x]), table)
  np.testing.assert_array_equal(batched[0][1], rep.run([-x, table])[0])


def test_checker_runs_on_prepare():
  graph = helper.make_graph(
    [helper.make_node("TopK", ["x"], ["v", "i"])], "g", [info("x", F32, [3])], [info("v", F32, [1])]
  )
  bad = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])  # TopK-11 needs its K input
  with pytest.raises(donnx.ModelError, match=r"ONNX's checker refuses the model: .*TopK:11\) has input size") as error:
    donnx.Backend.prepare(bad)
  assert isinstance(error.value.__cause__, onnx.checker.ValidationError)


def test_a_model_exported_from_pytorch_matches_torch_values_and_gradients():
  torch = pytest.importorskip("torch")
  import io
  import warnings

  class Routing(torch.nn.Module):
    def forward(self, x, table):
      values, indices = torch.topk(x, 3, dim=-1)
      lse = torch.logsumexp(values, dim=-1)
      picked = table[indices]
      energy = (picked * picked).sum(dim=-1)
      load = torch.nn.functional.one_hot(torch.argmax(x, dim=-1), 8).float().amax(dim=0)
      return lse, energy, torch.argmin(x, dim=0, keepdim=True), load

  rng = np.random.default_rng(8)
  x = rng.normal(size=(6, 8)).astype(np.float32)
  table = rng.normal(size=(8, 5)).astype(np.float32)
  buffer = io.BytesIO()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
    torch.onnx.export(Routing(), (torch.from_numpy(x), torch.from_numpy(table)), buffer, dynamo=False, opset_version=18)
  model = onnx.load_from_string(buffer.getvalue())
  assert {"TopK", "ReduceLogSumExp", "Gather", "ArgMin", "OneHot", "ReduceMax"} <= {n.op_type for n in model.graph.node}
  rep = donnx.Backend.prepare(model)
  xt, tt = torch.from_numpy(x).requires_grad_(), torch.from_numpy(table).requires_grad_()
  expected = Routing()(xt, tt)
  for got, want in zip(rep.run([x, table]), expected, strict=True):
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-6, atol=1e-6)
    assert got.dtype == want.detach().numpy().dtype

  (expected[0].sum() + (expected[1] ** 2).sum()).backward()
  grads = jax.grad(lambda a, b: (lambda o: o[0].sum() + (o[1] ** 2).sum())(rep.function(a, b)), argnums=(0, 1))(
    x, table
  )
  np.testing.assert_allclose(grads[0], xt.grad.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(grads[1], tt.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis_type", ["explicit", "auto"])
def test_the_graph_function_runs_sharded_along_the_top_k_axis(axis_type):
  from jax.sharding import AxisType, NamedSharding, PartitionSpec

  types = (AxisType.Explicit,) if axis_type == "explicit" else (AxisType.Auto,)
  mesh = jax.make_mesh((8,), ("d",), axis_types=types)
  rng = np.random.default_rng(9)
  x = rng.normal(size=(8, 16)).astype(np.float32)
  table = rng.normal(size=(16, 5)).astype(np.float32)
  rep = donnx.Backend.prepare(routing_model())
  sharded = jax.device_put(x, NamedSharding(mesh, PartitionSpec(None, "d")))
  with jax.set_mesh(mesh):
    got = jax.jit(rep.function)(sharded, table)
  for g, w in zip(got, rep.run([x, table]), strict=True):
    np.testing.assert_array_equal(np.asarray(g), w)


def test_is_compatible_and_the_plain_graph_function_is_a_jit_object():
  rep = donnx.Backend.prepare(routing_model())
  assert hasattr(rep.function, "lower") and rep.static_inputs == ()
  assert donnx.Backend.is_compatible(routing_model())
  softmax = model_of([helper.make_node("Softmax", ["x"], ["y"])], [info("x", F32, [2])], [info("y", F32, [2])])
  assert not donnx.Backend.is_compatible(softmax)
  with pytest.raises(donnx.ModelError, match=r"takes the inputs \['x', 'table'\] \(in this order\); got 1"):
    rep.function(np.zeros((8, 16), np.float32))
