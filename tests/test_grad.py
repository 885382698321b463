"""Differentiation (SPEC §8, issue 3): every value output, both modes, second order, finite at the edges.

Expected values come from finite differences (``check_grads``), from the NumPy
reference (which input element each output element reads), or are worked out
by hand in the test; never from the library itself.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import reference
from _helpers import one_hot_dml_layout
from jax.test_util import check_grads

import dmljax as dml

F = dml.ReduceFunction
VALUE_FUNCTIONS = [f for f in F if f not in (F.ARGMAX, F.ARGMIN)]
AXES = {"one": (1,), "several": (0, 2), "all": (0, 1, 2)}
AXIS_KINDS = list(AXES)
SHAPE = (2, 3, 4)
# Finite-difference step per dtype; inputs below keep ties and kinks more than 5 steps away.
EPS = {"float32": 1e-3, "float64": 1e-5}
FLOAT0 = jax.dtypes.float0


@contextlib.contextmanager
def precision(dtype: str) -> Iterator[None]:
  """float64 needs x64 only inside the test; the suite's default is restored after."""
  with jax.enable_x64(dtype == "float64"):
    yield


def tie_free(shape: tuple[int, ...], dtype: str, seed: int, *, positive: bool = False) -> jax.Array:
  """Random values with distinct magnitudes in [0.5, 1.5): no ties, no kinks, no zeros, products near 1."""
  rng = np.random.default_rng(seed)
  n = int(np.prod(shape))
  values = 0.5 + rng.permutation(n) / n
  if not positive:
    values = values * rng.choice([-1.0, 1.0], n)
  return jnp.asarray(values.reshape(shape), dtype)


def check(f: Callable[..., Any], args: tuple[jax.Array, ...], dtype: str) -> None:
  check_grads(f, args, order=2, modes=("fwd", "rev"), eps=EPS[dtype])


def reduce_input(function: F, dtype: str, seed: int) -> jax.Array:
  return tie_free(SHAPE, dtype, seed, positive=function == F.LOG_SUM)


# ----------------------------------------------------------------------------------------------------------------- #
# Point 1: check_grads, order 2, forward and reverse, float64 and float32, functional and descriptor paths.
# The default run checks every function once, in rotation: function i on the functional path in float64 on axes
# kind i where i is even, on the descriptor path in float32 on kind i + 2 where i is odd, so that both paths, both
# types and one, several and all axes are covered. The long profile (-m long) checks the rest of the product: every
# (function, axes kind) pair on both paths, the functional path in float32 too.
# ----------------------------------------------------------------------------------------------------------------- #


def _rotation(offset: int, *extra: str, parity: int | None = None) -> list[Any]:
  """Every (function, axes kind) pair: the rotation's (of the functions of ``parity``) in the default run, the
  others in the long profile."""
  return [
    pytest.param(f, kind, *extra, marks=() if j == (i + offset) % 3 and i % 2 == parity else pytest.mark.long)
    for i, f in enumerate(VALUE_FUNCTIONS)
    for j, kind in enumerate(AXIS_KINDS)
  ]


REDUCE_CASES = _rotation(0, "float64", parity=0) + [
  pytest.param(*p.values, marks=pytest.mark.long) for p in _rotation(1, "float32")
]


@pytest.mark.parametrize(("function", "kind", "dtype"), REDUCE_CASES, ids=lambda v: getattr(v, "name", v))
def test_reduce_check_grads(function: F, kind: str, dtype: str) -> None:
  with precision(dtype):
    x = reduce_input(function, dtype, seed=VALUE_FUNCTIONS.index(function))
    check(jax.jit(lambda v: dml.reduce(v, function, AXES[kind])), (x,), dtype)


@pytest.mark.parametrize(("function", "kind"), _rotation(2, parity=1), ids=lambda v: getattr(v, "name", v))
def test_reduce_check_grads_descriptor(function: F, kind: str) -> None:
  axes = AXES[kind]
  f32 = dml.DataType.FLOAT32
  out = tuple(1 if d in axes else s for d, s in enumerate(SHAPE))
  desc = dml.ReduceDesc(function, dml.TensorDesc(f32, SHAPE), dml.TensorDesc(f32, out), axes=axes)
  x = reduce_input(function, "float32", seed=10 + VALUE_FUNCTIONS.index(function))
  check(jax.jit(lambda v: dml.execute(desc, v)), (x,), "float32")


