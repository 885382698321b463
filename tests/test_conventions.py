"""The functional path follows JAX's conventions; the descriptor path keeps DirectML's (issue 12, point 1).

Each convention is checked on both paths: the functional call against its JAX counterpart (``jnp.argmax``,
``jnp.sum``, ``jax.nn.one_hot``, ``jax.lax.top_k``) and the NumPy reference, and the descriptor call against
DirectML's layout (reduced axes kept with size 1, UINT32 indices, ONE_HOT's size-1 axis and values tensor).
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest
from _helpers import x64
from reference import ref_arg_reduce, ref_one_hot, ref_reduce, ref_top_k

import dmljax as dml

F32, U32 = dml.DataType.FLOAT32, dml.DataType.UINT32


def _logits(seed: int, shape: tuple[int, ...]) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_accuracy_of_a_perfect_classifier_is_one() -> None:
  """The bug report: ``(argmax(logits, 1) == labels).mean()`` gave 0.2 when argmax kept its axis."""
  labels = np.arange(5) % 3
  logits = np.eye(3, dtype=np.float32)[labels]
  predicted = dml.argmax(logits, 1)
  assert predicted.shape == (5,)
  assert float((predicted == jnp.asarray(labels, jnp.int32)).mean()) == 1.0


@pytest.mark.parametrize("wide", [False, True], ids=["x64_off", "x64_on"])
def test_index_outputs_default_to_the_replaced_calls_types(wide: bool) -> None:
  """argmin/argmax (and REDUCE's ARGMAX/ARGMIN): JAX's default integer, int64 under x64, as jnp.argmax;
  top_k: int32 whatever x64 says, as jax.lax.top_k."""
  with x64() if wide else contextlib.nullcontext():
    x = _logits(0, (4, 6))
    default = np.dtype(np.int64 if wide else np.int32)
    assert dml.argmax(x, 1).dtype == jnp.argmax(x, 1).dtype == default
    assert dml.argmin(x).dtype == jnp.argmin(x).dtype == default
    assert dml.reduce(x, "argmax", 0).dtype == default
    assert dml.top_k(x, 2)[1].dtype == jax.lax.top_k(x, 2)[1].dtype == np.dtype(np.int32)
    # Index arithmetic behaves as with jnp: no uint32 wrap-around to 4294967295.
    assert int(dml.argmax(np.float32([5.0, 1.0])) - 1) == -1
    assert dml.argmax(x, 1, index_dtype=jnp.int32).dtype == np.int32  # DirectML's and x32's type, by keyword


@pytest.mark.parametrize("index_dtype", [jnp.int32, jnp.uint32])
def test_index_dtype_still_selects_any_index_type(index_dtype: type) -> None:
  x = _logits(1, (3, 5))
  assert dml.argmin(x, 1, index_dtype=index_dtype).dtype == index_dtype
  assert dml.top_k(x, 2, index_dtype=index_dtype)[1].dtype == index_dtype
  assert dml.reduce(x, "argmin", 1, index_dtype=index_dtype).dtype == index_dtype


@pytest.mark.sample(0)  # every value of each parameter once by default; the whole product with -m long
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (2, 0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_keepdims_follows_jnp(axis: int | tuple[int, ...] | None, keepdims: bool) -> None:
  x = _logits(2, (3, 4, 5))
  for name, jnp_function in (("sum", jnp.sum), ("max", jnp.max), ("mean", jnp.mean)):
    got = dml.reduce(x, name, axis, keepdims=keepdims)
    want = jnp_function(x, axis=axis, keepdims=keepdims)
    assert got.shape == want.shape, (name, axis, keepdims)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  reduced = tuple(range(3)) if axis is None else tuple(sorted(a % 3 for a in np.atleast_1d(axis)))
  want_index = ref_arg_reduce(x, reduced, "max", "increasing")
  got_index = dml.argmax(x, axis, keepdims=keepdims)
  assert got_index.shape == (want_index.shape if keepdims else jnp.sum(x, axis=axis).shape)
  np.testing.assert_array_equal(np.asarray(got_index).reshape(-1), want_index.reshape(-1))


def test_keepdims_defaults_match_jnp_on_single_axes() -> None:
  x = _logits(3, (6, 7))
  np.testing.assert_array_equal(dml.argmax(x, 0), jnp.argmax(x, 0))
  np.testing.assert_array_equal(dml.argmin(x, -1), jnp.argmin(x, -1))
  assert dml.argmax(x).shape == jnp.argmax(x).shape == ()
  assert dml.reduce(x, "sum").shape == jnp.sum(x).shape == ()


def test_descriptor_path_keeps_directml_layout_and_uint32() -> None:
  x = _logits(4, (3, 4))
  argmax = dml.execute(dml.ArgMaxDesc.from_inputs(dml.TensorDesc(F32, (3, 4)), axes=(1,)), x)
  assert argmax.shape == (3, 1) and argmax.dtype == jnp.uint32
  np.testing.assert_array_equal(argmax, ref_arg_reduce(x, (1,), "max", "increasing"))
  total = dml.execute(dml.ReduceDesc.from_inputs("sum", dml.TensorDesc(F32, (3, 4)), axes=(0,)), x)
  assert total.shape == (1, 4)
  np.testing.assert_allclose(total, ref_reduce(x, "sum", (0,)), rtol=1e-6)
  values, indices = dml.execute(dml.TopK1Desc.from_inputs(dml.TensorDesc(F32, (3, 4)), axis=1, k=2), x)
  want_values, want_indices = ref_top_k(x, 2, 1, "decreasing")
  assert indices.dtype == jnp.uint32
  np.testing.assert_array_equal(values, want_values)
  np.testing.assert_array_equal(indices, want_indices)


# --------------------------------------------------------------------------------------------------------- one_hot
def _functional_one_hot_reference(indices: np.ndarray, depth: int, axis: int, off: float, on: float, dtype: type):
  """``jax.nn.one_hot``'s layout through the DirectML-layout reference: insert the size-1 axis first."""
  axis = axis % (indices.ndim + 1)
  return ref_one_hot(np.expand_dims(indices, axis), np.array([off, on], dtype), depth, axis)


@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (2, 1, 3)])
def test_one_hot_matches_jax_nn_one_hot_in_range(shape: tuple[int, ...]) -> None:
  depth = 6
  indices = np.random.default_rng(5).integers(0, depth, shape).astype(np.int32)
  for axis in range(-len(shape) - 1, len(shape) + 1):
    got = dml.one_hot(indices, depth, axis=axis)
    want = jax.nn.one_hot(indices, depth, axis=axis)
    assert got.shape == want.shape and got.dtype == want.dtype, axis
    np.testing.assert_array_equal(got, want)


