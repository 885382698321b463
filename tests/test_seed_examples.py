"""Every worked example of DirectML's five operator pages, through both public paths (issue 2, point 1).

The expected outputs are the pages' own tensors (tests/seed_examples.py), never
the reference implementation nor the library: values, indices, index dtype and
sizes must all match exactly.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from _helpers import assert_exactly, one_hot_dml_layout, seed_array, seed_desc, tensor_desc, ties
from seed_examples import SEED_EXAMPLES, SEED_EXTRA_EXAMPLES

import dmljax as dml

RUNNABLE = [ex for ex in SEED_EXAMPLES + SEED_EXTRA_EXAMPLES if "inputs" in ex]
SIZES_ONLY = [ex for ex in SEED_EXTRA_EXAMPLES if "inputs" not in ex]

# The oldest feature level whose DirectML table admits each example as written
# (TOP_K1 from 2_1 with rank 4; ARGMIN and GATHER_ND1 from 3_0; REDUCE SUM on
# a rank-2 FLOAT32 tensor from 3_0; ONE_HOT with UINT32 indices and rank 4 from
# 2_0, with INT32 indices from 3_0).
OLDEST_LEVEL = {"TOP_K1": "2_1", "ARGMIN": "3_0", "GATHER_ND1": "3_0", "REDUCE": "3_0"}


def _oldest_level(example: dict) -> str:
  if example["op"] == "ONE_HOT":
    return "3_0" if example["inputs"]["indices_tensor"][0] == "INT32" else "2_0"
  if example["op"] == "TOP_K1" and len(example["inputs"]["input_tensor"][1]) != 4:
    return "3_1"
  return OLDEST_LEVEL[example["op"]]


def _descriptor(example: dict) -> tuple[object, list[np.ndarray]]:
  """The page's descriptor, spelled field by field as on the page, and its input arrays in struct order."""
  op, params, ins, outs = example["op"], example["params"], example["inputs"], example["outputs"]
  if op == "TOP_K1":
    desc = dml.TopK1Desc(
      input_tensor=seed_desc(ins["input_tensor"]),
      output_value_tensor=seed_desc(outs["output_value_tensor"]),
      output_index_tensor=seed_desc(outs["output_index_tensor"]),
      axis=params["axis"],
      k=params["k"],
      axis_direction=dml.AxisDirection[params["axis_direction"]],
    )
    return desc, [seed_array(ins["input_tensor"])]
  if op == "ARGMIN":
    desc = dml.ArgMinDesc(
      input_tensor=seed_desc(ins["input_tensor"]),
      output_tensor=seed_desc(outs["output_tensor"]),
      axes=params["axes"],
      axis_direction=dml.AxisDirection[params["axis_direction"]],
    )
    return desc, [seed_array(ins["input_tensor"])]
  if op == "GATHER_ND1":
    desc = dml.GatherND1Desc(
      input_tensor=seed_desc(ins["input_tensor"]),
      indices_tensor=seed_desc(ins["indices_tensor"]),
      output_tensor=seed_desc(outs["output_tensor"]),
      input_dimension_count=params["input_dimension_count"],
      indices_dimension_count=params["indices_dimension_count"],
      batch_dimension_count=params["batch_dimension_count"],
    )
    return desc, [seed_array(ins["input_tensor"]), seed_array(ins["indices_tensor"])]
  if op == "REDUCE":
    desc = dml.ReduceDesc(
      function=dml.ReduceFunction[params["function"]],
      input_tensor=seed_desc(ins["input_tensor"]),
      output_tensor=seed_desc(outs["output_tensor"]),
      axes=params["axes"],
    )
    return desc, [seed_array(ins["input_tensor"])]
  assert op == "ONE_HOT", op
  desc = dml.OneHotDesc(
    indices_tensor=seed_desc(ins["indices_tensor"]),
    values_tensor=seed_desc(ins["values_tensor"]),
    output_tensor=seed_desc(outs["output_tensor"]),
    axis=params["axis"],
  )
  return desc, [seed_array(ins["indices_tensor"]), seed_array(ins["values_tensor"])]


def _expected(example: dict) -> list[tuple[np.ndarray, np.dtype]]:
  """The page's outputs in the order the library returns them."""
  names = ["output_value_tensor", "output_index_tensor"] if example["op"] == "TOP_K1" else ["output_tensor"]
  return [(seed_array(example["outputs"][n]), seed_array(example["outputs"][n]).dtype) for n in names]


def _check(results: object, example: dict, path: str) -> None:
  results = list(results) if isinstance(results, tuple) else [results]
  expected = _expected(example)
  assert len(results) == len(expected), path
  for got, (want, dtype) in zip(results, expected, strict=True):
    assert isinstance(got, jax.Array), f"{path}: {type(got)}"
    assert_exactly(got, want, dtype, f"{example['id']} via {path}")