TOP_K_WAYS = {
  "float64": [(0, 2, "decreasing"), (2, 4, "increasing")],
  "float32": [(1, 2, "increasing"), (-1, 3, "decreasing")],
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_top_k_check_grads(dtype: str) -> None:
  """Both directions, first, middle and last axis, K from 2 to the full size."""

  def f(v: jax.Array) -> tuple[jax.Array, ...]:
    return tuple(dml.top_k(v, k, axis=axis, direction=d)[0] for axis, k, d in TOP_K_WAYS[dtype])

  with precision(dtype):
    check(jax.jit(f), (tie_free(SHAPE, dtype, seed=1),), dtype)


# Negative, duplicate and (for the clamp) out-of-range indices, with and without batch dimensions.
BATCH_INDICES = np.array([[[0], [-1], [0], [2], [-3]], [[1], [1], [-2], [0], [1]]], np.int32)  # (2, 5, 1)
PAIR_INDICES = np.array([[0, 1], [-1, -2], [0, 1], [1, 3], [-2, 0]], np.int32)  # (5, 2)
UNSIGNED_INDICES = np.array([[1], [0], [1], [1]], np.uint32)  # (4, 1)


def _gather_all_ways(v: jax.Array) -> tuple[jax.Array, ...]:
  return (
    dml.gather_nd(v, BATCH_INDICES, batch_dims=1),
    dml.gather_nd(v, PAIR_INDICES),
    dml.gather_nd(v, UNSIGNED_INDICES),
  )


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gather_nd_check_grads(dtype: str) -> None:
  with precision(dtype):
    check(jax.jit(_gather_all_ways), (tie_free(SHAPE, dtype, seed=2),), dtype)


ONE_HOT_INDICES = np.array([[0], [3], [-1], [9], [-4], [2]], np.int32)  # valid, out of range, from the end


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("values_shape", [(2,), (1, 3)])
def test_one_hot_check_grads(dtype: str, values_shape: tuple[int, ...]) -> None:
  with precision(dtype):
    values = tie_free(values_shape, dtype, seed=3)
    check(jax.jit(lambda v: one_hot_dml_layout(ONE_HOT_INDICES, v, 4, axis=-1)), (values,), dtype)


def test_top_k_check_grads_descriptor() -> None:
  f32, u32 = dml.DataType.FLOAT32, dml.DataType.UINT32
  inc = dml.TopK1Desc(
    dml.TensorDesc(f32, SHAPE),
    dml.TensorDesc(f32, (2, 2, 4)),
    dml.TensorDesc(u32, (2, 2, 4)),
    axis=1,
    k=2,
    axis_direction=dml.AxisDirection.INCREASING,
  )
  dec = dml.TopKDesc(dml.TensorDesc(f32, SHAPE), dml.TensorDesc(f32, (2, 3, 3)), dml.TensorDesc(u32, (2, 3, 3)), 2, 3)
  f = jax.jit(lambda v: (dml.execute(inc, v)[0], dml.execute(dec, v)[0]))
  check(f, (tie_free(SHAPE, "float32", seed=4),), "float32")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gather_nd_and_one_hot_check_grads_descriptor(dtype: str) -> None:
  """GATHER_ND1 and ONE_HOT accept FLOAT64 from feature level 4_1 (the seed tables)."""
  with precision(dtype):
    t = dml.DataType.FLOAT64 if dtype == "float64" else dml.DataType.FLOAT32
    i32 = dml.DataType.INT32
    gather = dml.GatherND1Desc(
      dml.TensorDesc(t, SHAPE), dml.TensorDesc(i32, (2, 5, 1)), dml.TensorDesc(t, (2, 5, 4)), 3, 3, 1
    )
    hot = dml.OneHotDesc(dml.TensorDesc(i32, (6, 1)), dml.TensorDesc(t, (1, 2)), dml.TensorDesc(t, (6, 4)), axis=1)
    f = jax.jit(lambda v, w: (dml.execute(gather, v, BATCH_INDICES), dml.execute(hot, ONE_HOT_INDICES, w)))
    check(f, (tie_free(SHAPE, dtype, seed=5), tie_free((1, 2), dtype, seed=6)), dtype)


# ----------------------------------------------------------------------------------------------------------------- #
# Point 1: every JAX transformation; Jacobians of the selections against the NumPy reference.
# ----------------------------------------------------------------------------------------------------------------- #


def _selection_jacobian(source: np.ndarray, n_in: int, out_shape: tuple[int, ...]) -> np.ndarray:
  """d out / d x for an output that reads x.flat[source]: one 1 per output element."""
  jac = np.zeros((source.size, n_in), np.float32)
  jac[np.arange(source.size), source.reshape(-1)] = 1
  return jac.reshape(*out_shape, n_in)


def _all_transforms(f: Callable[[jax.Array], jax.Array], x: jax.Array) -> dict[str, jax.Array]:
  t = jnp.ones_like(x)
  y, y_dot = jax.jvp(f, (x,), (t,))
  _, vjp = jax.vjp(f, x)
  scalar = lambda v: jnp.sum(f(v))  # noqa: E731
  return {
    "jvp": y_dot,
    "vjp": vjp(jnp.ones_like(y))[0],
    "grad": jax.grad(scalar)(x),
    "jacfwd": jax.jacfwd(f)(x),
    "jacrev": jax.jacrev(f)(x),
    "hessian": jax.hessian(scalar)(x),
  }


def _assert_linear_map(f: Callable[[jax.Array], jax.Array], x: jax.Array, jac: np.ndarray) -> None:
  """A selection: its Jacobian is ``jac`` in every mode, and its second derivative is 0."""
  got = _all_transforms(f, x)
  n = x.size
  jac2 = jac.reshape(-1, n)
  np.testing.assert_array_equal(got["jacfwd"], jac.reshape(*jac.shape[:-1], *x.shape))
  np.testing.assert_array_equal(got["jacrev"], got["jacfwd"])
  np.testing.assert_array_equal(got["jvp"].reshape(-1), jac2.sum(axis=1))
  np.testing.assert_array_equal(got["vjp"].reshape(-1), jac2.sum(axis=0))
  np.testing.assert_array_equal(got["grad"], got["vjp"])
  np.testing.assert_array_equal(got["hessian"], np.zeros((*x.shape, *x.shape)))


def test_top_k_jacobian_matches_reference() -> None:
  x = tie_free(SHAPE, "float32", seed=7)
  for axis, k, direction in [(1, 2, "increasing"), (2, 3, "decreasing")]:
    _, ref_indices = reference.ref_top_k(np.asarray(x), k, axis, direction)
    positions = np.arange(x.size).reshape(SHAPE)
    source = np.take_along_axis(positions, ref_indices.astype(np.int64), axis=axis)
    f = functools.partial(lambda v, a, kk, d: dml.top_k(v, kk, axis=a, direction=d)[0], a=axis, kk=k, d=direction)
    _assert_linear_map(f, x, _selection_jacobian(source, x.size, source.shape))


def test_gather_nd_jacobian_matches_reference() -> None:
  x = tie_free(SHAPE, "float32", seed=8)
  positions = np.arange(x.size).reshape(SHAPE)
  for indices, batch_dims in [(BATCH_INDICES, 1), (PAIR_INDICES, 0)]:
    source = reference.ref_gather_nd(positions, indices, batch_dims)
    f = functools.partial(lambda v, i, b: dml.gather_nd(v, i, batch_dims=b), i=indices, b=batch_dims)
    _assert_linear_map(f, x, _selection_jacobian(source, x.size, source.shape))


def test_one_hot_jacobian_matches_reference() -> None:
  values = jnp.array([0.25, 2.0, 7.0], jnp.float32)
  # OnValue where the reference puts element 1 (given distinct values), OffValue elsewhere; element 2 unused.
  hot = reference.ref_one_hot(ONE_HOT_INDICES, np.array([0.0, 1.0], np.float32), 4, 1)
  jac = np.stack([1 - hot, hot, np.zeros_like(hot)], axis=-1)
  _assert_linear_map(lambda v: one_hot_dml_layout(ONE_HOT_INDICES, v, 4, axis=-1), values, jac)


@pytest.mark.parametrize("function", [F.L2, F.LOG_SUM_EXP, F.MULTIPLY, F.MAX], ids=lambda f: f.name)
def test_reduce_every_transform_agrees(function: F) -> None:
  """jvp, vjp, grad, jacfwd, jacrev and hessian agree with each other (values: check_grads above)."""
  x = tie_free((3, 4), "float32", seed=9)
  got = _all_transforms(lambda v: dml.reduce(v, function, 1, keepdims=False), x)
  np.testing.assert_allclose(got["jacrev"], got["jacfwd"], rtol=1e-6)
  np.testing.assert_allclose(got["jvp"], got["jacfwd"].sum(axis=(1, 2)), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got["vjp"], got["jacfwd"].sum(axis=0), rtol=1e-6)
  np.testing.assert_allclose(got["grad"], got["vjp"], rtol=1e-6)
  hessian = np.asarray(got["hessian"]).reshape(x.size, x.size)
  assert np.isfinite(hessian).all()
  np.testing.assert_allclose(hessian, hessian.T, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------------------------- #
# Point 2: index outputs and index inputs carry float0 tangents and take part in differentiated code.
# ----------------------------------------------------------------------------------------------------------------- #


def _index_outputs(v: jax.Array) -> tuple[jax.Array, ...]:
  f32, u32 = dml.DataType.FLOAT32, dml.DataType.UINT32
  arg_desc = dml.ArgMaxDesc(
    dml.TensorDesc(f32, SHAPE), dml.TensorDesc(u32, (1, 3, 1)), (0, 2), dml.AxisDirection.DECREASING
  )
  reduce_desc = dml.ReduceDesc(F.ARGMIN, dml.TensorDesc(f32, SHAPE), dml.TensorDesc(u32, (2, 1, 4)), axes=(1,))
  return (
    dml.top_k(v, 2, axis=1)[1],
    dml.argmin(v, (0, 2)),
    dml.argmax(v, 1, ties="last", index_dtype=jnp.int32),
    dml.reduce(v, F.ARGMAX, (0, 1)),
    dml.reduce(v, "argmin", 2, keepdims=False),
    dml.execute(arg_desc, v),
    dml.execute(reduce_desc, v),
  )


def test_index_outputs_have_float0_tangents() -> None:
  x = tie_free(SHAPE, "float32", seed=11)
  outs, tangents = jax.jvp(_index_outputs, (x,), (jnp.ones_like(x),))
  for out, tangent in zip(outs, tangents, strict=True):
    assert tangent.dtype == FLOAT0 and tangent.shape == out.shape
  _, vjp = jax.vjp(_index_outputs, x)
  (cotangent,) = vjp(tuple(np.zeros(o.shape, FLOAT0) for o in outs))
  np.testing.assert_array_equal(cotangent, np.zeros(SHAPE, np.float32))
  np.testing.assert_array_equal(jax.jacfwd(lambda v: _index_outputs(v)[1].astype(jnp.float32))(x), 0)


def test_index_outputs_feed_differentiated_code() -> None:
  """A loss that picks elements by returned indices: its gradient is 1 exactly at the picked elements."""
  x = tie_free(SHAPE, "float32", seed=12)

  def loss(v: jax.Array) -> jax.Array:
    _, indices = dml.top_k(v, 2, axis=2)
    picked = jnp.take_along_axis(v, indices.astype(jnp.int32), axis=2)
    flat = dml.reduce(v, F.ARGMAX, 2, keepdims=True).astype(jnp.int32)
    return jnp.sum(picked) + jnp.sum(jnp.take_along_axis(v, flat, axis=2))

  expected = np.zeros(SHAPE, np.float32)
  _, ref_top = reference.ref_top_k(np.asarray(x), 2, 2, "decreasing")
  np.put_along_axis(expected, ref_top.astype(np.int64), 1.0, axis=2)
  ref_max = reference.ref_arg_reduce(np.asarray(x), (2,), "max", "increasing").astype(np.int64)
  np.put_along_axis(expected, ref_max, np.take_along_axis(expected, ref_max, axis=2) + 1, axis=2)
  np.testing.assert_array_equal(jax.grad(loss)(x), expected)
  np.testing.assert_array_equal(jax.jit(jax.grad(loss))(x), expected)


@pytest.mark.parametrize("index_dtype", [np.int32, np.uint32, np.int8])
def test_index_inputs_have_float0_tangents(index_dtype: type) -> None:
  x = tie_free((3, 4), "float32", seed=13)
  values = jnp.array([0.5, 2.0], jnp.float32)
  gather_indices = np.array([[2], [0], [2]], index_dtype)
  hot_indices = np.array([[1], [0], [3]], index_dtype)

  def f(v: jax.Array, gi: jax.Array, w: jax.Array, hi: jax.Array) -> jax.Array:
    return jnp.sum(dml.gather_nd(v, gi)) + jnp.sum(one_hot_dml_layout(hi, w, 4, axis=-1))

  grads = jax.grad(f, argnums=(0, 1, 2, 3), allow_int=True)(x, gather_indices, values, hot_indices)
  expected_x = np.zeros((3, 4), np.float32)
  expected_x[0], expected_x[2] = 1, 2
  np.testing.assert_array_equal(grads[0], expected_x)
  np.testing.assert_array_equal(grads[2], [9.0, 3.0])  # 12 positions: 3 OnValue, 9 OffValue
  assert grads[1].dtype == FLOAT0 and grads[1].shape == gather_indices.shape
  assert grads[3].dtype == FLOAT0 and grads[3].shape == hot_indices.shape
  zero_g, zero_h = np.zeros(gather_indices.shape, FLOAT0), np.zeros(hot_indices.shape, FLOAT0)
  _, tangent = jax.jvp(f, (x, gather_indices, values, hot_indices), (jnp.ones_like(x), zero_g, values, zero_h))
  np.testing.assert_allclose(tangent, 12.0 + 9 * 0.5 + 3 * 2.0)


# ----------------------------------------------------------------------------------------------------------------- #
# Point 3: the SPEC's subgradients at the edges, exact and finite, to second order.
# ----------------------------------------------------------------------------------------------------------------- #


def _grad_jvp_hessian(
  function: F | str, x: jax.Array, axes: int | tuple[int, ...] | None = None
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  total = lambda v: jnp.sum(dml.reduce(v, function, axes))  # noqa: E731
  t = jnp.asarray(np.arange(1, x.size + 1).reshape(x.shape), x.dtype)
  return jax.grad(total)(x), jax.jvp(total, (x,), (t,))[1], jax.hessian(total)(x), t


def test_l2_at_zero_is_zero() -> None:
  x = jnp.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0], [3e-30, -4e-30, 0.0], [3e20, 4e20, 0.0]], jnp.float32)
  grad, tangent, hessian, t = _grad_jvp_hessian(F.L2, x, 1)
  # Rows 2 and 3: x*x underflows to 0 and overflows to inf, yet the gradient is still x / ||x||.
  expected = np.array([[0, 0, 0], [0.6, 0.8, 0], [0.6, -0.8, 0], [0.6, 0.8, 0]], np.float32)
  np.testing.assert_array_equal(grad, expected)
  np.testing.assert_allclose(tangent, np.sum(expected * np.asarray(t)), rtol=1e-6)
  hessian = np.asarray(hessian).reshape(12, 12)
  assert np.isfinite(hessian).all()
  np.testing.assert_array_equal(hessian[:3], 0)
  # Row 1: (I - g g^T) / ||x|| with ||x|| = 5.
  g = expected[1]
  np.testing.assert_allclose(hessian[3:6, 3:6], (np.eye(3) - np.outer(g, g)) / 5, atol=1e-7)