def test_one_hot_negative_indices_are_off_as_jax_and_from_the_end_by_keyword() -> None:
  """By default only [0, D) sets a position (jax.nn.one_hot: -1 as padding gives an all-off row); with
  negative_indices="from_end" (DirectML's rule) [-D, -1] counts from the end; anything else leaves the row off."""
  depth = 4
  indices = np.array([[0, 3, -1, -4], [4, -5, 2, 100]], np.int64 if jax.config.jax_enable_x64 else np.int32)
  got = dml.one_hot(indices, depth, on_value=np.float32(7), off_value=np.float32(-2))
  want = np.where(np.arange(depth) == indices[..., None], np.float32(7), np.float32(-2))
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(dml.one_hot(indices, depth), jax.nn.one_hot(indices, depth))
  assert got[0, 2].tolist() == [-2] * depth  # -1: all off
  directml = dml.one_hot(indices, depth, on_value=np.float32(7), off_value=np.float32(-2), negative_indices="from_end")
  np.testing.assert_array_equal(directml, _functional_one_hot_reference(indices, depth, -1, -2.0, 7.0, np.float32))
  assert directml[0, 2].tolist() == [-2, -2, -2, 7]  # -1 counts from the end
  assert directml[1, 0].tolist() == [-2] * depth  # out of range: all off
  unsigned = np.array([0, 3, 4, 2**32 - 1], np.uint32)
  for rule in ("off", "from_end"):
    np.testing.assert_array_equal(
      dml.one_hot(unsigned, depth, axis=0, negative_indices=rule),
      _functional_one_hot_reference(unsigned, depth, 0, 0.0, 1.0, np.float32),
    )


