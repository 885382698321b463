"""Errors that say how to fix the call (issue 12, point 2) and the reported defects of issue 11 (points 2 and 3).

Every case asserts the text a user reads. Static-parameter errors are raised while tracing, so they are
checked under ``jax.jit`` with the parameter passed as a traced argument, which is the common mistake.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import x64

import dmljax as dml

F32, U32 = dml.DataType.FLOAT32, dml.DataType.UINT32


def _error(call: Callable[[], Any]) -> dml.DescriptorError:
  with pytest.raises(dml.DescriptorError) as error:
    call()
  return error.value


# --------------------------------------------------------------------------------------- static parameters
_X = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
_I = jnp.array([[0], [2], [1]], jnp.int32)
_TRACED = [
  ("top_k", "k", lambda k: dml.top_k(_X, k)),
  ("top_k", "axis", lambda axis: dml.top_k(_X, 1, axis=axis)),
  ("argmax", "axis", lambda axis: dml.argmax(_X, axis)),
  ("reduce", "axis", lambda axis: dml.reduce(_X, "sum", axis)),
  ("one_hot", "depth", lambda depth: dml.one_hot(jnp.array([1, 2]), depth)),
  ("one_hot", "axis", lambda axis: dml.one_hot(jnp.array([1, 2]), 3, axis=axis)),
  ("gather_nd", "batch_dims", lambda batch_dims: dml.gather_nd(_X, _I, batch_dims=batch_dims)),
]


@pytest.mark.parametrize(("operator", "field", "call"), _TRACED, ids=[f"{o}-{f}" for o, f, _ in _TRACED])
def test_traced_static_parameter_says_how_to_pass_it_under_jit(operator: str, field: str, call: Any) -> None:
  error = _error(lambda: jax.jit(call)(1))
  assert error.operator == operator
  message = str(error)
  assert f"{field} must be a static Python int, because it sets the output's shape" in message
  assert f"static_argnames='{field}'" in message and "static_argnums" in message
  assert f"got {field}=traced int32[]" in message
  assert "JitTracer" not in message
  # The advice works: the same call with the parameter static compiles.
  jax.jit(call, static_argnums=0)(1)


@pytest.mark.parametrize(
  ("call", "text"),
  [
    (lambda: dml.top_k(_X, 2.0), "k must be a Python int (not a float), because it sets the output's shape; got k=2.0"),
    (lambda: dml.argmin(_X, 1.0), "axis must be a Python int (not a float)"),
    (lambda: dml.one_hot(jnp.array([1]), 3.0), "depth must be a Python int (not a float)"),
  ],
)
def test_float_static_parameter_says_it_must_be_an_int(call: Any, text: str) -> None:
  assert text in str(_error(call))


def test_gather_nd_descriptor_ranks_differ_says_directml_pads_with_leading_ones() -> None:
  desc = dml.GatherNDDesc(
    dml.TensorDesc(F32, (3, 4)), dml.TensorDesc(U32, (1, 2, 1)), dml.TensorDesc(F32, (1, 2, 4)), 2, 3
  )
  error = _error(lambda: dml.execute(desc, np.zeros((3, 4), np.float32), np.zeros((1, 2, 1), np.uint32)))
  message = str(error)
  assert "input_tensor, indices_tensor, output_tensor must have the same rank" in message
  assert "DirectML pads the smaller tensors' sizes with leading 1s, e.g. (3, 4) as (1, 3, 4)" in message
  assert "got input_tensor.sizes=(3, 4), indices_tensor.sizes=(1, 2, 1)" in message


# ------------------------------------------------------------------------------ complex and extended dtypes
_ORDERINGS = [
  ("top_k", lambda x: dml.top_k(x, 1), "pass jnp.abs(x) to order by magnitude, or x.real"),
  ("argmin", lambda x: dml.argmin(x), "pass jnp.abs(x) to order by magnitude, or x.real"),
  ("argmax", lambda x: dml.argmax(x, 0), "pass jnp.abs(x) to order by magnitude, or x.real"),
  ("reduce", lambda x: dml.reduce(x, "argmax"), "pass jnp.abs(x) to order by magnitude, or x.real"),
  ("reduce", lambda x: dml.reduce(x, "l1"), "pass jnp.abs(x), or x.real"),
  ("reduce", lambda x: dml.reduce(x, "l2"), "pass jnp.abs(x), or x.real"),
]


@pytest.mark.parametrize("wide", [False, True], ids=["x64_off", "x64_on"])
@pytest.mark.parametrize(
  ("operator", "call", "hint"), _ORDERINGS, ids=[f"{o}{n}" for n, (o, *_) in enumerate(_ORDERINGS)]
)
def test_complex_input_to_an_ordering_says_what_to_pass_never_enable_x64(
  operator: str, call: Any, hint: str, wide: bool
) -> None:
  """Orderings (and L1/L2, which reduce magnitudes) refuse complex numbers, as jax.lax.top_k and jnp.argmax do,
  and say what to pass instead; never that x64 would help."""
  dtypes = [np.complex64] + ([np.complex128] if wide else [])
  with x64() if wide else _nothing():
    for dtype in dtypes:
      message = str(_error(lambda d=dtype: call(np.ones(3, d))))
      assert message.startswith(f"{operator}: ") and "needs real x" in message and hint in message
      assert f"got x.dtype={np.dtype(dtype).name}" in message
      assert "jax_enable_x64" not in message


class _nothing:
  def __enter__(self) -> None:
    return None

  def __exit__(self, *exc: Any) -> None:
    return None


def test_complex64_gathers_and_one_hot_values_need_no_x64() -> None:
  x = (np.arange(6) + 1j * np.arange(6)).astype(np.complex64).reshape(3, 2)
  got = dml.gather_nd(x, np.array([[2], [-1], [0]], np.int32))
  np.testing.assert_array_equal(got, x[[2, 2, 0]])
  assert got.dtype == jnp.complex64
  hot = dml.one_hot(np.array([1, 5], np.int32), 3, on_value=np.complex64(1j), off_value=np.complex64(2))
  np.testing.assert_array_equal(hot, np.array([[2, 1j, 2], [2, 2, 2]], np.complex64))
  desc = dml.GatherNDDesc.from_inputs(dml.TensorDesc(F32, (3, 2)), dml.TensorDesc(U32, (3, 1)))
  assert desc.output_tensor.sizes == (3, 2)


def test_complex128_asks_for_x64_because_it_is_a_64_bit_type() -> None:
  message = str(_error(lambda: dml.gather_nd(np.ones((2, 2), np.complex128), np.zeros((1, 1), np.int32))))
  assert "needs jax.config.update('jax_enable_x64', True)" in message


_KEY_CALLS = [
  ("top_k", lambda key: dml.top_k(key, 1)),
  ("argmax", lambda key: dml.argmax(key)),
  ("reduce", lambda key: dml.reduce(key, "sum")),
  ("gather_nd", lambda key: dml.gather_nd(key, jnp.zeros((1, 1), jnp.int32))),
  ("one_hot", lambda key: dml.one_hot(key, 3)),
]


@pytest.mark.parametrize(("operator", "call"), _KEY_CALLS, ids=[o for o, _ in _KEY_CALLS])
def test_prng_key_array_is_a_descriptor_error(operator: str, call: Any) -> None:
  keys = jax.random.split(jax.random.key(0), 3)
  message = str(_error(lambda: call(keys)))
  assert "must be an array of numbers (a PRNG key array holds keys: pass jax.random.key_data(" in message
  assert ".dtype=key<fry>" in message


# ------------------------------------------------------------------------------------ issue 11's reproducers
def test_one_hot_two_inputs_wrong_in_the_same_way_are_both_named() -> None:
  desc = dml.OneHotDesc(dml.TensorDesc(U32, (2, 1)), dml.TensorDesc(F32, (1, 2)), dml.TensorDesc(F32, (2, 3)), axis=1)
  error = _error(lambda: dml.execute(desc, np.zeros((2, 1), np.int32), np.zeros((1, 2), np.int32)))
  assert len(error.problems) == 2
  assert "got indices_tensor array of dtype int32" in error.problems[0]
  assert "got values_tensor array of dtype int32" in error.problems[1]


def test_gather_nd_of_two_scalars_names_both() -> None:
  error = _error(lambda: dml.gather_nd(jnp.float32(1), jnp.int32(0)))
  assert [p.split("; got ")[1] for p in error.problems] == ["x.shape=() (rank 0)", "indices.shape=() (rank 0)"]


def test_reduce_duplicate_axes_and_wrong_output_type_are_both_named() -> None:
  desc = dml.ReduceDesc(
    dml.ReduceFunction.SUM, dml.TensorDesc(F32, (2, 3)), dml.TensorDesc(dml.DataType.FLOAT16, (2, 1)), axes=(1, 1)
  )
  message = str(_error(lambda: dml.execute(desc, np.zeros((2, 3), np.float32))))
  assert "got axes=(1, 1)" in message and "got output_tensor.data_type=FLOAT16" in message


def test_one_hot_axis_out_of_range_and_one_value_are_both_named() -> None:
  desc = dml.OneHotDesc(dml.TensorDesc(U32, (2, 1)), dml.TensorDesc(F32, (1, 1)), dml.TensorDesc(F32, (2, 3)), axis=5)
  message = str(_error(lambda: dml.execute(desc, np.zeros((2, 1), np.uint32), np.zeros((1, 1), np.float32))))
  assert "got axis=5" in message and "got values_tensor.sizes=(1, 1)" in message


def test_one_hot_reports_a_non_scalar_on_value_and_a_64_bit_dtype_together() -> None:
  error = _error(lambda: dml.one_hot(jnp.array([1], jnp.int32), 3, on_value=np.zeros(2), dtype=np.float64))
  message = str(error)
  assert "on_value must be a scalar; got on_value.shape=(2,)" in message
  assert "got dtype=float64 with jax_enable_x64 off" in message


# ------------------------------------------------------------------------------------ issue 18's reproducers
def test_an_output_past_xlas_extents_is_a_descriptor_error_at_trace_time() -> None:
  """one_hot's depth and gather_nd's shapes set the output's size: past 2**59 - 1 elements XLA would abort."""
  with x64():
    error = _error(lambda: jax.eval_shape(lambda i: dml.one_hot(i, 2**62), jnp.array([1, 2, 3])))
    assert "the output (indices.shape with depth inserted) must have at most 2**59 - 1 elements" in str(error)
    assert "got depth=4611686018427387904 (output shape (3, 4611686018427387904)" in str(error)
    x, i = jax.ShapeDtypeStruct((2**40, 2**30), jnp.float32), jax.ShapeDtypeStruct((2**40, 1), jnp.int32)
    assert "must have at most 2**59 - 1 elements" in str(_error(lambda: jax.eval_shape(dml.gather_nd, x, i)))
    desc = dml.OneHotDesc(dml.TensorDesc(U32, (3, 1)), dml.TensorDesc(F32, (1, 2)), dml.TensorDesc(F32, (3, 2**62)), 1)
    error = _error(lambda: dml.execute(desc, np.zeros((3, 1), np.uint32), np.zeros((1, 2), np.float32)))
    assert "output_tensor must have at most 2**59 - 1 elements" in str(error)