def _functional(example: dict) -> object:
  """The same example through dml.top_k / argmin / gather_nd / reduce / one_hot."""
  op, params, ins, outs = example["op"], example["params"], example["inputs"], example["outputs"]
  if op == "TOP_K1":
    index_dtype = seed_array(outs["output_index_tensor"]).dtype
    return dml.top_k(
      seed_array(ins["input_tensor"]),
      params["k"],
      axis=params["axis"],
      direction=params["axis_direction"].lower(),
      index_dtype=index_dtype,
    )
  if op == "ARGMIN":
    return dml.argmin(
      seed_array(ins["input_tensor"]),
      params["axes"],
      ties=ties(params["axis_direction"]),
      keepdims=True,
      index_dtype=seed_array(outs["output_tensor"]).dtype,
    )
  if op == "GATHER_ND1":
    # The DML layout right-aligns the meaningful dims behind leading 1s; the
    # functional path takes the meaningful shapes (TF/ONNX) directly.
    x = seed_array(ins["input_tensor"])
    indices = seed_array(ins["indices_tensor"])
    x = x.reshape(x.shape[x.ndim - params["input_dimension_count"] :])
    indices = indices.reshape(indices.shape[indices.ndim - params["indices_dimension_count"] :])
    out = dml.gather_nd(x, indices, batch_dims=params["batch_dimension_count"])
    want_sizes = outs["output_tensor"][1]
    assert int(np.prod(out.shape)) == int(np.prod(want_sizes))
    assert tuple(s for s in want_sizes if s != 1) == tuple(s for s in out.shape if s != 1), out.shape
    return out.reshape(want_sizes)
  if op == "REDUCE":
    function = params["function"].lower()
    # DirectML's layout and types, as the seed's output has them (integer results in the input's type).
    options: dict = {"keepdims": True, "promote_integers": False}
    if function in ("argmax", "argmin"):
      options["index_dtype"] = seed_array(outs["output_tensor"]).dtype
    return dml.reduce(seed_array(ins["input_tensor"]), function, params["axes"], **options)
  assert op == "ONE_HOT", op
  depth = outs["output_tensor"][1][params["axis"]]
  indices, values = seed_array(ins["indices_tensor"]), seed_array(ins["values_tensor"])
  return one_hot_dml_layout(indices, values, depth, axis=params["axis"])


def test_every_seed_example_is_covered():
  ops = sorted({ex["op"] for ex in RUNNABLE})
  assert ops == ["ARGMIN", "GATHER_ND1", "ONE_HOT", "REDUCE", "TOP_K1"]
  assert len(RUNNABLE) == 18 and len(SIZES_ONLY) == 1


@pytest.mark.parametrize("example", RUNNABLE, ids=[ex["id"] for ex in RUNNABLE])
def test_descriptor_path(example):
  desc, inputs = _descriptor(example)
  _check(dml.execute(desc, *inputs), example, "execute")


@pytest.mark.parametrize("example", RUNNABLE, ids=[ex["id"] for ex in RUNNABLE])
def test_descriptor_path_at_oldest_level(example):
  desc, inputs = _descriptor(example)
  level = _oldest_level(example)
  _check(dml.execute(desc, *inputs, feature_level=level), example, f"execute at {level}")
  _check(dml.execute(desc, *inputs, feature_level=dml.FeatureLevel[f"FL_{level}"]), example, "execute (enum)")


@pytest.mark.parametrize("example", RUNNABLE, ids=[ex["id"] for ex in RUNNABLE])
def test_functional_path(example):
  _check(_functional(example), example, "functional")


@pytest.mark.parametrize("example", RUNNABLE, ids=[ex["id"] for ex in RUNNABLE])
def test_descriptor_path_takes_nested_lists(example):
  """The seed tensors as written (nested Python lists) work too: the descriptor fixes their type."""
  desc, _ = _descriptor(example)
  inputs = [spec[2] for spec in example["inputs"].values()]
  _check(dml.execute(desc, *inputs), example, "execute(lists)")


TOP_K_DECREASING = [ex for ex in RUNNABLE if ex["op"] == "TOP_K1" and ex["params"]["axis_direction"] == "DECREASING"]


