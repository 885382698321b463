"""Quick start: DirectML's worked examples of its five operator pages through both dmljax paths, then a model.

Each example is run once through ``dml.execute`` with the descriptor spelled as
on the DirectML page, and once through the functional API, and printed beside the
page's expected output. The functional path gives JAX's answers by default: int32
indices (as ``jax.lax.top_k`` and ``jnp.argmax`` with x64 off), where the page's
descriptors ask for UINT32, are compared by value (``index_dtype=np.uint32``
would give the page's type); DirectML's own rules that differ from JAX's are asked
for by keyword (``negative_indices="from_end"`` for ONE_HOT's negative indices,
``promote_integers=False`` for integer reductions in the input's type). Then :func:`in_a_model` shows
the functional path where a JAX model uses it: a jitted top-k sampling step, and
k-nearest-neighbour classification (the smallest distances with
``direction="increasing"``, the neighbours' labels with ``gather_nd``, the vote with
``one_hot`` and ``argmax``), each checked against NumPy. Run from a checkout:
``python examples/quickstart.py``.
"""

from __future__ import annotations

import functools
import pathlib
import sys

import jax
import jax.numpy as jnp
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
    # DirectML reduces integers in their own type (jnp.sum widens them): promote_integers=False.
    found = dml.reduce(ins["input_tensor"], params["function"], params["axes"], keepdims=True, promote_integers=False)
    return [np.asarray(found)]
  # jax.nn.one_hot's layout: the indices without DirectML's size-1 axis, the new axis inserted there. A negative index
  # counts from the end on DirectML's page (jax.nn.one_hot leaves its row off): negative_indices="from_end".
  axis = params["axis"]
  off, on = ins["values_tensor"].reshape(-1)[:2]
  indices = ins["indices_tensor"].squeeze(axis)
  out = dml.one_hot(indices, out_sizes[0][axis], axis=axis, on_value=on, off_value=off, negative_indices="from_end")
  return [np.asarray(out)]


def same_output(got: np.ndarray, expected: np.ndarray, functional: bool) -> bool:
  """Equal values, shape and dtype; the functional path's int32 indices stand for the page's UINT32 ones."""
  index_default = functional and expected.dtype == np.uint32 and got.dtype == np.int32
  same_type = index_default or got.dtype == expected.dtype
  return same_type and got.shape == expected.shape and np.array_equal(got, expected)


@functools.partial(jax.jit, static_argnames="k")
def sample_top_k(key: jax.Array, logits: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """One decoding step: a token drawn from the ``k`` most likely of every row, and those ``k`` candidates."""
  values, candidates = dml.top_k(logits, k)  # sorted, ties to the lower token id
  choice = jax.random.categorical(key, values)
  return jnp.take_along_axis(candidates, choice[:, None], axis=-1)[:, 0], candidates


def knn_classify(points: jax.Array, labels: jax.Array, queries: jax.Array, k: int, classes: int) -> jax.Array:
  """The majority label of every query's ``k`` nearest points (the lowest label on a tie)."""
  d2 = ((queries[:, None, :] - points[None, :, :]) ** 2).sum(-1)
  _, nearest = dml.top_k(d2, k, direction="increasing")  # the k smallest distances, ties to the lower index
  votes = dml.gather_nd(labels, nearest[..., None])  # row ids need a trailing index-tuple axis
  return dml.argmax(dml.one_hot(votes, classes).sum(1), 1)  # ties="first": the lowest label


def in_a_model() -> bool:
  """dmljax inside model code: a sampling step and a kNN classifier, each checked against NumPy."""
  logits = jax.random.normal(jax.random.key(0), (3, 1000))
  tokens, candidates = sample_top_k(jax.random.key(1), logits, 5)
  best = np.argsort(-np.asarray(logits), axis=1, kind="stable")[:, :5]
  sampled = np.array_equal(candidates, best) and all(
    t in c for t, c in zip(tokens.tolist(), best.tolist(), strict=True)
  )
  print(f"== top-k sampling: tokens {tokens.tolist()}, each among its row's 5 most likely {best.tolist()}")

  rng = np.random.default_rng(0)
  points = np.concatenate([rng.normal(-2, 1, (40, 2)), rng.normal(2, 1, (40, 2))]).astype(np.float32)
  labels = np.repeat(np.arange(2, dtype=np.int32), 40)
  queries = rng.normal(0, 2, (10, 2)).astype(np.float32)
  predicted = np.asarray(knn_classify(jnp.asarray(points), jnp.asarray(labels), jnp.asarray(queries), 5, 2))
  d2 = ((queries[:, None, :] - points[None, :, :]) ** 2).sum(-1)
  nearest = np.argsort(d2, axis=1, kind="stable")[:, :5]
  expected = np.array([np.bincount(labels[n], minlength=2).argmax() for n in nearest])
  classified = np.array_equal(predicted, expected)
  print(f"== kNN (k=5): {predicted.tolist()} for 10 queries, NumPy says {expected.tolist()}")
  print(
    f"in a model: sampling {'matches' if sampled else 'DIFFERS FROM'} NumPy, kNN "
    f"{'matches' if classified else 'DIFFERS FROM'} NumPy"
  )
  return sampled and classified


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
  in_model = in_a_model()
  return 1 if mismatches or not in_model else 0


if __name__ == "__main__":
  raise SystemExit(main())
