"""The smoke test: every operator, both paths, the special values and the transformations, in seconds.

``python -m pytest -q tests/test_smoke.py`` is the first check after installing or changing dmljax (the whole
suite takes minutes). Each operator runs once through the functional path and once through ``dml.execute`` on
a small input holding ties, NaNs, signed zeros and out-of-range indices, bit for bit against the NumPy reference,
then under ``jax.jit``, ``jax.vmap`` and ``jax.grad``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from _helpers import assert_bitwise_equal, desc_of
from reference import ref_arg_reduce, ref_gather_nd, ref_one_hot, ref_reduce, ref_top_k

import dmljax as dml

# Ties (3.0 twice, -0.0 and +0.0), a NaN, and ±inf: every ordering rule in a (2, 6) array.
X = np.array([[3.0, -0.0, np.nan, 3.0, 0.0, -np.inf], [1.0, 2.0, np.inf, 2.0, -1.0, 0.5]], np.float32)
TABLE = np.arange(12, dtype=np.float32).reshape(4, 3)
ROWS = np.array([[2], [-1], [9], [0]], np.int32)  # -1 counts from the end, 9 clamps to 3


def test_top_k_both_directions_both_paths() -> None:
  for direction in ("decreasing", "increasing"):
    want_values, want_indices = ref_top_k(X, 4, 1, direction)
    values, indices = dml.top_k(X, 4, direction=direction)
    assert_bitwise_equal(values, want_values, f"top_k {direction}")
    assert_bitwise_equal(indices, want_indices.astype(np.int32), f"top_k {direction}")
    desc = dml.TopK1Desc.from_inputs(desc_of(np.float32, X.shape), axis=1, k=4, axis_direction=direction.upper())
    values, indices = dml.execute(desc, X)
    assert_bitwise_equal(values, want_values, f"TOP_K1 {direction}")
    assert_bitwise_equal(indices, want_indices.astype(np.uint32), f"TOP_K1 {direction}")


def test_argmin_argmax_ties_both_paths() -> None:
  for kind, functional in (("min", dml.argmin), ("max", dml.argmax)):
    for ties, direction in (("first", "increasing"), ("last", "decreasing")):
      want = ref_arg_reduce(X, (1,), kind, direction)
      assert_bitwise_equal(functional(X, 1, ties=ties), want[:, 0].astype(np.int32), f"arg{kind} {ties}")
      desc_type = dml.ArgMinDesc if kind == "min" else dml.ArgMaxDesc
      desc = desc_type.from_inputs(desc_of(np.float32, X.shape), axes=(1,), axis_direction=direction.upper())
      assert_bitwise_equal(dml.execute(desc, X), want.astype(np.uint32), f"ARG{kind.upper()} {direction}")


def test_gather_nd_clamps_and_counts_from_the_end_both_paths() -> None:
  want = ref_gather_nd(TABLE, ROWS, 0)
  assert_bitwise_equal(dml.gather_nd(TABLE, ROWS), want, "gather_nd")
  desc = dml.GatherND1Desc.from_inputs(desc_of(np.float32, TABLE.shape), desc_of(np.int32, ROWS.shape))
  assert_bitwise_equal(dml.execute(desc, TABLE, ROWS), want, "GATHER_ND1")


def test_reduce_every_family_both_paths() -> None:
  # Selections (MAX) are exact; sums are rounded once from float32 arithmetic, as a reduction may reassociate.
  finite = np.nan_to_num(X, posinf=4.0, neginf=-4.0)
  for function in ("sum", "max", "log_sum_exp", "l2", "average", "multiply"):
    want = ref_reduce(finite, function, (1,))
    got = dml.reduce(finite, function, 1, keepdims=True)
    if function == "max":
      assert_bitwise_equal(got, want, f"reduce {function}")
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, err_msg=f"reduce {function}")
    desc = dml.ReduceDesc.from_inputs(function, desc_of(np.float32, X.shape), axes=(1,))
    assert_bitwise_equal(dml.execute(desc, finite), got, f"REDUCE {function}: both paths, one implementation")
  assert np.isnan(np.asarray(dml.reduce(X, "max", 1))[0]), "MAX of a row holding a NaN is NaN"


def test_one_hot_both_paths() -> None:
  indices = np.array([[0], [3], [-1], [9]], np.int32)  # DirectML: -1 counts from the end; 9 gives an all-off row
  values = np.array([0.0, 1.0], np.float32)
  want = ref_one_hot(indices, values, 4, 1)
  assert_bitwise_equal(dml.one_hot(indices[:, 0], 4, negative_indices="from_end"), want, "one_hot")
  by_default = np.array([[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]], np.float32)  # jax.nn.one_hot's
  assert_bitwise_equal(dml.one_hot(indices[:, 0], 4), by_default, "one_hot, negative indices off")
  desc = dml.OneHotDesc.from_inputs(desc_of(np.int32, indices.shape), desc_of(np.float32, (1, 2)), axis=1, depth=4)
  assert_bitwise_equal(dml.execute(desc, indices, values.reshape(1, 2)), want, "ONE_HOT")


def test_jit_vmap_grad() -> None:
  values, indices = jax.jit(lambda x: dml.top_k(x, 2))(X)
  assert_bitwise_equal(values, dml.top_k(X, 2)[0], "jit")
  per_row = jax.vmap(lambda row: dml.top_k(row, 2))(jnp.asarray(X))
  assert_bitwise_equal(per_row[1], indices, "vmap")
  finite = jnp.asarray(np.nan_to_num(X, posinf=4.0, neginf=-4.0))
  grad = jax.grad(lambda x: dml.top_k(x, 2)[0].sum() + dml.reduce(x, "log_sum_exp", 1).sum())(finite)
  assert grad.shape == X.shape and bool(jnp.all(jnp.isfinite(grad)))
  # The top-k values' gradient goes to the elements returned: one 1 per selected element on top of the softmax.
  softmax = jax.nn.softmax(finite, axis=1)
  assert int(jnp.sum(jnp.abs(grad - softmax) > 0.5)) == 4
  gathered = jax.grad(lambda t: dml.gather_nd(t, ROWS).sum())(jnp.asarray(TABLE))
  assert gathered.sum(1).tolist() == [3.0, 0.0, 3.0, 6.0]  # rows 0, 2 and 3 (twice: -1 and the clamped 9)