@pytest.mark.parametrize("example", TOP_K_DECREASING, ids=[ex["id"] for ex in TOP_K_DECREASING])
def test_top_k_v0_on_decreasing_examples(example):
  params, ins, outs = example["params"], example["inputs"], example["outputs"]
  desc = dml.TopKDesc(
    input_tensor=seed_desc(ins["input_tensor"]),
    output_value_tensor=seed_desc(outs["output_value_tensor"]),
    output_index_tensor=seed_desc(outs["output_index_tensor"]),
    axis=params["axis"],
    k=params["k"],
  )
  _check(dml.execute(desc, seed_array(ins["input_tensor"])), example, "TOP_K v0")
  index_dtype = seed_array(outs["output_index_tensor"]).dtype
  values_and_indices = dml.top_k(
    seed_array(ins["input_tensor"]), params["k"], axis=params["axis"], index_dtype=index_dtype
  )
  _check(values_and_indices, example, "top_k default direction")


ARGMIN_EXAMPLES = [ex for ex in RUNNABLE if ex["op"] == "ARGMIN"]


@pytest.mark.parametrize("example", ARGMIN_EXAMPLES, ids=[ex["id"] for ex in ARGMIN_EXAMPLES])
def test_argmax_twin_on_negated_argmin_examples(example):
  """ARGMAX of -x is ARGMIN of x, tie-breaking included (negation of these floats is exact)."""
  params, ins, outs = example["params"], example["inputs"], example["outputs"]
  negated = -seed_array(ins["input_tensor"])
  direction = dml.AxisDirection[params["axis_direction"]]
  desc = dml.ArgMaxDesc(seed_desc(ins["input_tensor"]), seed_desc(outs["output_tensor"]), params["axes"], direction)
  _check(dml.execute(desc, negated), example, "ARGMAX(-x)")
  index_dtype = seed_array(outs["output_tensor"]).dtype
  got = dml.argmax(negated, params["axes"], ties=ties(direction), keepdims=True, index_dtype=index_dtype)
  _check(got, example, "argmax(-x)")


def test_gather_nd_v0_on_example_1():
  (example,) = [ex for ex in RUNNABLE if ex["id"] == "gather_nd1_example_1"]
  assert example["params"]["batch_dimension_count"] == 0
  params, ins, outs = example["params"], example["inputs"], example["outputs"]
  desc = dml.GatherNDDesc(
    input_tensor=seed_desc(ins["input_tensor"]),
    indices_tensor=seed_desc(ins["indices_tensor"]),
    output_tensor=seed_desc(outs["output_tensor"]),
    input_dimension_count=params["input_dimension_count"],
    indices_dimension_count=params["indices_dimension_count"],
  )
  _check(dml.execute(desc, seed_array(ins["input_tensor"]), seed_array(ins["indices_tensor"])), example, "GATHER_ND")
  _check(
    dml.execute(desc, seed_array(ins["input_tensor"]), seed_array(ins["indices_tensor"]), feature_level="2_1"),
    example,
    "GATHER_ND at 2_1",
  )


@pytest.mark.parametrize("example", SIZES_ONLY, ids=[ex["id"] for ex in SIZES_ONLY])
@pytest.mark.parametrize(("input_type", "index_type"), [("FLOAT32", "UINT32"), ("INT8", "INT32")])
def test_gather_sizes_only_example(example, input_type, index_type):
  """The seed gives sizes only; any supported data types give those sizes, without data."""
  params = example["params"]
  x_sizes = example["input_sizes"]["input_tensor"]
  i_sizes = example["input_sizes"]["indices_tensor"]
  out_sizes = example["output_sizes"]["output_tensor"]
  desc = dml.GatherND1Desc(
    tensor_desc(input_type, x_sizes),
    tensor_desc(index_type, i_sizes),
    tensor_desc(input_type, out_sizes),
    input_dimension_count=params["input_dimension_count"],
    indices_dimension_count=params["indices_dimension_count"],
    batch_dimension_count=params["batch_dimension_count"],
  )
  x_struct = jax.ShapeDtypeStruct(x_sizes, np.dtype(input_type.lower()))
  i_struct = jax.ShapeDtypeStruct(i_sizes, np.dtype(index_type.lower()))
  out = jax.eval_shape(lambda x, i: dml.execute(desc, x, i), x_struct, i_struct)
  assert out.shape == out_sizes and out.dtype == np.dtype(input_type.lower())

  q = i_sizes[-1]
  meaningful_indices = i_sizes[len(i_sizes) - params["indices_dimension_count"] :]
  out = jax.eval_shape(
    lambda x, i: dml.gather_nd(x, i, batch_dims=params["batch_dimension_count"]),
    x_struct,
    jax.ShapeDtypeStruct(meaningful_indices, np.dtype(index_type.lower())),
  )
  assert out.shape == meaningful_indices[:-1] + x_sizes[q:]
  assert (1,) * (len(out_sizes) - out.ndim) + out.shape == out_sizes
