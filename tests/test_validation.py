"""Every SPEC §7 rule and seed constraint raises dml.DescriptorError at trace time (issue 2, point 3).

Each case runs under ``jax.eval_shape`` on ``jax.ShapeDtypeStruct`` inputs, so
no data exists: the error can only come from shapes, dtypes and static
parameters. The message text is asserted (operator, field, rule, value given).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import assert_bitwise_equal, assert_got_names_its_field, tensor_desc, x64

import dmljax as dml

S = jax.ShapeDtypeStruct
F32, U32, I32 = np.dtype(np.float32), np.dtype(np.uint32), np.dtype(np.int32)


@dataclasses.dataclass(frozen=True)
class Case:
  id: str
  call: Callable[..., Any]
  inputs: tuple[S, ...]
  expected: tuple[str, ...]  # fragments that must all appear in the message
  wide: bool = False  # run with jax_enable_x64 on


def T(name: str, *sizes: int) -> dml.TensorDesc:
  return tensor_desc(name, sizes)


def run(desc: Any, level: Any = None) -> Callable[..., Any]:
  return lambda *xs: dml.execute(desc, *xs, feature_level=level)


# ------------------------------------------------------------------ TOP_K1
def top_k1(
  x=("FLOAT32", (1, 1, 3, 4)), values=None, indices=None, axis=3, k=2, direction=dml.AxisDirection.DECREASING
) -> dml.TopK1Desc:
  out = (*x[1][:axis], k, *x[1][axis + 1 :]) if isinstance(axis, int) and 0 <= axis < len(x[1]) else x[1]
  return dml.TopK1Desc(
    tensor_desc(x[0], x[1]),
    values or tensor_desc(x[0], out),
    indices or tensor_desc("UINT32", out),
    axis=axis,
    k=k,
    axis_direction=direction,
  )


X4 = (S((1, 1, 3, 4), F32),)

CASES = [
  Case(
    "top_k1_k_too_large",
    run(top_k1(k=5, values=T("FLOAT32", 1, 1, 3, 5), indices=T("UINT32", 1, 1, 3, 5))),
    X4,
    ("TOP_K1: k must satisfy 1 <= k <= input_tensor.sizes[axis] (= 4); got k=5",),
  ),
  Case(
    "top_k1_k_zero",
    run(top_k1(k=0, values=T("FLOAT32", 1, 1, 3, 1), indices=T("UINT32", 1, 1, 3, 1))),
    X4,
    ("TOP_K1: k must satisfy 1 <= k <= input_tensor.sizes[axis] (= 4); got k=0",),
  ),
  Case(
    "top_k1_axis_out_of_range",
    run(top_k1(axis=4)),
    X4,
    ("TOP_K1: axis must be an integer in [0, 3] for rank 4; got axis=4",),
  ),
  Case(
    "top_k1_negative_axis_descriptor",
    run(top_k1(axis=-1)),
    X4,
    ("TOP_K1: axis must be an integer in [0, 3] for rank 4; got axis=-1",),
  ),
  Case(
    "top_k1_direction_invalid",
    run(top_k1(direction=2)),
    X4,
    ("TOP_K1: axis_direction must be a dml.AxisDirection or one of 'increasing', 'decreasing'; got axis_direction=2",),
  ),
  Case(
    "top_k1_rank_0",
    run(dml.TopK1Desc(T("FLOAT32"), T("FLOAT32"), T("UINT32"), axis=0, k=1, axis_direction=0)),
    (S((), F32),),
    ("input_tensor must have rank 1 to 8; got input_tensor.sizes=() (rank 0)",),
  ),
  Case(
    "top_k1_rank_9",
    run(top_k1(x=("FLOAT32", (1,) * 8 + (4,)), axis=8)),
    (S((1,) * 8 + (4,), F32),),
    ("input_tensor must have rank 1 to 8; got input_tensor.sizes=(1, 1, 1, 1, 1, 1, 1, 1, 4) (rank 9)",),
  ),
  Case(
    "top_k1_size_0",
    run(top_k1(x=("FLOAT32", (1, 0, 3, 4)))),
    (S((1, 0, 3, 4), F32),),
    (
      "TOP_K1: ",
      "input_tensor.sizes must all be >= 1 (DirectML has no size-0 dimensions); got input_tensor.sizes=(1, 0, 3, 4)",
    ),
  ),
  Case(
    "top_k1_value_type_differs",
    run(top_k1(values=T("FLOAT16", 1, 1, 3, 2))),
    X4,
    ("TOP_K1: output_value_tensor.data_type must be FLOAT32; got output_value_tensor.data_type=FLOAT16",),
  ),
  Case(
    "top_k1_value_sizes_differ",
    run(top_k1(values=T("FLOAT32", 1, 1, 3, 3))),
    X4,
    ("TOP_K1: output_value_tensor.sizes must be (1, 1, 3, 2); got output_value_tensor.sizes=(1, 1, 3, 3)",),
  ),
  Case(
    "top_k1_index_type_int32",
    run(top_k1(indices=T("INT32", 1, 1, 3, 2))),
    X4,
    ("output_index_tensor.data_type must be one of UINT32, UINT64 at feature level 5_0", "=INT32"),
  ),
  Case(
    "top_k1_rank_mismatch",
    run(top_k1(values=T("FLOAT32", 3, 2), indices=T("UINT32", 3, 2))),
    X4,
    (
      "input_tensor, output_value_tensor, output_index_tensor must have the same rank (DirectML pads the smaller "
      "tensors' sizes with leading 1s, e.g. (3, 4) as (1, 3, 4)); got input_tensor.sizes=(1, 1, 3, 4), "
      "output_value_tensor.sizes=(3, 2), output_index_tensor.sizes=(3, 2)",
    ),
  ),
  Case(
    "top_k1_int64_at_3_1",
    run(top_k1(x=("INT64", (1, 1, 3, 4))), "3_1"),
    (S((1, 1, 3, 4), np.dtype(np.int64)),),
    ("TOP_K1: ", "input_tensor.data_type must be one of ", "at feature level 3_1; got input_tensor.data_type=INT64"),
    wide=True,
  ),
  Case(
    "top_k1_uint64_index_before_5_0",
    run(top_k1(indices=T("UINT64", 1, 1, 3, 2)), dml.FeatureLevel.FL_4_1),
    X4,
    (
      "output_index_tensor.data_type must be one of UINT32 at feature level 4_1"
      "; got output_index_tensor.data_type=UINT64",
    ),
    wide=True,
  ),
  Case(
    "top_k1_rank_3_at_2_1",
    run(top_k1(x=("FLOAT32", (1, 3, 4)), axis=2), "2_1"),
    (S((1, 3, 4), F32),),
    ("input_tensor must have rank 4 at feature level 2_1; got input_tensor.sizes=(1, 3, 4) (rank 3)",),
  ),
  Case(
    "top_k1_below_introduction",
    run(top_k1(), "2_0"),
    X4,
    ("TOP_K1: TOP_K1 needs feature level 2_1 or newer; got feature_level=2_0",),
  ),
  Case(
    "top_k_v0_k_too_large",
    run(dml.TopKDesc(T("FLOAT32", 2, 3), T("FLOAT32", 2, 4), T("UINT32", 2, 4), axis=1, k=4)),
    (S((2, 3), F32),),
    ("TOP_K: k must satisfy 1 <= k <= input_tensor.sizes[axis] (= 3); got k=4",),
  ),
  Case(
    "feature_level_unknown",
    run(top_k1(), "9_9"),
    X4,
    (
      "TOP_K1: feature_level must be one of '1_0', '2_0', '2_1', '3_0', '3_1', '4_0', '4_1', '5_0'; "
      "got feature_level='9_9'",
    ),
  ),
  Case(
    "wrong_number_of_inputs",
    run(top_k1()),
    (*X4, S((1, 1, 3, 4), F32)),
    ("TOP_K1: execute needs 1 input array(s) (input_tensor); got len(inputs)=2",),
  ),
  Case(
    "array_shape_differs",
    run(top_k1()),
    (S((1, 1, 4, 3), F32),),
    (
      "TOP_K1: input_tensor array must have shape input_tensor.sizes=(1, 1, 3, 4); "
      "got input_tensor array of shape (1, 1, 4, 3)",
    ),
  ),
  Case(
    "array_dtype_differs",
    run(top_k1()),
    (S((1, 1, 3, 4), np.dtype(np.float16)),),
    (
      "TOP_K1: input_tensor array must have dtype float32 (input_tensor.data_type=FLOAT32); "
      "got input_tensor array of dtype float16",
    ),
  ),
  Case(
    "int64_descriptor_without_x64",
    run(top_k1(x=("INT64", (1, 1, 3, 4)))),
    (S((1, 1, 3, 4), I32),),
    ("input_tensor.data_type of type int64 needs jax.config.update('jax_enable_x64', True)",),
  ),
  # ---------------------------------------------------------------- ARGMIN/ARGMAX
  Case(
    "argmin_repeated_axes",
    run(dml.ArgMinDesc(T("FLOAT32", 3, 3), T("UINT32", 1, 3), axes=(0, 0), axis_direction=0)),
    (S((3, 3), F32),),
    ("ARGMIN: axes must hold distinct axes; got axes=(0, 0)",),
  ),
  Case(
    "argmax_axis_out_of_range",
    run(dml.ArgMaxDesc(T("FLOAT32", 3, 3), T("UINT32", 3, 3), axes=(2,), axis_direction=0)),
    (S((3, 3), F32),),
    ("ARGMAX: axes must hold integers in [0, 1] for rank 2; got axes=(2,)",),
  ),
  Case(
    "argmin_no_axes",
    run(dml.ArgMinDesc(T("FLOAT32", 3, 3), T("UINT32", 3, 3), axes=(), axis_direction=0)),
    (S((3, 3), F32),),
    ("ARGMIN: axes must name at least one axis; got axes=()",),
  ),
  Case(
    "argmin_output_rank_differs",
    run(dml.ArgMinDesc(T("FLOAT32", 3, 3), T("UINT32", 3), axes=(0,), axis_direction=0)),
    (S((3, 3), F32),),
    (
      "ARGMIN: ",
      "input_tensor, output_tensor must have the same rank (DirectML pads the smaller tensors' sizes with leading 1s, "
      "e.g. (3, 4) as (1, 3, 4)); got input_tensor.sizes=(3, 3), output_tensor.sizes=(3,)",
      "output_tensor.sizes must be (1, 3); got output_tensor.sizes=(3,)",
    ),
  ),
  Case(
    "argmin_output_float",
    run(dml.ArgMinDesc(T("FLOAT32", 3, 3), T("FLOAT32", 1, 3), axes=(0,), axis_direction=0)),
    (S((3, 3), F32),),
    ("ARGMIN: output_tensor.data_type must be one of INT32, INT64, UINT32, UINT64 at feature level 5_0",),
  ),
  Case(
    "argmin_output_sizes",
    run(dml.ArgMinDesc(T("FLOAT32", 3, 3), T("UINT32", 3, 1), axes=(0,), axis_direction=0)),
    (S((3, 3), F32),),
    ("ARGMIN: output_tensor.sizes must be (1, 3); got output_tensor.sizes=(3, 1)",),
  ),
  Case(
    "argmin_below_introduction",
    run(dml.ArgMinDesc(T("FLOAT32", 3, 3), T("UINT32", 1, 3), axes=(0,), axis_direction=0), "2_1"),
    (S((3, 3), F32),),
    ("ARGMIN: ARGMIN needs feature level 3_0 or newer; got feature_level=2_1",),
  ),
  Case(
    "argmax_int64_at_3_0",
    run(dml.ArgMaxDesc(T("INT64", 3, 3), T("UINT32", 1, 3), axes=(0,), axis_direction=0), "3_0"),
    (S((3, 3), np.dtype(np.int64)),),
    ("ARGMAX: input_tensor.data_type must be one of ", "at feature level 3_0; got input_tensor.data_type=INT64"),
    wide=True,
  ),
  # ---------------------------------------------------------------- GATHER_ND1
  Case(
    "gather_batch_count_too_large",
    run(dml.GatherND1Desc(T("FLOAT32", 2, 2), T("UINT32", 2, 1), T("FLOAT32", 2, 2), 2, 2, 2)),
    (S((2, 2), F32), S((2, 1), U32)),
    (
      "GATHER_ND1: batch_dimension_count must be an integer in [0, 1] (below the ranks of input_tensor and "
      "indices_tensor, leaving a dimension to index)",
      "got batch_dimension_count=2",
    ),
  ),
  Case(
    "gather_tuple_too_long",
    run(dml.GatherND1Desc(T("FLOAT32", 1, 3, 2, 2), T("UINT32", 1, 3, 2, 3), T("FLOAT32", 1, 1, 3, 2), 3, 3, 1)),
    (S((1, 3, 2, 2), F32), S((1, 3, 2, 3), U32)),
    (
      "GATHER_ND1: indices_tensor.sizes[-1] (the index tuple length) must be in [1, 2] "
      "(rank of input_tensor minus batch_dimension_count); got indices_tensor.sizes=(3, 2, 3)",
    ),
  ),
  Case(
    "gather_leading_dims_not_1",
    run(dml.GatherND1Desc(T("FLOAT32", 2, 2, 2), T("UINT32", 1, 2, 1), T("FLOAT32", 1, 2, 2), 2, 2, 0)),
    (S((2, 2, 2), F32), S((1, 2, 1), U32)),
    (
      "GATHER_ND1: input_tensor.sizes before the last input_dimension_count=2 must be 1"
      "; got input_tensor.sizes=(2, 2, 2)",
    ),
  ),
  Case(
    "gather_batch_sizes_differ",
    run(dml.GatherND1Desc(T("FLOAT32", 1, 3, 2, 2), T("UINT32", 1, 2, 2, 2), T("FLOAT32", 1, 1, 2, 2), 3, 3, 1)),
    (S((1, 3, 2, 2), F32), S((1, 2, 2, 2), U32)),
    (
      "GATHER_ND1: the 1 batch dimensions of input_tensor and indices_tensor must have equal sizes; "
      "got input_tensor.sizes=(3, 2, 2), indices_tensor.sizes=(2, 2, 2)",
    ),
  ),
  Case(
    "gather_index_type_float",
    run(dml.GatherND1Desc(T("FLOAT32", 2, 2), T("FLOAT32", 2, 1), T("FLOAT32", 2, 2), 2, 2, 0)),
    (S((2, 2), F32), S((2, 1), F32)),
    ("GATHER_ND1: indices_tensor.data_type must be one of INT32, INT64, UINT32, UINT64 at feature level 5_0",),
  ),
  Case(
    "gather_output_type_differs",
    run(dml.GatherND1Desc(T("FLOAT32", 2, 2), T("UINT32", 2, 1), T("FLOAT16", 2, 2), 2, 2, 0)),
    (S((2, 2), F32), S((2, 1), U32)),
    ("GATHER_ND1: output_tensor.data_type must be FLOAT32; got output_tensor.data_type=FLOAT16",),
  ),
  Case(
    "gather_output_sizes_differ",
    run(dml.GatherND1Desc(T("FLOAT32", 2, 2), T("UINT32", 2, 1), T("FLOAT32", 1, 2), 2, 2, 0)),
    (S((2, 2), F32), S((2, 1), U32)),
    ("GATHER_ND1: output_tensor.sizes must be (2, 2); got output_tensor.sizes=(1, 2)",),
  ),
  Case(
    "gather_below_introduction",
    run(dml.GatherND1Desc(T("FLOAT32", 2, 2), T("UINT32", 2, 1), T("FLOAT32", 2, 2), 2, 2, 0), "2_1"),
    (S((2, 2), F32), S((2, 1), U32)),
    ("GATHER_ND1: GATHER_ND1 needs feature level 3_0 or newer; got feature_level=2_1",),
  ),
  Case(
    "gather_nd_v0_tuple_too_long",
    run(dml.GatherNDDesc(T("FLOAT32", 2, 2), T("UINT32", 1, 3), T("FLOAT32", 1, 1), 2, 2)),
    (S((2, 2), F32), S((1, 3), U32)),
    ("GATHER_ND: indices_tensor.sizes[-1] (the index tuple length) must be in [1, 2]",),
  ),
  # ---------------------------------------------------------------- REDUCE
  Case(
    "reduce_average_int32",
    run(dml.ReduceDesc(dml.ReduceFunction.AVERAGE, T("INT32", 3, 3), T("INT32", 1, 3), axes=(0,))),
    (S((3, 3), I32),),
    (
      "REDUCE: ",
      "input_tensor.data_type must be one of FLOAT16, FLOAT32 at feature level 5_0; got input_tensor.data_type=INT32",
      "function AVERAGE needs a floating input_tensor; got input_tensor.dtype=int32",
    ),
  ),
  Case(
    "reduce_repeated_axes",
    run(dml.ReduceDesc(dml.ReduceFunction.SUM, T("FLOAT32", 3, 3), T("FLOAT32", 3, 1), axes=(1, 1))),
    (S((3, 3), F32),),
    ("REDUCE: axes must hold distinct axes; got axes=(1, 1)",),
  ),
  Case(
    "reduce_output_type_differs",
    run(dml.ReduceDesc(dml.ReduceFunction.SUM, T("FLOAT32", 3, 3), T("FLOAT16", 3, 1), axes=(1,))),
    (S((3, 3), F32),),
    ("REDUCE: output_tensor.data_type must be FLOAT32; got output_tensor.data_type=FLOAT16",),
  ),
  Case(
    "reduce_output_sizes_differ",
    run(dml.ReduceDesc(dml.ReduceFunction.MAX, T("FLOAT32", 3, 3), T("FLOAT32", 1, 3), axes=(1,))),
    (S((3, 3), F32),),
    ("REDUCE: output_tensor.sizes must be (3, 1); got output_tensor.sizes=(1, 3)",),
  ),
  Case(
    "reduce_argmax_output_float",
    run(dml.ReduceDesc(dml.ReduceFunction.ARGMAX, T("FLOAT32", 3, 3), T("FLOAT32", 3, 1), axes=(1,))),
    (S((3, 3), F32),),
    # One problem for the one bad value, although the feature-level table and ARG's own rule both refuse it.
    (
      "REDUCE: output_tensor.data_type must be one of INT32, INT64, UINT32, UINT64 at feature level 5_0; "
      "got output_tensor.data_type=FLOAT32",
    ),
  ),
  Case(
    "reduce_sum_int8_at_5_0",
    run(dml.ReduceDesc(dml.ReduceFunction.SUM, T("INT8", 3, 3), T("INT8", 3, 1), axes=(1,))),
    (S((3, 3), np.dtype(np.int8)),),
    (
      "REDUCE: input_tensor.data_type must be one of FLOAT16, FLOAT32, INT32, INT64, UINT32, UINT64"
      " at feature level 5_0",
    ),
  ),
  Case(
    "reduce_rank_2_at_2_1",
    run(dml.ReduceDesc(dml.ReduceFunction.SUM, T("FLOAT32", 3, 3), T("FLOAT32", 3, 1), axes=(1,)), "2_1"),
    (S((3, 3), F32),),
    ("REDUCE: input_tensor must have rank 4 at feature level 2_1; got input_tensor.sizes=(3, 3) (rank 2)",),
  ),
  Case(
    "reduce_function_invalid",
    run(dml.ReduceDesc(99, T("FLOAT32", 3, 3), T("FLOAT32", 3, 1), axes=(1,))),
    (S((3, 3), F32),),
    (
      "REDUCE: function must be a dml.ReduceFunction or one of 'argmax', 'argmin', 'average', 'l1', 'l2', 'log_sum', "
      "'log_sum_exp', 'max', 'min', 'multiply', 'sum', 'sum_square', 'mean', 'prod', 'product', 'amax', 'amin', "
      "'sum_of_squares'; got function=99",
    ),
  ),
  # ---------------------------------------------------------------- ONE_HOT
  Case(
    "one_hot_values_too_few",
    run(dml.OneHotDesc(T("UINT32", 1, 1, 3, 1), T("FLOAT32", 1, 1, 1, 1), T("FLOAT32", 1, 1, 3, 4), axis=3)),
    (S((1, 1, 3, 1), U32), S((1, 1, 1, 1), F32)),
    ("ONE_HOT: values_tensor must have at least 2 elements (OffValue, OnValue); got values_tensor.sizes=(1, 1, 1, 1)",),
  ),
  Case(
    "one_hot_indices_not_1_on_axis",
    run(dml.OneHotDesc(T("UINT32", 1, 1, 3, 2), T("FLOAT32", 1, 1, 1, 2), T("FLOAT32", 1, 1, 3, 4), axis=3)),
    (S((1, 1, 3, 2), U32), S((1, 1, 1, 2), F32)),
    ("ONE_HOT: indices_tensor must have size 1 on axis 3; got indices_tensor.sizes=(1, 1, 3, 2)",),
  ),
  Case(
    "one_hot_output_type_differs",
    run(dml.OneHotDesc(T("UINT32", 1, 1, 3, 1), T("FLOAT32", 1, 1, 1, 2), T("FLOAT16", 1, 1, 3, 4), axis=3)),
    (S((1, 1, 3, 1), U32), S((1, 1, 1, 2), F32)),
    ("ONE_HOT: output_tensor.data_type must be FLOAT32; got output_tensor.data_type=FLOAT16",),
  ),
  Case(
    "one_hot_output_sizes_differ",
    run(dml.OneHotDesc(T("UINT32", 1, 1, 3, 1), T("FLOAT32", 1, 1, 1, 2), T("FLOAT32", 1, 1, 2, 4), axis=3)),
    (S((1, 1, 3, 1), U32), S((1, 1, 1, 2), F32)),
    ("ONE_HOT: output_tensor.sizes must be (1, 1, 3, 4); got output_tensor.sizes=(1, 1, 2, 4)",),
  ),
  Case(
    "one_hot_values_rank_differs",
    run(dml.OneHotDesc(T("UINT32", 1, 1, 3, 1), T("FLOAT32", 2), T("FLOAT32", 1, 1, 3, 4), axis=3)),
    (S((1, 1, 3, 1), U32), S((2,), F32)),
    ("ONE_HOT: indices_tensor, values_tensor, output_tensor must have the same rank",),
  ),
  Case(
    "one_hot_axis_out_of_range",
    run(dml.OneHotDesc(T("UINT32", 1, 1, 3, 1), T("FLOAT32", 1, 1, 1, 2), T("FLOAT32", 1, 1, 3, 4), axis=4)),
    (S((1, 1, 3, 1), U32), S((1, 1, 1, 2), F32)),
    ("ONE_HOT: axis must be an integer in [0, 3] for rank 4; got axis=4",),
  ),
  Case(
    "one_hot_int32_values_at_2_0",
    run(dml.OneHotDesc(T("UINT32", 1, 1, 3, 1), T("INT32", 1, 1, 1, 2), T("INT32", 1, 1, 3, 4), axis=3), "2_0"),
    (S((1, 1, 3, 1), U32), S((1, 1, 1, 2), I32)),
    (
      "ONE_HOT: 2 problems",
      "values_tensor.data_type must be one of FLOAT16, FLOAT32 at feature level 2_0; got values_tensor.data_type=INT32",
      "output_tensor.data_type must be one of FLOAT16, FLOAT32 at feature level 2_0; got output_tensor.data_type=INT32",
    ),
  ),
  Case(
    "one_hot_int32_indices_at_2_1",
    run(dml.OneHotDesc(T("INT32", 1, 1, 3, 1), T("FLOAT32", 1, 1, 1, 2), T("FLOAT32", 1, 1, 3, 4), axis=3), "2_1"),
    (S((1, 1, 3, 1), I32), S((1, 1, 1, 2), F32)),
    (
      "ONE_HOT: indices_tensor.data_type must be one of UINT32 at feature level 2_1"
      "; got indices_tensor.data_type=INT32",
    ),
  ),
  Case(
    "one_hot_below_introduction",
    run(dml.OneHotDesc(T("UINT32", 1, 1, 3, 1), T("FLOAT32", 1, 1, 1, 2), T("FLOAT32", 1, 1, 3, 4), axis=3), "1_0"),
    (S((1, 1, 3, 1), U32), S((1, 1, 1, 2), F32)),
    ("ONE_HOT: ONE_HOT needs feature level 2_0 or newer; got feature_level=1_0",),
  ),
  # ---------------------------------------------------------------- functional path
  Case(
    "fn_top_k_k_too_large",
    lambda x: dml.top_k(x, 5),
    (S((3, 4), F32),),
    ("top_k: k must satisfy 0 <= k <= x.shape[axis] (= 4); got k=5",),
  ),
  Case(
    "fn_top_k_axis",
    lambda x: dml.top_k(x, 1, axis=-3),
    (S((3, 4), F32),),
    ("top_k: axis must be an integer in [-2, 1] for rank 2; got axis=-3",),
  ),
  Case(
    "fn_top_k_direction",
    lambda x: dml.top_k(x, 1, direction="sideways"),
    (S((3, 4), F32),),
    ("top_k: direction must be one of 'increasing', 'decreasing'; got direction='sideways'",),
  ),
  Case(
    "fn_top_k_rank_0",
    lambda x: dml.top_k(x, 1),
    (S((), F32),),
    ("top_k: x must have rank 1 or more; got x.shape=() (rank 0)",),
  ),
  Case(
    "fn_top_k_index_dtype",
    lambda x: dml.top_k(x, 1, index_dtype=np.float32),
    (S((3, 4), F32),),
    ("top_k: index_dtype must be one of int32, int64, uint32, uint64; got index_dtype=",),
  ),
  Case(
    "fn_top_k_index_dtype_64_without_x64",
    lambda x: dml.top_k(x, 1, index_dtype=np.int64),
    (S((3, 4), F32),),
    ("top_k: index_dtype of type int64 needs jax.config.update('jax_enable_x64', True)",),
  ),
  Case(
    "fn_top_k_complex",
    lambda x: dml.top_k(x, 1),
    (S((3, 4), np.dtype(np.complex64)),),
    (
      "top_k: top_k needs real x (complex numbers have no order; jax.lax.top_k refuses them too): pass jnp.abs(x) "
      "to order by magnitude, or x.real; got x.dtype=complex64",
    ),
  ),
  Case(
    "fn_argmin_repeated_axes",
    lambda x: dml.argmin(x, (1, -1)),
    (S((3, 4), F32),),
    ("argmin: axis must hold distinct axes; got axis=(1, -1)",),
  ),
  Case(
    "fn_argmax_axis_of_rank_0",
    lambda x: dml.argmax(x, 0),
    (S((), F32),),
    ("argmax: axis must name no axis for rank 0 (pass None); got axis=(0,)",),
  ),
  Case(
    "fn_argmin_empty_reduced_axis",
    lambda x: dml.argmin(x, 0),
    (S((0, 3), F32),),
    (
      "argmin: attempt to get argmin of an empty sequence: every reduced axis needs size 1 or more (as for "
      "jnp.argmin); reduce over other axes; got x.shape=(0, 3) with axis (0,) (size 0 on axis (0,))",
    ),
  ),
  Case(
    "fn_reduce_max_empty_reduced_axis",
    lambda x: dml.reduce(x, "max", (-1,)),
    (S((3, 0), F32),),
    (
      "reduce: zero-size array to reduction operation max which has no identity: every reduced axis needs size 1 "
      "or more (as for jnp.max); reduce over other axes, or use jnp.max(x, axis, initial=...); got x.shape=(3, 0)",
    ),
  ),
  Case(
    "fn_gather_empty_indexed_dim",
    lambda x, i: dml.gather_nd(x, i),
    (S((0, 3), F32), S((2, 1), I32)),
    ("gather_nd: x must have no size-0 dimension (DirectML has none); got x.shape=(0, 3)",),
  ),
  Case(
    "fn_reduce_average_int_in_its_type",
    lambda x: dml.reduce(x, "average", promote_integers=False),
    (S((3, 4), I32),),
    ("reduce: function AVERAGE needs a floating x when promote_integers=False",),
  ),
  Case(
    "fn_reduce_unknown_function",
    lambda x: dml.reduce(x, "meen"),
    (S((3, 4), F32),),
    (
      "reduce: function must be one of 'argmax', 'argmin', 'average', 'l1', 'l2', 'log_sum', 'log_sum_exp', 'max', "
      "'min', 'multiply', 'sum', 'sum_square', 'mean', 'prod', 'product', 'amax', 'amin', 'sum_of_squares' "
      "(did you mean 'mean'?); got function='meen'",
    ),
  ),
  Case(
    "fn_reduce_axis_out_of_range",
    lambda x: dml.reduce(x, "sum", (2,)),
    (S((3, 4), F32),),
    ("reduce: axis must hold integers in [-2, 1] for rank 2; got axis=(2,)",),
  ),
  Case(
    "fn_gather_float_indices",
    lambda x, i: dml.gather_nd(x, i),
    (S((3, 4), F32), S((2, 1), F32)),
    ("gather_nd: indices must have an integer dtype; got indices.dtype=float32",),
  ),
  Case(
    "fn_gather_batch_mismatch",
    lambda x, i: dml.gather_nd(x, i, batch_dims=1),
    (S((3, 4), F32), S((2, 1), I32)),
    (
      "gather_nd: the 1 batch dimensions of x and indices must have equal sizes"
      "; got x.shape=(3, 4), indices.shape=(2, 1)",
    ),
  ),
  Case(
    "fn_gather_tuple_too_long",
    lambda x, i: dml.gather_nd(x, i),
    (S((3, 4), F32), S((2, 3), I32)),
    (
      "gather_nd: indices.shape[-1] (the index tuple length) must be in [1, 2] (rank of x minus batch_dims)"
      "; got indices.shape=(2, 3)",
    ),
  ),
  Case(
    "fn_gather_batch_dims_too_large",
    lambda x, i: dml.gather_nd(x, i, batch_dims=2),
    (S((3, 4), F32), S((3, 1), I32)),
    (
      "gather_nd: batch_dims must be an integer in [0, 1] (below the ranks of x and indices, leaving a dimension to "
      "index); got batch_dims=2",
    ),
  ),
  Case(
    "fn_one_hot_bool_indices",
    lambda i, v: dml.one_hot(i, 3, on_value=v[1], off_value=v[0]),
    (S((4,), np.dtype(bool)), S((2,), F32)),
    (
      "one_hot: indices must have an integer dtype (bool is no index; jax.nn.one_hot refuses it too): pass "
      "indices.astype(jnp.int32); got indices.dtype=bool",
    ),
  ),
  Case(
    # jax.nn.one_hot's layout: the output has rank indices.ndim + 1, and axis is one of its axes.
    "fn_one_hot_axis_out_of_range",
    lambda i, v: dml.one_hot(i, 3, axis=2, on_value=v[1], off_value=v[0]),
    (S((4,), I32), S((2,), F32)),
    ("one_hot: axis must be an integer in [-2, 1] for the output's rank 2; got axis=2",),
  ),
  Case(
    # DirectML's values tensor held OffValue and OnValue; the functional path takes each as a scalar.
    "fn_one_hot_on_value_not_scalar",
    lambda i, v: dml.one_hot(i, 3, on_value=v, off_value=v[0]),
    (S((4,), I32), S((2,), F32)),
    ("one_hot: on_value must be a scalar; got on_value.shape=(2,)",),
  ),
  Case(
    "fn_one_hot_depth_negative",
    lambda i, v: dml.one_hot(i, -1, on_value=v[1], off_value=v[0]),
    (S((4,), I32), S((2,), F32)),
    ("one_hot: depth must be an integer >= 0; got depth=-1",),
  ),
]


@pytest.fixture(autouse=True)
def _every_got_names_its_field(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
  """Checks every DescriptorError raised in this module, whichever test raised it and however it was caught."""
  raised: list[dml.DescriptorError] = []
  init = dml.DescriptorError.__init__

  def recording_init(self: dml.DescriptorError, *args: Any, **kwargs: Any) -> None:
    init(self, *args, **kwargs)
    raised.append(self)

  monkeypatch.setattr(dml.DescriptorError, "__init__", recording_init)
  yield
  for error in raised:
    assert_got_names_its_field(error)


def _context(case: Case) -> contextlib.AbstractContextManager[None]:
  return x64() if case.wide else contextlib.nullcontext()


def _assert_mentions(error: dml.DescriptorError, fragment: str) -> None:
  """``fragment`` is in the message; an ``"OP: "`` prefix must be the error's operator (one problem or several)."""
  message = str(error)
  prefix = f"{error.operator}: "
  assert message.startswith(prefix), message
  if fragment.startswith(prefix) and len(error.problems) > 1:
    fragment = fragment.removeprefix(prefix)
  assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_raises_at_trace_time(case):
  with _context(case), pytest.raises(dml.DescriptorError) as info:
    jax.eval_shape(case.call, *case.inputs)
  for fragment in case.expected:
    _assert_mentions(info.value, fragment)


