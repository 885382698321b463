"""Invalid-input fuzzing: corrupted descriptors and arrays always raise DescriptorError naming the field.

Hypothesis draws a valid case (tests/dml_strategies.py), then one corruption that
makes it invalid: a wrong rank (0 or 9), a size-0 dimension, a size or dtype
mismatch between an array and its descriptor, a wrong input count, an unknown or
unsupported data type (for the function or the feature level), a 64-bit type
without x64, an output descriptor that disagrees, an axis out of range or
repeated, K = 0 or K > size, a batch count too large, a tuple too long, fewer
than two values, non-integer indices. The call must raise
:class:`dmljax.DescriptorError` whose message names the field: never another
exception type, never a result.

The last part pins the message of every distinct rule of SPEC §7, one call each.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest
from _helpers import assert_got_names_its_field
from dml_strategies import CASES, call_functional, x64
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import dmljax as dml

f32, u32, i32 = dml.DataType.FLOAT32, dml.DataType.UINT32, dml.DataType.INT32
T = dml.TensorDesc

Thunk = Callable[[], Any]
Corruption = tuple[str, Thunk, bool]  # (field the message must name, the call, whether to run it with x64 on)

_MANY = settings(max_examples=settings.default.max_examples * 3)


def _assert_names(call: Thunk, field: str) -> None:
  with pytest.raises(dml.DescriptorError) as info:
    result = call()
    pytest.fail(f"no error; got a result {jax.tree.map(np.shape, result)}")
  message = str(info.value)
  assert re.search(rf"(?<![\w.]){re.escape(field)}(?!\w)", message), (field, message)
  assert_got_names_its_field(info.value)


def _tensor_fields(desc: Any) -> list[str]:
  return [f.name for f in dataclasses.fields(desc) if isinstance(getattr(desc, f.name), dml.TensorDesc)]


def _input_fields(desc: Any) -> list[str]:
  return [f for f in _tensor_fields(desc) if not f.startswith("output")]


def _replace_tensor(desc: Any, field: str, **changes: Any) -> Any:
  return dataclasses.replace(desc, **{field: dataclasses.replace(getattr(desc, field), **changes)})


@st.composite
def descriptor_corruptions(draw: st.DrawFn, op: str) -> Corruption:
  case = draw(CASES[op]().filter(lambda c: c["desc"] is not None))
  desc, inputs = case["desc"], list(case["inputs"])
  on = case["x64"]
  fields = _tensor_fields(desc)
  field = draw(st.sampled_from(fields))
  sizes = getattr(desc, field).sizes
  kind = draw(
    st.sampled_from(
      [
        "rank0",
        "rank9",
        "size0",
        "data_type",
        "x64",
        "unsupported",
        "feature_level",
        "output",
        "array_shape",
        "array_dtype",
        "input_count",
        "op",
      ]
    )
  )

  def run(d: Any, xs: list[Any]) -> Thunk:
    return lambda: dml.execute(d, *xs)

  if kind == "rank0":
    return field, run(_replace_tensor(desc, field, sizes=()), inputs), on
  if kind == "rank9":
    return field, run(_replace_tensor(desc, field, sizes=(1,) * 9), inputs), on
  if kind == "size0":
    d = draw(st.integers(0, len(sizes) - 1))
    return field, run(_replace_tensor(desc, field, sizes=(*sizes[:d], 0, *sizes[d + 1 :])), inputs), on
  if kind == "data_type":
    return (
      f"{field}.data_type",
      run(_replace_tensor(desc, field, data_type=draw(st.sampled_from([0, 12, -1]))), inputs),
      on,
    )
  if kind == "x64":
    wide = draw(st.sampled_from([dml.DataType.INT64, dml.DataType.UINT64, dml.DataType.FLOAT64]))
    return f"{field}.data_type", run(_replace_tensor(desc, field, data_type=wide), inputs), False
  if kind == "unsupported":
    return _unsupported_type(op, desc, inputs)
  if kind == "feature_level":
    return _too_old(draw, op, desc, inputs, on)
  if kind == "output":
    out = draw(st.sampled_from([f for f in fields if f.startswith("output")]))
    out_sizes = getattr(desc, out).sizes
    # ONE_HOT's depth is output_tensor.sizes[axis]: any size there is valid.
    dims = [d for d in range(len(out_sizes)) if op != "one_hot" or d != desc.axis]
    d = draw(st.sampled_from(dims)) if dims else 0
    grown = (*out_sizes[:d], out_sizes[d] + draw(st.integers(1, 3)), *out_sizes[d + 1 :])
    if dims and draw(st.booleans()):
      return out, run(_replace_tensor(desc, out, sizes=grown), inputs), on
    current = getattr(desc, out).data_type
    arg_function = op == "reduce" and dml.ReduceFunction(desc.function).name in ("ARGMAX", "ARGMIN")
    if out == "output_index_tensor" or op == "arg_reduce" or arg_function:
      other = draw(st.sampled_from([f32, dml.DataType.FLOAT16, dml.DataType.INT8]))
    else:
      other = draw(st.sampled_from([t for t in (f32, i32, dml.DataType.INT8) if t != current]))
    return out, run(_replace_tensor(desc, out, data_type=other), inputs), on
  in_fields = _input_fields(desc)
  i = draw(st.integers(0, len(in_fields) - 1))
  if kind == "array_shape":
    x = np.asarray(inputs[i])
    grown = np.concatenate([x, x], axis=draw(st.integers(0, x.ndim - 1)))
    return in_fields[i], run(desc, [*inputs[:i], grown, *inputs[i + 1 :]]), on
  if kind == "array_dtype":
    x = np.asarray(inputs[i])
    other = np.dtype(np.int16) if x.dtype == np.float32 else np.dtype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
      cast = x.astype(other)
    return in_fields[i], run(desc, [*inputs[:i], cast, *inputs[i + 1 :]]), on
  if kind == "input_count":
    fewer = inputs[:-1] if draw(st.booleans()) else [*inputs, inputs[0]]
    return "execute needs", run(desc, fewer), on
  return draw(_operator_corruption(op, desc, inputs, on))


def _with_types(desc: Any, inputs: list[Any], changes: dict[str, dml.DataType]) -> Thunk:
  """The descriptor with new data types, and arrays converted to match, so only the type rule breaks."""
  new = desc
  for field, data_type in changes.items():
    new = _replace_tensor(new, field, data_type=data_type)
  in_fields = _input_fields(desc)
  numpy_of = {
    dml.DataType.FLOAT64: np.float64,
    dml.DataType.INT8: np.int8,
    dml.DataType.INT16: np.int16,
    dml.DataType.INT32: np.int32,
  }
  with np.errstate(invalid="ignore", over="ignore"):
    arrays = [
      np.asarray(x).astype(numpy_of[changes[f]]) if f in changes else x for f, x in zip(in_fields, inputs, strict=True)
    ]
  return lambda: dml.execute(new, *arrays)


def _unsupported_type(op: str, desc: Any, inputs: list[Any]) -> Corruption:
  """A type DirectML's table refuses for this operator (or REDUCE function) at the newest level."""
  f64, i8, i16 = dml.DataType.FLOAT64, dml.DataType.INT8, dml.DataType.INT16
  if op == "top_k":
    return "input_tensor.data_type", _with_types(desc, inputs, {"input_tensor": f64, "output_value_tensor": f64}), True
  if op == "arg_reduce":
    return "input_tensor.data_type", _with_types(desc, inputs, {"input_tensor": f64}), True
  if op == "reduce":
    name = dml.ReduceFunction(desc.function).name.lower()
    bad = i32 if name in ("average", "l2", "log_sum", "log_sum_exp") else (f64 if name in ("max", "min") else i8)
    if name in ("argmax", "argmin"):
      return "input_tensor.data_type", _with_types(desc, inputs, {"input_tensor": f64}), True
    return "input_tensor.data_type", _with_types(desc, inputs, {"input_tensor": bad, "output_tensor": bad}), True
  if op == "gather_nd":
    return "indices_tensor.data_type", _with_types(desc, inputs, {"indices_tensor": i16}), True
  return "indices_tensor.data_type", _with_types(desc, inputs, {"indices_tensor": i8}), True