def test_l2_gradient_is_the_same_on_either_side_of_the_normal_norm_shortcut() -> None:
  # Normal rows alone take the one-pass tangent; with an all-zero row beside them every row is rescaled.
  rows = tie_free((3, 5), "float32", seed=21)
  alone = jax.grad(lambda v: jnp.sum(dml.reduce(v, F.L2, 1)))(rows)
  beside_zero = jax.grad(lambda v: jnp.sum(dml.reduce(v, F.L2, 1)))(jnp.concatenate([rows, jnp.zeros((1, 5))]))
  expected = np.asarray(rows, np.float64) / np.linalg.norm(np.asarray(rows, np.float64), axis=1, keepdims=True)
  np.testing.assert_allclose(alone, expected, rtol=2e-7)
  np.testing.assert_allclose(beside_zero[:3], expected, rtol=2e-7)
  np.testing.assert_array_equal(beside_zero[3], 0)


def test_log_sum_exp_all_minus_inf_is_zero() -> None:
  x = jnp.array([[-np.inf, -np.inf, -np.inf], [-np.inf, 0.0, 0.0], [1.0, 1.0, 1.0]], jnp.float32)
  grad, tangent, hessian, t = _grad_jvp_hessian(F.LOG_SUM_EXP, x, 1)
  expected = np.array([[0, 0, 0], [0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]], np.float32)
  np.testing.assert_array_equal(grad, expected)
  np.testing.assert_allclose(tangent, np.sum(expected * np.asarray(t)), rtol=1e-6)
  hessian = np.asarray(hessian).reshape(9, 9)
  assert np.isfinite(hessian).all()
  np.testing.assert_array_equal(hessian[:3], 0)
  np.testing.assert_array_equal(hessian[:, :3], 0)
  np.testing.assert_allclose(hessian[3:6, 3:6], [[0, 0, 0], [0, 0.25, -0.25], [0, -0.25, 0.25]], atol=1e-7)