@pytest.mark.parametrize("case", CASES[::4], ids=[c.id for c in CASES[::4]])
def test_rule_raises_when_lowering_a_jit(case):
  with _context(case), pytest.raises(dml.DescriptorError) as info:
    jax.jit(case.call).lower(*case.inputs)
  _assert_mentions(info.value, case.expected[0])


def test_descriptor_error_is_a_value_error():
  assert issubclass(dml.DescriptorError, ValueError)
  with pytest.raises(ValueError, match=r"^TOP_K1: k must satisfy"):
    jax.eval_shape(run(top_k1(k=9, values=T("FLOAT32", 1, 1, 3, 9), indices=T("UINT32", 1, 1, 3, 9))), *X4)


def test_the_spec_example_message_exactly():
  desc = top_k1(k=5, values=T("FLOAT32", 1, 1, 3, 5), indices=T("UINT32", 1, 1, 3, 5))
  with pytest.raises(dml.DescriptorError) as info:
    jax.eval_shape(run(desc), *X4)
  assert str(info.value) == "TOP_K1: k must satisfy 1 <= k <= input_tensor.sizes[axis] (= 4); got k=5"
  assert info.value.problems == ("k must satisfy 1 <= k <= input_tensor.sizes[axis] (= 4); got k=5",)


def test_several_problems_in_one_error():
  desc = dml.TopK1Desc(
    T("FLOAT32", 1, 1, 3, 4), T("INT32", 1, 1, 3, 2), T("UINT32", 1, 1, 3, 3), axis=3, k=2, axis_direction=7
  )
  with pytest.raises(dml.DescriptorError) as info:
    jax.eval_shape(run(desc), *X4)
  error = info.value
  assert error.operator == "TOP_K1"
  assert len(error.problems) == 3, error.problems
  message = str(error)
  assert message.startswith("TOP_K1: 3 problems:\n  - ")
  for fragment in (
    "axis_direction must be a dml.AxisDirection or one of 'increasing', 'decreasing'; got axis_direction=7",
    "output_value_tensor.data_type must be FLOAT32; got output_value_tensor.data_type=INT32",
    "output_index_tensor.sizes must be (1, 1, 3, 2); got output_index_tensor.sizes=(1, 1, 3, 3)",
  ):
    assert f"  - {fragment}" in message, message