def test_the_depth_that_aborted_the_interpreter_raises_in_a_subprocess() -> None:
  """The issue's two reproducers, eagerly, where a regression would kill the process rather than fail a test."""
  import subprocess
  import sys

  code = (
    "import jax, jax.numpy as jnp, numpy as np, dmljax as dml, dmljax.onnx as donnx\n"
    "jax.config.update('jax_enable_x64', True)\n"
    "for call in (lambda: dml.one_hot(jnp.array([1, 2, 3]), 2**62),\n"
    "             lambda: donnx.one_hot(np.array([1, 2, 3]), 2**63 - 1, np.array([0, 1]))):\n"
    "  try:\n"
    "    call()\n"
    "  except dml.DescriptorError as e:\n"
    "    print('refused:', str(e).splitlines()[0][:60])\n"
  )
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.count("refused: one_hot: the output") == 2, done.stdout


def test_64_bit_numpy_input_without_x64_names_the_cast_that_would_do() -> None:
  """Where dmljax refuses 64-bit NumPy data without x64 (gather_nd; the functional top_k, argmin/argmax, reduce and
  one_hot narrow it as JAX does), the message offers the cast, saying whether it is exact."""
  message = str(_error(lambda: dml.gather_nd(np.zeros(3, np.float32), np.array([[2]]))))
  assert "indices of type int64 needs jax.config.update('jax_enable_x64', True), or cast it: " in message
  assert "indices.astype(np.int32) (its values fit)" in message
  message = str(_error(lambda: dml.gather_nd(np.zeros(3, np.float32), np.array([[2**40]]))))
  assert "(its values [1099511627776, 1099511627776] do not fit int32)" in message and "astype" not in message
  assert "or cast it: x.astype(np.float32) (which rounds)" in str(
    _error(lambda: dml.gather_nd(np.ones(3), np.array([[1]], np.int32)))
  )
  assert dml.one_hot(np.array([1, 2, 3]), 4).shape == (3, 4)  # narrowed, as jax.nn.one_hot does