@pytest.mark.parametrize(
  ("function", "x", "axes", "expected"),
  [
    (F.MAX, [[1.0, 3.0, 3.0, 2.0]], 1, [[0, 0.5, 0.5, 0]]),
    (F.MIN, [[1.0, 1.0, 2.0, 1.0]], 1, [[1 / 3, 1 / 3, 0, 1 / 3]]),
    (F.MAX, [[5.0, 5.0], [5.0, 5.0]], None, [[0.25, 0.25], [0.25, 0.25]]),
    (F.MIN, [[-0.0, 0.0], [1.0, 0.0]], None, [[1 / 3, 1 / 3], [0, 1 / 3]]),
    (F.MAX, [[2.0, 7.0], [7.0, 1.0]], 0, [[0, 1], [1, 0]]),
  ],
)
def test_max_min_ties_share_equally(function: F, x: list, axes: int | None, expected: list) -> None:
  array = jnp.asarray(x, jnp.float32)
  grad, tangent, hessian, t = _grad_jvp_hessian(function, array, axes)
  np.testing.assert_array_equal(grad, np.asarray(expected, np.float32))
  np.testing.assert_allclose(tangent, np.sum(np.asarray(expected) * np.asarray(t)), rtol=1e-6)
  np.testing.assert_array_equal(hessian, 0)