def test_several_functional_problems_in_one_error():
  with pytest.raises(dml.DescriptorError) as info:
    jax.eval_shape(lambda x: dml.top_k(x, 9, direction="up", index_dtype=np.float32), S((3, 4), F32))
  assert info.value.operator == "top_k"
  assert len(info.value.problems) == 3, info.value.problems


def test_constructing_a_bad_descriptor_never_raises():
  bad = T("FLOAT32", 0, -1)
  weird = dml.TensorDesc(data_type=99, sizes=(1.5, "a"))  # type: ignore[arg-type]
  descs = [
    dml.TopK1Desc(bad, weird, None, axis=-7, k=0, axis_direction=9),  # type: ignore[arg-type]
    dml.TopKDesc(weird, bad, bad, axis="x", k=-1),  # type: ignore[arg-type]
    dml.ArgMinDesc(bad, bad, axes=(5, 5), axis_direction="sideways"),  # type: ignore[arg-type]
    dml.ArgMaxDesc(weird, weird, axes=(), axis_direction=None),  # type: ignore[arg-type]
    dml.GatherNDDesc(bad, weird, bad, input_dimension_count=0, indices_dimension_count=99),
    dml.GatherND1Desc(bad, bad, weird, 9, 9, -1),
    dml.ReduceDesc(99, bad, weird, axes=(0, 0)),  # type: ignore[arg-type]
    dml.OneHotDesc(weird, bad, bad, axis=12),
  ]
  for desc in descs:
    with pytest.raises(dml.DescriptorError):
      args = [S((2,), F32)] * (2 if isinstance(desc, (dml.GatherNDDesc, dml.GatherND1Desc, dml.OneHotDesc)) else 1)
      jax.eval_shape(run(desc), *args)