def _too_old(draw: st.DrawFn, op: str, desc: Any, inputs: list[Any], on: bool) -> Corruption:
  """A feature level older than the operator, or (TOP_K v0, REDUCE at 1_0) than its non-4 rank."""
  level = {"arg_reduce": "2_1", "gather_nd": "2_0", "one_hot": "1_0"}.get(op)
  if isinstance(desc, dml.TopK1Desc):
    level = "2_0"
  if level is not None:
    return "feature_level", lambda: dml.execute(desc, *inputs, feature_level=level), on
  assume(desc.input_tensor.rank != 4)
  return "input_tensor", lambda: dml.execute(desc, *inputs, feature_level=dml.FeatureLevel.FL_1_0), on


@st.composite
def _operator_corruption(draw: st.DrawFn, op: str, desc: Any, inputs: list[Any], on: bool) -> Corruption:
  """A broken operator rule (not a tensor descriptor)."""

  def bad(field: str, **changes: Any) -> Corruption:
    return field, lambda: dml.execute(dataclasses.replace(desc, **changes), *inputs), on

  rank = desc.input_tensor.rank if hasattr(desc, "input_tensor") else desc.indices_tensor.rank
  if op == "top_k":
    size = desc.input_tensor.sizes[desc.axis]
    choice = draw(st.sampled_from(["k0", "kbig", "axis", "direction"]))
    if choice == "k0":
      return bad("k", k=draw(st.sampled_from([0, -1, 1.0, None])))
    if choice == "kbig":
      return bad("k", k=size + draw(st.integers(1, 5)))
    if choice == "axis":
      return bad("axis", axis=draw(st.sampled_from([rank, rank + 3, -1, 0.5])))
    if isinstance(desc, dml.TopKDesc):
      return bad("k", k=0)
    return bad("axis_direction", axis_direction=draw(st.sampled_from([2, -1, "sideways", None])))
  if op in ("arg_reduce", "reduce"):
    choice = draw(st.sampled_from(["range", "repeat", "empty" if op == "arg_reduce" else "range"]))
    if choice == "range":
      return bad("axes", axes=(*desc.axes, draw(st.sampled_from([rank, rank + 2, -1]))))
    if choice == "repeat":
      return bad("axes", axes=(0, 0))
    return bad("axes", axes=())
  if op == "gather_nd":
    choice = draw(st.sampled_from(["batch", "tuple", "input_count", "indices_float"]))
    indices_count = desc.indices_dimension_count
    if choice == "batch" and isinstance(desc, dml.GatherND1Desc):
      return bad("batch_dimension_count", batch_dimension_count=indices_count + draw(st.integers(0, 2)))
    if choice == "tuple":
      x, idx = inputs
      q = desc.input_dimension_count - getattr(desc, "batch_dimension_count", 0) + 1
      sizes = (*desc.indices_tensor.sizes[:-1], q)
      grown_idx = np.zeros(sizes, np.asarray(idx).dtype)
      new = _replace_tensor(desc, "indices_tensor", sizes=sizes)
      return "indices_tensor.sizes[-1]", lambda: dml.execute(new, x, grown_idx), on
    if choice == "input_count":
      return bad("input_dimension_count", input_dimension_count=draw(st.sampled_from([0, rank + 1])))
    x, idx = inputs
    new = _replace_tensor(desc, "indices_tensor", data_type=f32)
    return "indices_tensor.data_type", lambda: dml.execute(new, x, np.asarray(idx).astype(np.float32)), on
  assert op == "one_hot"
  choice = draw(st.sampled_from(["values", "axis", "indices_size"]))
  indices, values = inputs
  if choice == "values":
    one = np.asarray(values).reshape(-1)[:1].reshape((1,) * rank)
    new = _replace_tensor(desc, "values_tensor", sizes=one.shape)
    return "values_tensor", lambda: dml.execute(new, indices, one), on
  if choice == "axis":
    return bad("axis", axis=draw(st.sampled_from([rank, -1, 2.0])))
  sizes = desc.indices_tensor.sizes
  wide = (*sizes[: desc.axis], 2, *sizes[desc.axis + 1 :])
  new = _replace_tensor(desc, "indices_tensor", sizes=wide)
  wide_indices = np.zeros(wide, np.asarray(indices).dtype)
  return "indices_tensor", lambda: dml.execute(new, wide_indices, values), on