@pytest.mark.parametrize(
  ("x", "expected_grad", "expected_hessian"),
  [
    ([0.0, 2.0, 3.0], [6, 0, 0], [[0, 3, 2], [3, 0, 0], [2, 0, 0]]),
    ([2.0, -0.0, 3.0], [0, 6, 0], [[0, 3, 0], [3, 0, 2], [0, 2, 0]]),
    ([0.0, 0.0, 3.0], [0, 0, 0], [[0, 3, 0], [3, 0, 0], [0, 0, 0]]),
    ([0.0, 5.0, 0.0], [0, 0, 0], [[0, 0, 5], [0, 0, 0], [5, 0, 0]]),
    ([0.0, 0.0, 0.0], [0, 0, 0], [[0, 0, 0], [0, 0, 0], [0, 0, 0]]),
  ],
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_multiply_with_zeros_is_exact(x: list, expected_grad: list, expected_hessian: list, dtype: type) -> None:
  array = jnp.asarray(x, dtype)
  f = lambda v: dml.reduce(v, F.MULTIPLY, keepdims=False).astype(jnp.float32)  # noqa: E731
  np.testing.assert_array_equal(jax.grad(f)(array), np.asarray(expected_grad, dtype))
  np.testing.assert_array_equal(jax.jacfwd(f)(array), np.asarray(expected_grad, dtype))
  np.testing.assert_array_equal(jax.hessian(f)(array), np.asarray(expected_hessian, dtype))


def test_multiply_with_zeros_along_an_axis() -> None:
  x = jnp.array([[0.0, 2.0, 3.0], [0.0, 0.0, 4.0], [1.0, 2.0, 3.0]], jnp.float32)
  grad = jax.grad(lambda v: jnp.sum(dml.reduce(v, "multiply", 1)))(x)
  np.testing.assert_array_equal(grad, [[6, 0, 0], [0, 0, 0], [6, 3, 2]])


@pytest.mark.parametrize(
  ("x", "k", "direction", "expected"),
  [
    ([1.0, 3.0, 3.0, 2.0], 1, "decreasing", [0, 1, 0, 0]),
    ([1.0, 3.0, 3.0, 3.0], 2, "decreasing", [0, 1, 1, 0]),
    ([2.0, 1.0, 1.0, 3.0], 1, "increasing", [0, 1, 0, 0]),
    ([-0.0, 0.0, -1.0], 1, "decreasing", [1, 0, 0]),
    ([0.0, -0.0, 1.0], 1, "increasing", [1, 0, 0]),
  ],
)
def test_top_k_ties_go_to_the_returned_index(x: list, k: int, direction: str, expected: list) -> None:
  array = jnp.asarray(x, jnp.float32)
  f = lambda v: jnp.sum(dml.top_k(v, k, direction=direction)[0])  # noqa: E731
  np.testing.assert_array_equal(jax.grad(f)(array), np.asarray(expected, np.float32))
  t = jnp.arange(1.0, 1.0 + array.size, dtype=jnp.float32)
  np.testing.assert_array_equal(jax.jvp(f, (array,), (t,))[1], np.sum(np.asarray(expected) * np.asarray(t)))
  np.testing.assert_array_equal(jax.hessian(f)(array), 0)


def test_gather_nd_clamped_reads_get_the_gradient() -> None:
  x = jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], jnp.float32)
  # Reads row: 5 -> 2 (clamped), -7 -> -4 -> 0 (wrapped once, clamped), -1 -> 2, 2, 100 -> 2, 0.
  indices = np.array([[5], [-7], [-1], [2], [100], [0]], np.int32)
  f = lambda v: jnp.sum(dml.gather_nd(v, indices) * jnp.array([[1.0, 10.0]], jnp.float32))  # noqa: E731
  np.testing.assert_array_equal(jax.grad(f)(x), [[2, 20], [0, 0], [4, 40]])
  np.testing.assert_array_equal(jax.jacfwd(f)(x), [[2, 20], [0, 0], [4, 40]])
  np.testing.assert_array_equal(jax.hessian(f)(x), 0)
  huge = np.array([[2**32 - 1, 0], [1, 2**31]], np.uint32)
  # Unsigned: (2**32 - 1, 0) -> (2, 0) and (1, 2**31) -> (1, 1).
  g = jax.grad(lambda v: jnp.sum(dml.gather_nd(v, huge)))(x)
  np.testing.assert_array_equal(g, [[0, 0], [0, 1], [1, 0]])