def test_one_hot_dtype_rules() -> None:
  indices = np.array([1, 0], np.int32)
  assert dml.one_hot(indices, 3).dtype == jnp.float32
  assert dml.one_hot(indices, 3, dtype=jnp.int8).dtype == jnp.int8
  assert dml.one_hot(indices, 3, on_value=jnp.bfloat16(2), off_value=jnp.bfloat16(0)).dtype == jnp.bfloat16
  mixed = dml.one_hot(indices, 3, on_value=np.int16(5), off_value=-1)
  assert mixed.dtype == jnp.int16 and mixed.tolist() == [[-1, 5, -1], [5, -1, -1]]


def test_one_hot_is_differentiable_in_on_and_off_values() -> None:
  indices = np.array([[0, 2], [5, 1]], np.int32)  # 5 is out of range for depth 3: an all-off row

  def total(on: jax.Array, off: jax.Array) -> jax.Array:
    weights = jnp.arange(12, dtype=jnp.float32).reshape(2, 2, 3)
    return jnp.sum(weights * dml.one_hot(indices, 3, on_value=on, off_value=off))

  d_on, d_off = jax.grad(total, argnums=(0, 1))(jnp.float32(1), jnp.float32(0))
  weights = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
  hot = _functional_one_hot_reference(indices, 3, -1, 0.0, 1.0, np.float32)
  assert float(d_on) == float((weights * hot).sum())
  assert float(d_off) == float((weights * (1 - hot)).sum())
  jax.test_util.check_grads(lambda on, off: total(on, off), (jnp.float32(1.5), jnp.float32(-0.5)), 2, ["fwd", "rev"])


def test_one_hot_descriptor_keeps_directml_layout() -> None:
  desc = dml.OneHotDesc.from_inputs(
    dml.TensorDesc(np.int32, (3, 1)), dml.TensorDesc(np.float32, (1, 2)), depth=4, axis=1
  )
  indices = np.array([[1], [-1], [9]], np.int32)
  values = np.array([[0.5, 2.0]], np.float32)
  got = dml.execute(desc, indices, values)
  np.testing.assert_array_equal(got, ref_one_hot(indices, values, 4, 1))
  same = dml.one_hot(indices[:, 0], 4, on_value=values[0, 1], off_value=values[0, 0], negative_indices="from_end")
  np.testing.assert_array_equal(got, same)


# ---------------------------------------------------------------------------------------------------- names
_ALIASES = {
  "average": ["mean", "AVERAGE", "ReduceMean", "reduceMean"],
  "multiply": ["prod", "product", "ReduceProd", "reduceProduct"],
  "log_sum_exp": ["logsumexp", "LogSumExp", "ReduceLogSumExp", "reduceLogSumExp"],
  "log_sum": ["logsum", "ReduceLogSum", "reduceLogSum"],
  "sum_square": ["sumsquare", "sum_of_squares", "ReduceSumSquare", "reduceSumSquare"],
  "l1": ["L1", "ReduceL1", "reduceL1"],
  "l2": ["ReduceL2", "reduceL2"],
  "max": ["amax", "ReduceMax", "reduceMax"],
  "min": ["amin", "ReduceMin", "reduceMin"],
  "sum": ["SUM", "ReduceSum", "reduceSum"],
}


@pytest.mark.parametrize("name", sorted(_ALIASES))
def test_reduce_accepts_jnp_onnx_and_webnn_names(name: str) -> None:
  x = np.abs(_logits(6, (3, 4))) + np.float32(0.5)
  want = dml.reduce(x, dml.ReduceFunction[name.upper()], 1)
  np.testing.assert_allclose(want, ref_reduce(x, name, (1,))[:, 0], rtol=2e-6)
  for alias in _ALIASES[name]:
    np.testing.assert_array_equal(dml.reduce(x, alias, 1), want, err_msg=alias)
  desc = dml.ReduceDesc.from_inputs(_ALIASES[name][-1], dml.TensorDesc(F32, (3, 4)), axes=(1,))
  assert desc.function == dml.ReduceFunction[name.upper()]


def test_unknown_reduction_name_lists_the_valid_ones_and_suggests() -> None:
  with pytest.raises(dml.DescriptorError) as error:
    dml.reduce(np.ones(3, np.float32), "sum_sqare")
  message = str(error.value)
  assert "did you mean 'sum_square'?" in message
  assert "got function='sum_sqare'" in message
  for listed in ("'mean'", "'prod'", "'log_sum_exp'", "'argmax'"):
    assert listed in message