@pytest.mark.parametrize("op", sorted(CASES))
@_MANY
@given(data=st.data())
def test_corrupted_descriptor_raises_descriptor_error_naming_the_field(op: str, data: st.DataObject) -> None:
  field, call, on = data.draw(descriptor_corruptions(op))
  with x64(on):
    _assert_names(call, field)


@st.composite
def functional_corruptions(draw: st.DrawFn, op: str) -> Corruption:
  case = draw(CASES[op]())
  array_fields = {"top_k": ["x"], "arg_reduce": ["x"], "reduce": ["x"], "gather_nd": ["x", "indices"]}
  array_fields["one_hot"] = ["indices"]
  field = draw(st.sampled_from(array_fields[op]))
  # one_hot's functional call takes the indices in jax.nn.one_hot's layout (without DirectML's size-1 axis).
  key = "functional_indices" if op == "one_hot" else field
  x = np.asarray(case[key])
  # The functional top_k, argmin/argmax, reduce and one_hot take any rank, size-0 dimensions and 64-bit NumPy data
  # without x64 as the JAX calls they replace do (tests/test_jax_conventions.py); rank 0 is invalid for top_k only.
  kinds = {"gather_nd": ["rank0", "rank9", "size0", "x64"], "top_k": ["rank0"]}.get(op, [])
  kind = draw(st.sampled_from([*kinds, "junk", "op"]))

  def with_(value: Any, name: str = field, keep_x64: bool = True) -> Corruption:
    return name, lambda: call_functional({**case, key: value}), keep_x64 and case["x64"]

  if kind == "rank0":
    return with_(x.reshape(-1)[0])
  if kind == "rank9":
    return with_(x.reshape(-1)[:1].reshape((1,) * 9))
  if kind == "size0":
    x = x.reshape(x.shape or (1,))  # one_hot's indices may be 0-d
    d = draw(st.integers(0, x.ndim - 1))
    return with_(np.take(x, np.arange(0), axis=d))
  if kind == "x64":
    wide = np.dtype(np.int64) if x.dtype.kind in "iu" else np.dtype(np.float64)
    return with_(x.astype(wide), keep_x64=False)
  if kind == "junk":
    return with_(draw(st.sampled_from([None, "abc", [[1], [2, 3]], np.array(["a"]), np.array([object()])])))
  if op == "top_k":
    choice = draw(st.sampled_from(["k", "axis", "direction", "index_dtype"]))
    if choice == "k":
      k = draw(st.sampled_from([-1, case["x"].shape[case["axis"]] + 1, 1.5]))  # k = 0 is valid, as in lax.top_k
      return "k", lambda: call_functional({**case, "k": k}), case["x64"]
    if choice == "axis":
      rank = case["x"].ndim
      return (
        "axis",
        lambda: call_functional({**case, "functional_axis": draw(st.sampled_from([rank, -rank - 1]))}),
        True,
      )
    if choice == "direction":
      return "direction", lambda: call_functional({**case, "direction": "up"}), case["x64"]
    return "index_dtype", lambda: call_functional({**case, "index_dtype": np.float32}), case["x64"]
  if op in ("arg_reduce", "reduce"):
    rank = case["x"].ndim
    axes = draw(st.sampled_from([(0, -rank), (rank,), (-rank - 1,)]))
    return "axis", lambda: call_functional({**case, "functional_axes": axes}), case["x64"]
  if op == "gather_nd":
    if draw(st.booleans()):
      batch = draw(st.sampled_from([case["indices"].ndim, -1, 1.0]))
      return "batch_dims", lambda: call_functional({**case, "batch_dims": batch}), case["x64"]
    return "indices", lambda: call_functional({**case, "indices": case["indices"].astype(np.float32)}), case["x64"]
  choice = draw(st.sampled_from(["values", "depth", "axis", "indices_float"]))
  if choice == "values":
    value = draw(st.sampled_from(["on_value", "off_value"]))
    not_scalar = np.stack([case[value]] * draw(st.integers(1, 3)))
    return value, lambda: call_functional({**case, value: not_scalar}), case["x64"]
  if choice == "depth":
    return "depth", lambda: call_functional({**case, "depth": draw(st.sampled_from([-1, -3, 2.5]))}), case["x64"]
  if choice == "axis":
    rank = case["functional_indices"].ndim + 1  # the output's rank
    axis = draw(st.sampled_from([rank, -rank - 1, 1.0]))
    return "axis", lambda: call_functional({**case, "functional_axis": axis}), case["x64"]
  indices = case["functional_indices"] > 0  # bool is no index (float indices are deprecated, not refused)
  return "indices", lambda: call_functional({**case, "functional_indices": indices}), case["x64"]