def test_gather_nd_batch_dims_must_leave_an_indexed_dimension() -> None:
  error = _error(lambda: dml.gather_nd(jnp.ones((2, 3, 4)), jnp.zeros((2, 3, 1), jnp.int32), batch_dims=3))
  assert str(error) == (
    "gather_nd: batch_dims must be an integer in [0, 2] (below the ranks of x and indices, leaving a dimension to "
    "index); got batch_dims=3"
  )


def test_one_dimensional_row_ids_get_the_take_hint() -> None:
  error = _error(lambda: dml.gather_nd(jnp.ones((5, 3)), jnp.array([3, 1, 4], jnp.int32)))
  assert (
    "1-D indices are one index tuple of length 3; for a list of row ids (as jnp.take(x, ids, axis=0) or x[ids]), "
    "pass indices[:, None]; got indices.shape=(3,)"
  ) in str(error)
  # A valid tuple gets no hint, and a 2-D index array none either.
  assert "row ids" not in str(_error(lambda: dml.gather_nd(jnp.ones((5, 3)), jnp.zeros((2, 3), jnp.int32))))


def test_every_independent_problem_is_reported() -> None:
  error = _error(lambda: dml.top_k(jnp.ones(3, jnp.complex64), 2, axis=5))
  assert [p.split("; got ")[1] for p in error.problems] == ["x.dtype=complex64", "axis=5"]
  error = _error(lambda: dml.gather_nd(jnp.ones((2, 3)), jnp.ones((2, 1), jnp.float32), batch_dims=5))
  assert [p.split("; got ")[1] for p in error.problems] == ["indices.dtype=float32", "batch_dims=5"]