def test_bad_tensor_descriptors_are_reported_not_crashed():
  weird = dml.TensorDesc(data_type=99, sizes=(2,))  # type: ignore[arg-type]
  desc = dml.ArgMinDesc(weird, "not a tensor desc", axes=(0,), axis_direction=0)  # type: ignore[arg-type]
  with pytest.raises(dml.DescriptorError) as info:
    jax.eval_shape(run(desc), S((2,), F32))
  message = str(info.value)
  assert (
    "input_tensor.data_type must be one of FLOAT32, FLOAT16" in message and "got input_tensor.data_type=99" in message
  )
  assert "output_tensor must be a dml.TensorDesc; got output_tensor=str" in message


def test_execute_rejects_other_objects():
  with pytest.raises(
    dml.DescriptorError, match=r"^execute: desc must be one of TopKDesc, TopK1Desc, .*; got desc=int$"
  ):
    dml.execute(3, np.zeros(2, np.float32))


@pytest.mark.parametrize(
  "level",
  ["5_0", "4_1", "3_1", "FL_3_1", dml.FeatureLevel.FL_5_0, dml.FeatureLevel.FL_3_1, int(dml.FeatureLevel.FL_4_1)],
)
def test_feature_level_spellings_are_accepted(level):
  out = jax.eval_shape(run(top_k1(), level), *X4)
  assert [o.shape for o in out] == [(1, 1, 3, 2)] * 2