@pytest.mark.parametrize("op", sorted(CASES))
@_MANY
@given(data=st.data())
def test_corrupted_functional_call_raises_descriptor_error_naming_the_field(op: str, data: st.DataObject) -> None:
  field, call, on = data.draw(functional_corruptions(op))
  with x64(on):
    _assert_names(call, field)


# --------------------------------------------------------------------------- one pinned message per SPEC §7 rule

_V = np.zeros((1, 2), np.float32)
_REDUCE_SUM = dml.ReduceDesc(dml.ReduceFunction.SUM, T(f32, (2, 3)), T(f32, (2, 1)), axes=(1,))
_X23 = np.zeros((2, 3), np.float32)


def _top_k1(k: int = 2, axis: int = 1, direction: Any = dml.AxisDirection.DECREASING, out_k: int = 2) -> Thunk:
  desc = dml.TopK1Desc(T(f32, (1, 4)), T(f32, (1, out_k)), T(u32, (1, out_k)), axis=axis, k=k, axis_direction=direction)
  return lambda: dml.execute(desc, np.zeros((1, 4), np.float32))


def _gather1(x_sizes: tuple[int, ...], i_sizes: tuple[int, ...], out: tuple[int, ...], counts: tuple[int, int, int]):
  desc = dml.GatherND1Desc(T(f32, x_sizes), T(u32, i_sizes), T(f32, out), *counts)
  return lambda: dml.execute(desc, np.zeros(x_sizes, np.float32), np.zeros(i_sizes, np.uint32))


