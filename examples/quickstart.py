"""Quick start: every worked example of DirectML's five operator pages, through both dmljax paths.

Each example is run once through ``dml.execute`` with the descriptor spelled as
on the DirectML page, and once through the functional API with its defaults, and
printed beside the page's expected output. The functional path returns int32
indices by default (as ``jax.lax.top_k`` and ``jnp.argmax``), where the page's
descriptors ask for UINT32: those are compared by value, and
``index_dtype=np.uint32`` would give the page's type. Run from a checkout:
``python examples/quickstart.py``.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

import dmljax as dml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from seed_examples import SEED_EXAMPLES


def tensor(spec: tuple) -> tuple[dml.TensorDesc, np.ndarray]:
  data_type, sizes, data = spec
  desc = dml.TensorDesc(dml.DataType[data_type], tuple(sizes))
  return desc, np.asarray(data, dtype=np.dtype(data_type.lower())).reshape(sizes)


def through_descriptor(example: dict) -> list[np.ndarray]:
  op, params = example["op"], example["params"]
  ins = {name: tensor(spec) for name, spec in example["inputs"].items()}
  outs = {name: tensor(spec)[0] for name, spec in example["outputs"].items()}
  if op == "TOP_K1":
    desc = dml.TopK1Desc(
      ins["input_tensor"][0],
      outs["output_value_tensor"],
      outs["output_index_tensor"],
      axis=params["axis"],
      k=params["k"],
      axis_direction=dml.AxisDirection[params["axis_direction"]],
    )
    return [np.asarray(a) for a in dml.execute(desc, ins["input_tensor"][1])]
  if op == "ARGMIN":
    desc = dml.ArgMinDesc(
      ins["input_tensor"][0],
      outs["output_tensor"],
      axes=tuple(params["axes"]),
      axis_direction=dml.AxisDirection[params["axis_direction"]],
    )
    return [np.asarray(dml.execute(desc, ins["input_tensor"][1]))]
  if op == "GATHER_ND1":
    desc = dml.GatherND1Desc(ins["input_tensor"][0], ins["indices_tensor"][0], outs["output_tensor"], **params)
    return [np.asarray(dml.execute(desc, ins["input_tensor"][1], ins["indices_tensor"][1]))]
  if op == "REDUCE":
    desc = dml.ReduceDesc(
      dml.ReduceFunction[params["function"]], ins["input_tensor"][0], outs["output_tensor"], axes=tuple(params["axes"])
    )
    return [np.asarray(dml.execute(desc, ins["input_tensor"][1]))]
  desc = dml.OneHotDesc(ins["indices_tensor"][0], ins["values_tensor"][0], outs["output_tensor"], axis=params["axis"])
  return [np.asarray(dml.execute(desc, ins["indices_tensor"][1], ins["values_tensor"][1]))]


def through_functions(example: dict) -> list[np.ndarray]:
  op, params = example["op"], example["params"]
  ins = {name: tensor(spec)[1] for name, spec in example["inputs"].items()}
  out_sizes = [tuple(spec[1]) for spec in example["outputs"].values()]
  if op == "TOP_K1":
    values, indices = dml.top_k(
      ins["input_tensor"], params["k"], axis=params["axis"], direction=params["axis_direction"].lower()
    )
    return [np.asarray(values), np.asarray(indices)]
  if op == "ARGMIN":
    # The functional path drops the reduced axes by default (as jnp.argmin); keepdims=True keeps DirectML's layout.
    # DirectML's INCREASING returns the first extreme on ties, DECREASING the last: ties="first" or "last".
    ties = "last" if params["axis_direction"] == "DECREASING" else "first"
    found = dml.argmin(ins["input_tensor"], params["axes"], ties=ties, keepdims=True)
    return [np.asarray(found)]
  if op == "GATHER_ND1":
    # The functional path takes the meaningful dimensions only (TF/ONNX layout).
    x = ins["input_tensor"]
    indices = ins["indices_tensor"]
    x = x.reshape(x.shape[x.ndim - params["input_dimension_count"] :])
    indices = indices.reshape(indices.shape[indices.ndim - params["indices_dimension_count"] :])
    out = dml.gather_nd(x, indices, batch_dims=params["batch_dimension_count"])
    return [np.asarray(out).reshape(out_sizes[0])]
  if op == "REDUCE":
    found = dml.reduce(ins["input_tensor"], params["function"], params["axes"], keepdims=True)
    return [np.asarray(found)]
  # jax.nn.one_hot's layout: the indices without DirectML's size-1 axis, the new axis inserted there.
  axis = params["axis"]
  off, on = ins["values_tensor"].reshape(-1)[:2]
  out = dml.one_hot(ins["indices_tensor"].squeeze(axis), out_sizes[0][axis], axis=axis, on_value=on, off_value=off)
  return [np.asarray(out)]


def same_output(got: np.ndarray, expected: np.ndarray, functional: bool) -> bool:
  """Equal values, shape and dtype; the functional path's int32 indices stand for the page's UINT32 ones."""
  index_default = functional and expected.dtype == np.uint32 and got.dtype == np.int32
  same_type = index_default or got.dtype == expected.dtype
  return same_type and got.shape == expected.shape and np.array_equal(got, expected)


def main() -> int:
  mismatches = 0
  for example in SEED_EXAMPLES:
    expected = [tensor(spec)[1] for spec in example["outputs"].values()]
    print(f"== {example['id']} ({example['op']}, {example['params']})")
    for path, got in (("execute   ", through_descriptor(example)), ("functional", through_functions(example))):
      functional = path == "functional"
      same = all(same_output(g, e, functional) for g, e in zip(got, expected, strict=True))
      mismatches += not same
      shown = "  |  ".join(f"{g.dtype}{list(g.shape)} {g.tolist()}" for g in got)
      print(f"   {path}: {shown}   [{'matches the page' if same else 'DIFFERS FROM THE PAGE'}]")
  print(
    f"{len(SEED_EXAMPLES)} worked examples, {2 * len(SEED_EXAMPLES) - mismatches} of "
    f"{2 * len(SEED_EXAMPLES)} runs match DirectML's pages (values, shapes and types; the functional path's indices "
    "are int32, its default)"
  )
  return 1 if mismatches else 0


if __name__ == "__main__":
  raise SystemExit(main())
