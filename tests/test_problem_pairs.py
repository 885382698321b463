"""One error lists every failing field: pairs of independent faults, every operator, both paths (issue 11).

Each operator has a valid call built from named knobs and a list of single faults, each of which changes
knobs and must be reported with a fragment that names its field. Every pair of faults that do not mask each
other (a bad ``axis`` makes ``k``'s range unknowable, so it masks a bad ``k``) is applied together, and the
one :class:`dml.DescriptorError` must name both. Inputs are ``jax.ShapeDtypeStruct``s under
``jax.eval_shape``: the errors come from shapes, dtypes and static parameters alone.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmljax as dml

S = jax.ShapeDtypeStruct
F32, F16, U32, I32 = dml.DataType.FLOAT32, dml.DataType.FLOAT16, dml.DataType.UINT32, dml.DataType.INT32


@dataclasses.dataclass(frozen=True)
class Fault:
  name: str
  changes: dict[str, Any]
  fragment: str
  masks: frozenset[str] = frozenset()


def fault(name: str, fragment: str, masks: tuple[str, ...] = (), **changes: Any) -> Fault:
  return Fault(name, changes, fragment, frozenset(masks))


@dataclasses.dataclass(frozen=True)
class Operator:
  name: str
  valid: dict[str, Any]
  call: Callable[[dict[str, Any]], Any]
  faults: tuple[Fault, ...]


def _eval(run: Callable[..., Any], *inputs: S) -> Any:
  return jax.eval_shape(run, *inputs)


# ---------------------------------------------------------------------------------------------- descriptor path
def _top_k1(v: dict[str, Any]) -> Any:
  desc = dml.TopK1Desc(
    dml.TensorDesc(F32, (2, 5)),
    dml.TensorDesc(v["value_type"], v["value_sizes"]),
    dml.TensorDesc(v["index_type"], (2, 2)),
    axis=v["axis"],
    k=v["k"],
    axis_direction=v["direction"],
  )
  return _eval(lambda x: dml.execute(desc, x, feature_level=v["level"]), S(v["array"], np.float32))


def _arg_min(v: dict[str, Any]) -> Any:
  desc = dml.ArgMinDesc(
    dml.TensorDesc(F32, (3, 4)),
    dml.TensorDesc(v["out_type"], v["out_sizes"]),
    axes=v["axes"],
    axis_direction=v["direction"],
  )
  return _eval(lambda x: dml.execute(desc, x), S(v["array"], np.float32))


def _gather_nd1(v: dict[str, Any]) -> Any:
  desc = dml.GatherND1Desc(
    dml.TensorDesc(F32, (2, 3, 4)),
    dml.TensorDesc(U32, (2, 5, 1)),
    dml.TensorDesc(v["out_type"], v["out_sizes"]),
    input_dimension_count=3,
    indices_dimension_count=3,
    batch_dimension_count=v["batch"],
  )
  return _eval(lambda x, i: dml.execute(desc, x, i), S((2, 3, 4), np.float32), S((2, 5, 1), v["indices_dtype"]))


def _reduce(v: dict[str, Any]) -> Any:
  desc = dml.ReduceDesc(
    v["function"], dml.TensorDesc(F32, (3, 4)), dml.TensorDesc(v["out_type"], v["out_sizes"]), axes=v["axes"]
  )
  return _eval(lambda x: dml.execute(desc, x), S(v["array"], np.float32))


def _one_hot(v: dict[str, Any]) -> Any:
  desc = dml.OneHotDesc(
    dml.TensorDesc(I32, (3, 1)),
    dml.TensorDesc(F32, v["values_sizes"]),
    dml.TensorDesc(v["out_type"], (3, 4)),
    axis=v["axis"],
  )
  return _eval(lambda i, w: dml.execute(desc, i, w), S((3, 1), v["indices_dtype"]), S(v["values_sizes"], np.float32))


DESCRIPTOR_OPERATORS = [
  Operator(
    "TOP_K1",
    dict(value_type=F32, value_sizes=(2, 2), index_type=U32, axis=1, k=2, direction=1, level=None, array=(2, 5)),
    _top_k1,
    (
      fault("axis", "got axis=2", masks=("k", "value_sizes"), axis=2),
      fault("k", "got k=9", masks=("value_sizes",), k=9),
      fault("direction", "got axis_direction=5", direction=5),
      fault("value_type", "got output_value_tensor.data_type=FLOAT16", value_type=F16),
      fault("index_type", "got output_index_tensor.data_type=INT32", index_type=I32),
      fault("value_sizes", "got output_value_tensor.sizes=(2, 3)", value_sizes=(2, 3)),
      fault("array", "got input_tensor array of shape (2, 6)", array=(2, 6)),
      fault("level", "got feature_level='9_9'", level="9_9"),
    ),
  ),
  Operator(
    "ARGMIN",
    dict(out_type=U32, out_sizes=(3, 1), axes=(1,), direction=0, array=(3, 4)),
    _arg_min,
    (
      fault("axes", "got axes=(1, 1)", masks=("out_sizes",), axes=(1, 1)),
      fault("direction", "got axis_direction=7", direction=7),
      fault("out_type", "got output_tensor.data_type=FLOAT32", out_type=F32),
      fault("out_sizes", "got output_tensor.sizes=(3, 4)", out_sizes=(3, 4)),
      fault("array", "got input_tensor array of shape (4, 3)", array=(4, 3)),
    ),
  ),
  Operator(
    "GATHER_ND1",
    dict(out_type=F32, out_sizes=(2, 5, 4), batch=1, indices_dtype=np.uint32),
    _gather_nd1,
    (
      fault("batch", "got batch_dimension_count=3", masks=("out_sizes",), batch=3),
      fault("out_type", "got output_tensor.data_type=FLOAT16", out_type=F16),
      fault("out_sizes", "got output_tensor.sizes=(2, 5, 3)", out_sizes=(2, 5, 3)),
      fault("indices_dtype", "got indices_tensor array of dtype int32", indices_dtype=np.int32),
    ),
  ),
  Operator(
    "REDUCE",
    dict(function="sum", out_type=F32, out_sizes=(3, 1), axes=(1,), array=(3, 4)),
    _reduce,
    (
      fault("function", "got function='summ'", masks=("axes", "out_type", "out_sizes"), function="summ"),
      fault("axes", "got axes=(1, 1)", masks=("out_sizes",), axes=(1, 1)),
      fault("out_type", "got output_tensor.data_type=FLOAT16", out_type=F16),
      fault("out_sizes", "got output_tensor.sizes=(1, 4)", out_sizes=(1, 4)),
      fault("array", "got input_tensor array of shape (3, 5)", array=(3, 5)),
    ),
  ),
  Operator(
    "ONE_HOT",
    dict(values_sizes=(1, 2), out_type=F32, axis=1, indices_dtype=np.int32),
    _one_hot,
    (
      fault("axis", "got axis=2", axis=2),
      fault("values_sizes", "got values_tensor.sizes=(1, 1)", values_sizes=(1, 1)),
      fault("out_type", "got output_tensor.data_type=FLOAT16", out_type=F16),
      fault("indices_dtype", "got indices_tensor array of dtype uint32", indices_dtype=np.uint32),
    ),
  ),
]


# ---------------------------------------------------------------------------------------------- functional path
def _f_top_k(v: dict[str, Any]) -> Any:
  run = lambda x: dml.top_k(x, v["k"], axis=v["axis"], direction=v["direction"], index_dtype=v["index_dtype"])  # noqa: E731
  return _eval(run, S(v["shape"], v["dtype"]))


def _f_argmax(v: dict[str, Any]) -> Any:
  run = lambda x: dml.argmax(x, v["axis"], ties=v["ties"], index_dtype=v["index_dtype"])  # noqa: E731
  return _eval(run, S(v["shape"], v["dtype"]))


def _f_gather_nd(v: dict[str, Any]) -> Any:
  run = lambda x, i: dml.gather_nd(x, i, batch_dims=v["batch_dims"])  # noqa: E731
  return _eval(run, S(v["x_shape"], np.float32), S(v["indices_shape"], v["indices_dtype"]))


def _f_reduce(v: dict[str, Any]) -> Any:
  run = lambda x: dml.reduce(x, v["function"], v["axis"], index_dtype=v["index_dtype"])  # noqa: E731
  return _eval(run, S(v["shape"], v["dtype"]))


def _f_one_hot(v: dict[str, Any]) -> Any:
  run = lambda i: dml.one_hot(i, v["depth"], axis=v["axis"], on_value=v["on_value"], dtype=v["dtype"])  # noqa: E731
  return _eval(run, S(v["shape"], v["indices_dtype"]))


FUNCTIONAL_OPERATORS = [
  Operator(
    "top_k",
    dict(shape=(2, 5), dtype=np.float32, k=2, axis=1, direction="decreasing", index_dtype=jnp.int32),
    _f_top_k,
    (
      fault("dtype", "got x.dtype=complex64", dtype=np.complex64),  # issue 18: top_k(complex64, 2, axis=5) named both
      fault("axis", "got axis=3", masks=("k",), axis=3),
      fault("k", "got k=6", k=6),
      fault("direction", "got direction='down'", direction="down"),
      fault("index_dtype", "got index_dtype=", index_dtype=np.float32),
    ),
  ),
  Operator(
    "argmax",
    dict(shape=(3, 4), dtype=np.float32, axis=1, ties="first", index_dtype=jnp.int32),
    _f_argmax,
    (
      fault("dtype", "got x.dtype=complex64", masks=("axis",), dtype=np.complex64),
      fault("axis", "got axis=(0, -2)", axis=(0, -2)),
      fault("ties", "got ties=2", ties=2),
      fault("index_dtype", "got index_dtype=", index_dtype=np.int8),
    ),
  ),
  Operator(
    "gather_nd",
    dict(x_shape=(2, 3), indices_shape=(4, 1), indices_dtype=np.int32, batch_dims=0),
    _f_gather_nd,
    (
      fault("x_rank", "got x.shape=() (rank 0)", masks=("batch_dims", "tuple"), x_shape=()),
      fault("indices_rank", "got indices.shape=() (rank 0)", masks=("batch_dims", "tuple"), indices_shape=()),
      fault("indices_dtype", "got indices.dtype=float32", indices_dtype=np.float32),  # issue 18: batch_dims named too
      fault("batch_dims", "got batch_dims=2", masks=("tuple",), batch_dims=2),
      fault("tuple", "got indices.shape=(4, 3)", indices_shape=(4, 3)),
    ),
  ),
  Operator(
    "reduce",
    dict(shape=(3, 4), dtype=np.float32, function="argmax", axis=1, index_dtype=jnp.int32),
    _f_reduce,
    (
      fault("dtype", "got x.dtype=complex64", masks=("axis",), dtype=np.complex64),
      # Which types are refused depends on the function (complex sums are fine, complex argmax is not).
      fault("function", "got function='argmux'", masks=("index_dtype", "dtype"), function="argmux"),
      fault("axis", "got axis=(1, 1)", axis=(1, 1)),
      fault("index_dtype", "got index_dtype=", index_dtype=np.float16),
    ),
  ),
  Operator(
    "one_hot",
    dict(shape=(3,), indices_dtype=np.int32, depth=4, axis=-1, on_value=1.0, dtype=None),
    _f_one_hot,
    (
      fault("indices_dtype", "got indices.dtype=bool", indices_dtype=np.bool_),
      fault("depth", "got depth=-1", depth=-1),
      fault("axis", "got axis=2", axis=2),
      fault("on_value", "got on_value.shape=(2,)", on_value=np.ones(2, np.float32)),
      fault("dtype", "got dtype='nope'", masks=("on_value",), dtype="nope"),
    ),
  ),
]


def _pairs(operators: list[Operator]) -> list[Any]:
  cases = []
  for op in operators:
    for a, b in itertools.combinations(op.faults, 2):
      if a.name in b.masks or b.name in a.masks:
        continue
      cases.append(pytest.param(op, a, b, id=f"{op.name}-{a.name}+{b.name}"))
  return cases


def _message(op: Operator, *faults: Fault) -> str:
  knobs = dict(op.valid)
  for f in faults:
    knobs.update(f.changes)
  with pytest.raises(dml.DescriptorError) as error:
    op.call(knobs)
  assert error.value.operator == op.name
  return str(error.value)


@pytest.mark.parametrize("op", DESCRIPTOR_OPERATORS + FUNCTIONAL_OPERATORS, ids=lambda op: op.name)
def test_valid_baseline_and_each_single_fault(op: Operator) -> None:
  op.call(dict(op.valid))
  for f in op.faults:
    message = _message(op, f)
    assert f.fragment in message, (f.name, message)


@pytest.mark.parametrize(("op", "first", "second"), _pairs(DESCRIPTOR_OPERATORS + FUNCTIONAL_OPERATORS))
def test_independent_faults_are_both_reported(op: Operator, first: Fault, second: Fault) -> None:
  message = _message(op, first, second)
  assert first.fragment in message and second.fragment in message, message