def _one_hot(i_sizes: tuple[int, ...], v_sizes: tuple[int, ...], out: tuple[int, ...], axis: int = 1) -> Thunk:
  desc = dml.OneHotDesc(T(u32, i_sizes), T(f32, v_sizes), T(f32, out), axis=axis)
  return lambda: dml.execute(desc, np.zeros(i_sizes, np.uint32), np.zeros(v_sizes, np.float32))


PINNED: list[tuple[str, Thunk, str]] = [  # (rule, call, message)
  (
    "descriptor type",
    lambda: dml.execute(object()),
    "execute: desc must be one of TopKDesc, TopK1Desc, ArgMinDesc, ArgMaxDesc, GatherNDDesc, GatherND1Desc, "
    "ReduceDesc, OneHotDesc; got desc=object",
  ),
  (
    "feature level value",
    lambda: dml.execute(_REDUCE_SUM, _X23, feature_level="9_9"),
    "REDUCE: feature_level must be one of '1_0', '2_0', '2_1', '3_0', '3_1', '4_0', '4_1', '5_0'; "
    "got feature_level='9_9'",
  ),
  (
    "operator newer than the feature level",
    lambda: dml.execute(
      dml.ArgMinDesc(T(f32, (2, 3)), T(u32, (1, 1)), axes=(0, 1), axis_direction=0), _X23, feature_level="2_1"
    ),
    "ARGMIN: ARGMIN needs feature level 3_0 or newer; got feature_level=2_1",
  ),
  (
    "tensor descriptor type",
    lambda: dml.execute(dataclasses.replace(_REDUCE_SUM, output_tensor=(2, 1)), _X23),
    "REDUCE: output_tensor must be a dml.TensorDesc; got output_tensor=tuple",
  ),
  (
    "data type value",
    lambda: dml.execute(dataclasses.replace(_REDUCE_SUM, output_tensor=T(99, (2, 1))), _X23),  # type: ignore[arg-type]
    "REDUCE: output_tensor.data_type must be one of FLOAT32, FLOAT16, UINT32, UINT16, UINT8, INT32, INT16, INT8, "
    "FLOAT64, UINT64, INT64; got output_tensor.data_type=99",
  ),
  (
    "sizes are integers",
    lambda: dml.execute(dataclasses.replace(_REDUCE_SUM, output_tensor=T(f32, (2, 1.0))), _X23),  # type: ignore[arg-type]
    "REDUCE: output_tensor.sizes must be a sequence of integers (or jax.export's symbolic dimensions); "
    "got output_tensor.sizes=(2, 1.0)",
  ),
  (
    "rank 1 to 8",
    lambda: dml.execute(dataclasses.replace(_REDUCE_SUM, input_tensor=T(f32, (1,) * 9)), np.zeros((1,) * 9)),
    "REDUCE: input_tensor must have rank 1 to 8; got input_tensor.sizes=(1, 1, 1, 1, 1, 1, 1, 1, 1) (rank 9)",
  ),
  (
    "no size-0 dimension",
    lambda: dml.execute(dataclasses.replace(_REDUCE_SUM, output_tensor=T(f32, (2, 0))), _X23),
    "REDUCE: output_tensor.sizes must all be >= 1 (DirectML has no size-0 dimensions); got output_tensor.sizes=(2, 0)",
  ),
  (
    "64-bit type needs x64",
    lambda: dml.execute(
      dml.ReduceDesc(dml.ReduceFunction.SUM, T(dml.DataType.INT64, (2,)), T(dml.DataType.INT64, (1,)), axes=(0,)),
      np.zeros(2, np.int64),
    ),
    "REDUCE: 2 problems:\n"
    "  - input_tensor.data_type of type int64 needs jax.config.update('jax_enable_x64', True); "
    "got input_tensor.data_type=int64 with jax_enable_x64 off\n"
    "  - output_tensor.data_type of type int64 needs jax.config.update('jax_enable_x64', True); "
    "got output_tensor.data_type=int64 with jax_enable_x64 off",
  ),
  (
    "same rank",
    lambda: dml.execute(dataclasses.replace(_REDUCE_SUM, output_tensor=T(f32, (1, 2, 1))), _X23),
    "REDUCE: 2 problems:\n"
    "  - input_tensor, output_tensor must have the same rank (DirectML pads the smaller tensors' sizes with leading "
    "1s, e.g. (3, 4) as (1, 3, 4)); got input_tensor.sizes=(2, 3), output_tensor.sizes=(1, 2, 1)\n"
    "  - output_tensor.sizes must be (2, 1); got output_tensor.sizes=(1, 2, 1)",
  ),
  (
    "rank at the feature level",
    lambda: dml.execute(
      dml.OneHotDesc(T(u32, (2, 1)), T(f32, (1, 2)), T(f32, (2, 3)), axis=1),
      np.zeros((2, 1), np.uint32),
      _V,
      feature_level="2_1",
    ),
    "ONE_HOT: 3 problems:\n"
    "  - indices_tensor must have rank 4 at feature level 2_1; got indices_tensor.sizes=(2, 1) (rank 2)\n"
    "  - values_tensor must have rank 4 at feature level 2_1; got values_tensor.sizes=(1, 2) (rank 2)\n"
    "  - output_tensor must have rank 4 at feature level 2_1; got output_tensor.sizes=(2, 3) (rank 2)",
  ),
  (
    "type at the feature level",
    lambda: dml.execute(
      dml.ReduceDesc(dml.ReduceFunction.AVERAGE, T(i32, (2, 3)), T(i32, (2, 1)), axes=(1,)),
      np.zeros((2, 3), np.int32),
    ),
    "REDUCE: 3 problems:\n"
    "  - input_tensor.data_type must be one of FLOAT16, FLOAT32 at feature level 5_0; "
    "got input_tensor.data_type=INT32\n"
    "  - output_tensor.data_type must be one of FLOAT16, FLOAT32 at feature level 5_0; "
    "got output_tensor.data_type=INT32\n"
    "  - function AVERAGE needs a floating input_tensor; got input_tensor.dtype=int32",
  ),
  (
    "input count",
    lambda: dml.execute(_REDUCE_SUM),
    "REDUCE: execute needs 1 input array(s) (input_tensor); got len(inputs)=0",
  ),
  (
    "array shape",
    lambda: dml.execute(_REDUCE_SUM, np.zeros((3, 2), np.float32)),
    "REDUCE: input_tensor array must have shape input_tensor.sizes=(2, 3); got input_tensor array of shape (3, 2)",
  ),
  (
    "array dtype",
    lambda: dml.execute(_REDUCE_SUM, np.zeros((2, 3), np.int32)),
    "REDUCE: input_tensor array must have dtype float32 (input_tensor.data_type=FLOAT32); "
    "got input_tensor array of dtype int32",
  ),
  (
    "array of numbers",
    lambda: dml.execute(_REDUCE_SUM, [[1, 2, 3], [4, 5]]),
    "REDUCE: input_tensor array must hold numbers of type float32; got input_tensor array list (...",
  ),
  (
    "output sizes",
    lambda: dml.execute(dataclasses.replace(_REDUCE_SUM, output_tensor=T(f32, (2, 3))), _X23),
    "REDUCE: output_tensor.sizes must be (2, 1); got output_tensor.sizes=(2, 3)",
  ),
  (
    "output type",
    lambda: dml.execute(dataclasses.replace(_REDUCE_SUM, output_tensor=T(dml.DataType.FLOAT16, (2, 1))), _X23),
    "REDUCE: output_tensor.data_type must be FLOAT32; got output_tensor.data_type=FLOAT16",
  ),
  (
    "axis in range",
    _top_k1(axis=2),
    "TOP_K1: axis must be an integer in [0, 1] for rank 2; got axis=2",
  ),
  (
    "1 <= k <= size",
    _top_k1(k=5, out_k=5),
    "TOP_K1: k must satisfy 1 <= k <= input_tensor.sizes[axis] (= 4); got k=5",
  ),
  (
    "axis direction",
    _top_k1(direction=2),
    "TOP_K1: axis_direction must be a dml.AxisDirection or one of 'increasing', 'decreasing'; got axis_direction=2",
  ),
  (
    "index type holds the axis",
    lambda: jax.eval_shape(
      lambda x: dml.top_k(x, 1, index_dtype=np.int32), jax.ShapeDtypeStruct((2**31 + 1,), np.float32)
    ),
    "top_k: index_dtype int32 cannot index axis 0 of size 2147483649 (largest index 2147483648, int32 holds at "
    "most 2147483647); got index_dtype=int32",
  ),
  (
    "index output of an index type",
    lambda: dml.execute(
      dml.TopK1Desc(T(f32, (1, 4)), T(f32, (1, 2)), T(f32, (1, 2)), axis=1, k=2, axis_direction=0),
      np.zeros((1, 4), np.float32),
    ),
    # The feature-level table and TOP_K's own rule both refuse the value; it is reported once.
    "TOP_K1: output_index_tensor.data_type must be one of UINT32, UINT64 at feature level 5_0; "
    "got output_index_tensor.data_type=FLOAT32",
  ),
  (
    "axes in range",
    lambda: dml.execute(dataclasses.replace(_REDUCE_SUM, axes=(2,)), _X23),
    "REDUCE: axes must hold integers in [0, 1] for rank 2; got axes=(2,)",
  ),
  (
    "axes distinct",
    lambda: dml.execute(dataclasses.replace(_REDUCE_SUM, axes=(1, 1)), _X23),
    "REDUCE: axes must hold distinct axes; got axes=(1, 1)",
  ),
  (
    "axes not empty (ARGMIN/ARGMAX)",
    lambda: dml.execute(dml.ArgMaxDesc(T(f32, (2, 3)), T(u32, (2, 3)), axes=(), axis_direction=0), _X23),
    "ARGMAX: axes must name at least one axis; got axes=()",
  ),
  (
    "index type holds the reduced count",
    lambda: jax.eval_shape(
      lambda x: dml.argmin(x, (0, 1), index_dtype=np.int32), jax.ShapeDtypeStruct((2**16, 2**15 + 1), np.int8)
    ),
    "argmin: index_dtype int32 cannot index the 2147549184 reduced elements of axis (0, 1) (largest index "
    "2147549183, int32 holds at most 2147483647); got index_dtype=int32",
  ),
  (
    "reduce function",
    lambda: dml.execute(dataclasses.replace(_REDUCE_SUM, function=12), _X23),
    "REDUCE: function must be a dml.ReduceFunction or one of 'argmax', 'argmin', 'average', 'l1', 'l2', 'log_sum', "
    "'log_sum_exp', 'max', 'min', 'multiply', 'sum', 'sum_square', 'mean', 'prod', 'product', 'amax', 'amin', "
    "'sum_of_squares'; got function=12",
  ),
  (
    "floating-only function with DirectML's integer rule",
    lambda: dml.reduce(np.zeros(3, np.int32), "l2", promote_integers=False),
    "reduce: function L2 needs a floating x when promote_integers=False (DirectML's integer reductions keep the "
    "input's type, and it has no integer form of this one): pass promote_integers=True for jnp's floating result, "
    "or x.astype(jnp.float32); got x.dtype=int32",
  ),
  (
    "dimension counts in range",
    _gather1((2, 3), (2, 1), (1, 2), (3, 2, 1)),
    "GATHER_ND1: input_dimension_count must be an integer in [1, 2] (the rank of input_tensor); "
    "got input_dimension_count=3",
  ),
  (
    "leading sizes are 1",
    _gather1((2, 3), (2, 1), (1, 2), (1, 2, 0)),
    "GATHER_ND1: input_tensor.sizes before the last input_dimension_count=1 must be 1; got input_tensor.sizes=(2, 3)",
  ),
  (
    "batch count",
    _gather1((2, 3), (2, 1), (1, 2), (2, 2, 2)),
    "GATHER_ND1: batch_dimension_count must be an integer in [0, 1] (below the ranks of input_tensor and "
    "indices_tensor, leaving a dimension to index); "
    "got batch_dimension_count=2",
  ),
  (
    "tuple length",
    _gather1((2, 3), (1, 3), (1, 1), (2, 2, 0)),
    "GATHER_ND1: indices_tensor.sizes[-1] (the index tuple length) must be in [1, 2] (rank of input_tensor minus "
    "batch_dimension_count); got indices_tensor.sizes=(1, 3)",
  ),
  (
    "batch sizes equal",
    _gather1((2, 3), (3, 1), (1, 3), (2, 2, 1)),
    "GATHER_ND1: the 1 batch dimensions of input_tensor and indices_tensor must have equal sizes; "
    "got input_tensor.sizes=(2, 3), indices_tensor.sizes=(3, 1)",
  ),
  (
    "output fits the rank",
    _gather1((2, 3, 4), (2, 2, 1), (2, 2, 3), (3, 3, 0)),
    "GATHER_ND1: the output's meaningful dimensions (indices_dimension_count - 1 + input_dimension_count - "
    "batch_dimension_count - tuple length) must fit the rank 3; got input_dimension_count=3, "
    "indices_dimension_count=3, batch_dimension_count=0 (output dimensions (2, 2, 3, 4))",
  ),
  (
    "integer indices",
    lambda: dml.gather_nd(_X23, np.zeros((1, 1), np.float32)),
    "gather_nd: indices must have an integer dtype; got indices.dtype=float32",
  ),
  (
    "positions need x64",
    lambda: jax.eval_shape(
      lambda x, i: dml.gather_nd(x, i),
      jax.ShapeDtypeStruct((2**31 + 1,), np.int8),
      jax.ShapeDtypeStruct((1,), np.int32),
    ),
    "gather_nd: x.shape[-1] = 2147483649 needs 64-bit positions (int32 holds at most 2147483647): enable "
    "jax.config.update('jax_enable_x64', True); got x.shape[-1]=2147483649 with jax_enable_x64 off",
  ),
  (
    "at least two values",
    _one_hot((2, 1), (1, 1), (2, 3)),
    "ONE_HOT: values_tensor must have at least 2 elements (OffValue, OnValue); got values_tensor.sizes=(1, 1)",
  ),
  (
    "depth at least 0",
    lambda: dml.one_hot(np.zeros(2, np.int32), -1),
    "one_hot: depth must be an integer >= 0; got depth=-1",
  ),
  (
    "indices size 1 on the axis",
    _one_hot((2, 2), (1, 2), (2, 3)),
    "ONE_HOT: indices_tensor must have size 1 on axis 1; got indices_tensor.sizes=(2, 2)",
  ),
  (
    "index dtype option",
    lambda: dml.argmax(_X23, index_dtype=np.float32),
    "argmax: index_dtype must be one of int32, int64, uint32, uint64; got index_dtype=float32",
  ),
  (
    "array of numbers (functional)",
    lambda: dml.top_k(np.array(["a", "b"]), 1),
    "top_k: x must be an array of numbers; got x.dtype=str32",
  ),
  (
    "no empty sequence (functional)",
    lambda: dml.argmax(np.zeros((2, 0), np.float32), 1),
    "argmax: attempt to get argmax of an empty sequence: every reduced axis needs size 1 or more (as for "
    "jnp.argmax); reduce over other axes; got x.shape=(2, 0) with axis (1,) (size 0 on axis (1,))",
  ),
  (
    "64-bit array needs x64 (gather_nd)",
    lambda: dml.gather_nd(np.zeros(2, np.float64), np.zeros((1, 1), np.int64)),
    "gather_nd: 2 problems:\n"
    "  - x of type float64 needs jax.config.update('jax_enable_x64', True), or cast it: "
    "x.astype(np.float32) (which rounds); got x=float64 with jax_enable_x64 off\n"
    "  - indices of type int64 needs jax.config.update('jax_enable_x64', True), or cast it: "
    "indices.astype(np.int32) (its values fit); got indices=int64 with jax_enable_x64 off",
  ),
  (
    "real x",
    lambda: dml.top_k(np.array([1j, 2]), 1),
    "top_k: top_k needs real x (complex numbers have no order; jax.lax.top_k refuses them too): pass jnp.abs(x) to "
    "order by magnitude, or x.real; got x.dtype=complex64",
  ),
]


@pytest.mark.parametrize(("call", "message"), [p[1:] for p in PINNED], ids=[p[0] for p in PINNED])
def test_rule_message_is_pinned(call: Thunk, message: str) -> None:
  with pytest.raises(dml.DescriptorError) as info:
    call()
  assert_got_names_its_field(info.value)
  if message.endswith("..."):  # the rest quotes NumPy's own error, which NumPy may reword
    assert str(info.value).startswith(message[:-3]), str(info.value)
  else:
    assert str(info.value) == message