# ---------------------------------------------------------------------------- a JAX user's first hour (issue 24)
def test_row_ids_without_the_tuple_axis_get_the_trailing_axis_hint() -> None:
  # kNN: (100, 10) neighbour ids into (N,) labels, where gather_nd wants (100, 10, 1).
  labels, neighbours = jnp.arange(50, dtype=jnp.int32), jnp.zeros((100, 10), jnp.int32)
  message = str(_error(lambda: dml.gather_nd(labels, neighbours)))
  assert message == (
    "gather_nd: indices.shape[-1] (the index tuple length) must be in [1, 1] (rank of x minus batch_dims). The "
    "last axis of indices is the index tuple, so these are index tuples of length 10; if indices holds row ids of "
    "x (as x[ids] or jnp.take(x, ids, axis=0)), add a tuple axis of length 1: indices[..., None]; "
    "got indices.shape=(100, 10)"
  )
  # The advice works, and a valid tuple length gets no hint.
  assert dml.gather_nd(labels, neighbours[..., None]).shape == (100, 10)
  assert "indices[..., None]" not in str(_error(lambda: dml.gather_nd(jnp.ones((5, 3)), jnp.ones((2, 2)))))


@pytest.mark.parametrize(
  ("name", "advice"),
  [
    ("softmax", "use jax.nn.softmax, whose normalizer is dml.reduce(x, 'log_sum_exp', axis)"),
    ("log_softmax", "use jax.nn.log_softmax"),
    ("median", "DirectML has no median reduction; use jnp.median"),
    ("cumsum", "use jnp.cumsum"),
  ],
)
def test_names_that_are_not_reductions_get_what_computes_them(name: str, advice: str) -> None:
  message = str(_error(lambda: dml.reduce(_X, name, 1)))
  assert f"({name!r} is not one of them: " in message and advice in message
  assert "did you mean" not in message  # "softmax" is not a misspelt "max"
  assert message.endswith(f"; got function={name!r}")