# ----------------------------------------------------------------------------------------------------------------- #
# Point 4: float16 and bfloat16 gradients accumulate in float32 and round once.
# ----------------------------------------------------------------------------------------------------------------- #

NARROW = {"float16": jnp.float16, "bfloat16": jnp.bfloat16}


def _narrow_cases() -> list:
  cases: list = [
    (f"reduce-{f.name}", functools.partial(lambda v, g: dml.reduce(v, g, (0, 2)), g=f)) for f in VALUE_FUNCTIONS
  ]
  cases += [
    ("top_k", lambda v: dml.top_k(v, 2, axis=1)[0]),
    ("gather_nd", lambda v: dml.gather_nd(v, BATCH_INDICES, batch_dims=1)),
    ("one_hot", lambda v: one_hot_dml_layout(ONE_HOT_INDICES, v.reshape(-1)[:2], 4, axis=-1)),
  ]
  return cases


@pytest.mark.parametrize(
  "dtype", [d if i % 2 == 0 else pytest.param(d, marks=pytest.mark.long) for i, d in enumerate(NARROW)]
)
def test_narrow_float_gradients_match_float32(dtype: str) -> None:
  """The narrow gradient is the float32 gradient (of the same values) rounded once: within half an ulp."""
  narrow = NARROW[dtype]
  eps = float(ml_dtypes.finfo(narrow).eps)
  tiny = float(ml_dtypes.finfo(narrow).smallest_normal)
  cases = _narrow_cases()
  x = tie_free(SHAPE, "float32", seed=14, positive=True).astype(narrow)  # positive: LOG_SUM is defined

  @jax.jit
  def gradients(v: jax.Array) -> list[jax.Array]:
    grads = []
    for _, f in cases:
      y, vjp = jax.vjp(f, v)
      cotangent = jnp.asarray(np.linspace(0.5, 1.5, y.size).reshape(y.shape), narrow)  # same values both ways
      grads.append(vjp(cotangent.astype(y.dtype))[0])
    return grads

  for (name, _), got, want in zip(cases, gradients(x), gradients(x.astype(jnp.float32)), strict=True):
    assert got.dtype == narrow, name
    got, want = np.asarray(got, np.float32), np.asarray(want)
    assert np.all(np.abs(got - want) <= 0.5 * eps * np.abs(want) + tiny), name