def test_default_feature_level_is_the_newest():
  """UINT64 indices are accepted by default (5_0) but not at 4_1."""
  desc = top_k1(indices=T("UINT64", 1, 1, 3, 2))
  with x64():
    _, indices = jax.eval_shape(run(desc), *X4)
    assert indices.dtype == np.uint64
    with pytest.raises(dml.DescriptorError, match="at feature level 4_1"):
      jax.eval_shape(run(desc, "4_1"), *X4)


def test_64_bit_data_without_x64_is_narrowed_on_the_functional_path_as_jax_does():
  """top_k, argmin/argmax, reduce and one_hot narrow NumPy float64/int64 input without x64, as the JAX calls they
  replace do (float64 to float32, int64 to int32); a 64-bit type asked for (index_dtype=, dtype=) still needs x64,
  and gather_nd and the descriptor path refuse 64-bit data without it."""
  assert not jax.config.read("jax_enable_x64")
  x64_array = np.array([0.1, 3.0, 2.5, -1.0], np.float64)
  narrow = x64_array.astype(np.float32)
  values, indices = dml.top_k(x64_array, 2)
  assert_bitwise_equal(values, narrow[[1, 2]], "top_k values")
  assert indices.dtype == np.int32 and indices.tolist() == [1, 2]
  assert dml.argmin(x64_array).dtype == np.int32 and int(dml.argmin(x64_array)) == 3
  assert_bitwise_equal(dml.reduce(x64_array, "max"), np.float32(3.0), "reduce max")
  assert dml.reduce(np.array([1, 2], np.int64), "sum").dtype == np.int32
  hot = dml.one_hot(np.array([2, 0], np.int64), 3, on_value=np.float64(0.1), off_value=np.float64(0))
  assert_bitwise_equal(hot, np.array([[0, 0, 0.1], [0.1, 0, 0]], np.float32), "one_hot")
  cases = [
    (lambda: dml.top_k(x64_array, 1, index_dtype=np.int64), "top_k: index_dtype of type int64 needs"),
    (
      lambda: dml.gather_nd(np.zeros(3, np.float32), np.zeros((1, 1), np.int64)),
      "gather_nd: indices of type int64 needs",
    ),
    (
      lambda: dml.one_hot(np.zeros(2, np.int32), 3, dtype=np.float64),
      "one_hot: dtype of type float64 needs",
    ),
    (
      lambda: dml.execute(dml.ArgMinDesc(T("FLOAT32", 4), T("UINT32", 1), (0,), 0), x64_array),
      "ARGMIN: input_tensor of type float64 needs",
    ),
  ]
  for call, fragment in cases:
    with pytest.raises(dml.DescriptorError) as info:
      jax.eval_shape(call)
    assert fragment in str(info.value), str(info.value)
    with pytest.raises(dml.DescriptorError):
      call()