# ----------------------------------------------------------------------------------------------- descriptors
def test_tensor_desc_takes_numpy_and_jax_dtypes() -> None:
  for dtype, data_type in ((np.float32, F32), (jnp.uint32, U32), ("int64", dml.DataType.INT64), (np.dtype("f2"), 2)):
    assert dml.TensorDesc(dtype, (2,)).data_type == data_type
  with pytest.raises(dml.DescriptorError, match=r"input_tensor.data_type must be one of .*; got input_tensor.data"):
    dml.execute(
      dml.TopK1Desc.from_inputs(dml.TensorDesc(F32, (4,)), axis=0, k=1).__class__(
        dml.TensorDesc(jnp.bfloat16, (4,)), dml.TensorDesc(F32, (1,)), dml.TensorDesc(U32, (1,)), axis=0, k=1
      ),
      np.zeros(4, jnp.bfloat16),
    )


def test_from_inputs_equals_the_hand_written_descriptor() -> None:
  x = dml.TensorDesc(F32, (2, 3, 4))
  assert dml.TopK1Desc.from_inputs(x, axis=2, k=3) == dml.TopK1Desc(
    x, dml.TensorDesc(F32, (2, 3, 3)), dml.TensorDesc(U32, (2, 3, 3)), axis=2, k=3
  )
  assert dml.TopKDesc.from_inputs(x, axis=0, k=1, index_data_type="uint64").output_index_tensor == dml.TensorDesc(
    dml.DataType.UINT64, (1, 3, 4)
  )
  assert dml.ArgMinDesc.from_inputs(x, axes=(2, 0)) == dml.ArgMinDesc(x, dml.TensorDesc(U32, (1, 3, 1)), axes=(2, 0))
  assert dml.ArgMaxDesc.from_inputs(x, axes=(1,), output_data_type=dml.DataType.INT32).output_tensor == (
    dml.TensorDesc(dml.DataType.INT32, (2, 1, 4))
  )
  assert dml.ReduceDesc.from_inputs("l2", x, axes=()) == dml.ReduceDesc(dml.ReduceFunction.L2, x, x, axes=())
  assert dml.ReduceDesc.from_inputs("argmax", x, axes=(0, 1)).output_tensor == dml.TensorDesc(U32, (1, 1, 4))
  gather = dml.GatherND1Desc.from_inputs(
    dml.TensorDesc(F32, (1, 2, 3, 4)),
    dml.TensorDesc(U32, (1, 1, 2, 1)),
    batch_dimension_count=1,
    input_dimension_count=3,
    indices_dimension_count=2,
  )
  assert gather.output_tensor == dml.TensorDesc(F32, (1, 1, 2, 4))
  one_hot = dml.OneHotDesc.from_inputs(dml.TensorDesc(U32, (2, 1)), dml.TensorDesc(np.int8, (2,)), depth=5, axis=1)
  assert one_hot.output_tensor == dml.TensorDesc(dml.DataType.INT8, (2, 5))


def test_axis_direction_defaults() -> None:
  x = dml.TensorDesc(F32, (5,))
  assert dml.TopK1Desc(x, x, dml.TensorDesc(U32, (5,)), axis=0, k=5).axis_direction == dml.AxisDirection.DECREASING
  assert dml.ArgMinDesc(x, dml.TensorDesc(U32, (1,)), axes=(0,)).axis_direction == dml.AxisDirection.INCREASING
  assert dml.ArgMaxDesc(x, dml.TensorDesc(U32, (1,)), axes=(0,)).axis_direction == dml.AxisDirection.INCREASING


def test_from_inputs_refuses_what_execute_would() -> None:
  with pytest.raises(dml.DescriptorError) as error:
    dml.TopK1Desc.from_inputs(dml.TensorDesc(F32, (2, 3)), axis=2, k=0, index_data_type=dml.DataType.INT32)
  assert error.value.operator == "TOP_K1"
  assert "got axis=2" in str(error.value) and "got index_data_type=INT32" in str(error.value)
  with pytest.raises(dml.DescriptorError, match="got output_data_type=FLOAT16"):
    dml.ReduceDesc.from_inputs("sum", dml.TensorDesc(F32, (2, 3)), axes=(1,), output_data_type="float16")