@pytest.mark.parametrize(("dtype", "count"), [(jnp.float16, 4096), (jnp.bfloat16, 1024)])
def test_duplicate_reads_accumulate_in_float32(dtype: type, count: int) -> None:
  """A running sum of ones stops at 2048 in float16 and at 256 in bfloat16; the gradient must not."""
  x = jnp.ones((3, 2), dtype)
  y, vjp = jax.vjp(lambda v: dml.gather_nd(v, np.full((count, 1), 1, np.int32)), x)
  np.testing.assert_array_equal(np.asarray(vjp(jnp.ones_like(y))[0], np.float32), [[0, 0], [count, count], [0, 0]])
  # count rows of depth 2, half hot at 0 and half at 1: OffValue and OnValue each fill `count` positions.
  indices = np.tile(np.array([[0], [1]], np.int32), (count // 2, 1))
  y, vjp = jax.vjp(lambda w: one_hot_dml_layout(indices, w, 2, axis=-1), jnp.array([0.0, 1.0], dtype))
  np.testing.assert_array_equal(np.asarray(vjp(jnp.ones_like(y))[0], np.float32), [count, count])


# ----------------------------------------------------------------------------------------------------------------- #
# Point 5: jit, vmap (grad of vmap == vmap of grad) and jax.checkpoint.
# ----------------------------------------------------------------------------------------------------------------- #

PER_EXAMPLE = {
  "top_k": lambda v: jnp.sum(dml.top_k(v, 2, axis=0)[0] ** 2),
  "gather_nd": lambda v: jnp.sum(dml.gather_nd(v, PAIR_INDICES[:, :1]) ** 2),
  "one_hot": lambda v: jnp.sum(one_hot_dml_layout(ONE_HOT_INDICES, v[0, :2], 4, axis=-1) ** 2),
  "l2": lambda v: jnp.sum(dml.reduce(v, F.L2, 1)),
  "log_sum_exp": lambda v: jnp.sum(dml.reduce(v, F.LOG_SUM_EXP) ** 2),
  "multiply": lambda v: jnp.sum(dml.reduce(v, F.MULTIPLY, 0)),
  "max": lambda v: jnp.sum(dml.reduce(v, F.MAX, (0, 1))),
}


@pytest.mark.parametrize(
  "name", [n if i % 2 == 0 else pytest.param(n, marks=pytest.mark.long) for i, n in enumerate(PER_EXAMPLE)]
)
def test_gradients_compose_with_jit_vmap_and_checkpoint(name: str) -> None:
  f = PER_EXAMPLE[name]
  batch = tie_free((5, 3, 4), "float32", seed=15)
  batch = batch.at[0].set(0.0)  # an all-zero example: the L2 edge, under vmap too
  grad = jax.jit(jax.grad(f))
  per_example = np.stack([np.asarray(grad(b)) for b in batch])
  assert np.isfinite(per_example).all()
  grad_of_vmap = jax.jit(jax.grad(lambda bs: jnp.sum(jax.vmap(f)(bs))))(batch)
  vmap_of_grad = jax.jit(jax.vmap(jax.grad(f)))(batch)
  np.testing.assert_allclose(grad_of_vmap, vmap_of_grad, rtol=1e-6)
  np.testing.assert_allclose(vmap_of_grad, per_example, rtol=1e-6)
  np.testing.assert_allclose(jax.vmap(jax.grad(jax.checkpoint(f)))(batch), per_example, rtol=1e-6)