def test_a_misspelt_reduction_still_gets_its_look_alike() -> None:
  assert "(did you mean 'max'?); got function='maxx'" in str(_error(lambda: dml.reduce(_X, "maxx", 1)))
  assert "did you mean" not in str(_error(lambda: dml.reduce(_X, "quantile", 1)))


def test_traced_k_says_each_k_compiles_anew_and_names_the_alternatives() -> None:
  message = str(_error(lambda: jax.jit(lambda k: dml.top_k(_X, k))(2)))
  assert "Each new k traces and compiles the program anew" in message
  assert "values, indices = dml.top_k(x, k_max); keep = jnp.arange(k_max) < k" in message
  assert "dmljax.sampling.top_k_mask(logits, k), which takes k as an array" in message
  # The fixed-maximum recipe it names gives the top k for a k traced at run time.
  values, _ = jax.jit(lambda x, k: (dml.top_k(x, 3)[0], jnp.arange(3) < k))(_X, 2)
  assert values.tolist() == [[3.0, 2.0, 1.0], [7.0, 6.0, 5.0], [11.0, 10.0, 9.0]]


_TIES = jnp.array([[2.0, 5.0, 5.0, 1.0, 1.0]])


def test_argmin_argmax_name_the_tie_rule_ties() -> None:
  assert dml.argmax(_TIES, 1).tolist() == [1] and dml.argmax(_TIES, 1, ties="last").tolist() == [2]
  assert dml.argmin(_TIES, 1, ties="first").tolist() == [3] and dml.argmin(_TIES, 1, ties="last").tolist() == [4]
  message = str(_error(lambda: dml.argmax(_TIES, 1, ties="middle")))
  assert message == (
    "argmax: ties must be 'first' or 'last' (which index an extreme that occurs twice gives); got ties='middle'"
  )


@pytest.mark.parametrize(("direction", "ties"), [("increasing", "first"), ("decreasing", "last")])
def test_direction_still_works_with_a_deprecation_warning(direction: str, ties: str) -> None:
  with pytest.deprecated_call(match="use ties='first' for direction='increasing' or ties='last'"):
    got = dml.argmax(_TIES, 1, direction=direction)
  assert got.tolist() == dml.argmax(_TIES, 1, ties=ties).tolist()
  with pytest.deprecated_call(), pytest.raises(dml.DescriptorError, match="ties and the deprecated direction"):
    dml.argmin(_TIES, 1, ties="last", direction="increasing")
  # The descriptor path keeps DirectML's axis_direction, without a warning.
  desc = dml.ArgMaxDesc.from_inputs(dml.TensorDesc(np.float32, (1, 5)), axes=(1,), axis_direction=direction)
  assert dml.execute(desc, np.asarray(_TIES)).tolist() == [[1 if ties == "first" else 2]]