def test_size_0_dimensions_are_refused_on_the_descriptor_path_and_by_gather_nd():
  """SPEC §0: DirectML has no size-0 dimensions; the descriptor path and gather_nd refuse them, operated on or not
  (the functional top_k, argmin/argmax, reduce and one_hot take them as JAX does: tests/test_jax_conventions.py)."""
  cases = [
    (lambda x, i: dml.gather_nd(x, i), (S((2, 3), F32), S((0, 1), I32)), "gather_nd: indices must have no size-0"),
    (
      lambda x: dml.execute(dml.ReduceDesc.from_inputs("sum", dml.TensorDesc(np.float32, (2, 3)), axes=(0,)), x),
      (S((0, 3), F32),),
      "REDUCE: input_tensor array must have shape input_tensor.sizes=(2, 3)",
    ),
  ]
  for fn, args, fragment in cases:
    with pytest.raises(dml.DescriptorError, match=re.escape(fragment)):
      jax.eval_shape(fn, *args)
  with pytest.raises(
    dml.DescriptorError, match=re.escape("input_tensor.sizes must all be >= 1 (DirectML has no size-0")
  ):
    dml.ReduceDesc.from_inputs("sum", dml.TensorDesc(np.float32, (0, 3)), axes=(0,))


def test_64_bit_dtypes_are_accepted_with_x64():
  with x64():
    values, indices = dml.top_k(np.array([1.0, 3.0, 2.0]), 2, index_dtype=jnp.int64)
    assert values.dtype == np.float64 and indices.dtype == np.int64
    assert indices.tolist() == [1, 2]
