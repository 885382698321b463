"""Determinism and host independence.

* The same inputs give bitwise-identical outputs and gradients run after run,
  and between ``jax.jit`` and eager calls, on CPU. Op by op (``jax.disable_jit``)
  the same holds except for the summing reductions, which XLA may add up in
  another order once unfused (equal to rounding).
* ``gather_nd(..., deterministic=True)`` (whose reverse mode avoids the unordered
  scatter-add that makes GPU gradients vary) gives the default's values and
  gradients, in reverse and forward mode and at second order.
* Under jit no operator syncs with the host (``jax.transfer_guard("disallow")``,
  no callbacks in any jaxpr) or raises on data: NaNs and out-of-range indices
  follow the SPEC's policies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import one_hot_dml_layout
from reference import ref_arg_reduce, ref_gather_nd, ref_one_hot, ref_top_k

import dmljax as dml

_RNG = np.random.default_rng(20240611)


def _floats(shape: tuple[int, ...]) -> np.ndarray:
  """Normal values with some exact ties and a few signed zeros, float32."""
  x = (_RNG.standard_normal(shape) * 10).astype(np.float32)
  flat = x.reshape(-1)
  flat[_RNG.integers(0, flat.size, flat.size // 8)] = 1.5
  flat[_RNG.integers(0, flat.size, flat.size // 16)] = -0.0
  return x


X = _floats((4, 10, 3))
W_TOP = _floats((4, 5, 3))
INDICES = _RNG.integers(-12, 12, (40, 2)).astype(np.int32)  # many duplicates once clamped
W_GATHER = _floats((40, 3))
ONE_HOT_INDICES = _RNG.integers(-9, 9, (30, 1)).astype(np.int32)
ON_OFF = np.array([0.25, -3.0], np.float32)

REDUCE_FUNCTIONS = ["average", "l1", "l2", "log_sum_exp", "max", "min", "multiply", "sum", "sum_square"]


def _reduce_grad(function: str) -> Callable[[jax.Array], Any]:
  def f(x: jax.Array) -> Any:
    out = dml.reduce(x, function, (0, 1))
    w = np.linspace(-1.0, 1.0, out.size, dtype=np.float32).reshape(out.shape)
    return out, jax.grad(lambda x: jnp.sum(dml.reduce(x, function, (0, 1)) * w))(x)

  return f


CASES: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
  "top_k": (
    lambda x: (
      dml.top_k(x, 5, axis=1),
      jax.grad(lambda x: jnp.sum(dml.top_k(x, 5, axis=1)[0] * W_TOP))(x),
    ),
    (X,),
  ),
  "argmin": (lambda x: dml.argmin(x, (0, 2), ties="last"), (X,)),
  "argmax": (lambda x: dml.argmax(x, (1,)), (X,)),
  "gather_nd": (
    lambda x, i: (dml.gather_nd(x, i), jax.grad(lambda x: jnp.sum(dml.gather_nd(x, i) * W_GATHER))(x)),
    (X, INDICES),
  ),
  "gather_nd_deterministic": (
    lambda x, i: jax.grad(lambda x: jnp.sum(dml.gather_nd(x, i, deterministic=True) * W_GATHER))(x),
    (X, INDICES),
  ),
  "one_hot": (
    lambda i, v: (
      one_hot_dml_layout(i, v, 7, axis=-1),
      jax.grad(
        lambda v: jnp.sum(one_hot_dml_layout(i, v, 7, axis=-1) * np.arange(7.0, dtype=np.float32).reshape(1, 7))
      )(v),
    ),
    (ONE_HOT_INDICES, ON_OFF),
  ),
  **{f"reduce_{name}": (_reduce_grad(name), (X / 8,)) for name in REDUCE_FUNCTIONS},
}


def _bits(tree: Any) -> list[bytes]:
  return [np.asarray(leaf).tobytes() for leaf in jax.tree.leaves(tree)]


def _half(names: list[str], offset: int) -> list[Any]:
  """Every other case by default (the two tests below take the two halves, so the default run covers every case
  once); all of them in the long profile."""
  return [n if i % 2 == offset else pytest.param(n, marks=pytest.mark.long) for i, n in enumerate(names)]


@pytest.mark.parametrize("name", _half(sorted(CASES), 0))
def test_repeated_runs_and_jit_versus_eager_are_bitwise_identical(name: str) -> None:
  f, args = CASES[name]
  jitted = jax.jit(f)
  first = _bits(jitted(*args))
  assert all(_bits(jitted(*args)) == first for _ in range(3))
  assert _bits(f(*args)) == first


# XLA:CPU sums in a different order when a reduction runs alone than when it is fused with its
# producer (|x|, x², ...), so op by op these agree to rounding only; everything else bit for bit.
_SUMMING = {f"reduce_{name}" for name in ("average", "l1", "l2", "log_sum_exp", "multiply", "sum", "sum_square")}


@pytest.mark.parametrize("name", _half(sorted(CASES), 1))
def test_op_by_op_execution_matches_jit(name: str) -> None:
  f, args = CASES[name]
  jitted = jax.jit(f)(*args)
  with jax.disable_jit():
    eager = f(*args)
  if name not in _SUMMING:
    assert _bits(eager) == _bits(jitted)
    return
  for got, want in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), strict=True):
    np.testing.assert_allclose(got, want, rtol=4e-6, atol=1e-6)


# --------------------------------------------------------------------------- gather_nd(deterministic=True)

GATHER_SHAPES = [
  ((7, 3), (9, 1), 0),
  ((4, 5, 6), (4, 8, 2), 1),
  ((2, 3, 4, 5), (2, 3, 6, 2), 2),
  ((6,), (1,), 0),
  ((3, 4), (2,), 0),
]


@pytest.mark.parametrize(("x_shape", "indices_shape", "batch_dims"), GATHER_SHAPES)
def test_deterministic_gather_nd_matches_the_default(
  x_shape: tuple[int, ...], indices_shape: tuple[int, ...], batch_dims: int
) -> None:
  x = _floats(x_shape)
  indices = _RNG.integers(-9, 9, indices_shape).astype(np.int32)

  def results(deterministic: bool) -> Callable[..., Any]:
    def gather(x: jax.Array) -> jax.Array:
      return dml.gather_nd(x, indices, batch_dims=batch_dims, deterministic=deterministic)

    def all_modes(x: jax.Array, cotangents: list[jax.Array], tangent: jax.Array) -> Any:
      pullback = jax.vjp(gather, x)[1]
      hvp = jax.jvp(jax.grad(lambda x: jnp.sum(gather(x) ** 2)), (x,), (tangent,))[1]
      return gather(x), [pullback(c)[0] for c in cotangents], jax.jvp(gather, (x,), (tangent,))[1], hvp

    return jax.jit(all_modes)

  x = _floats(x_shape)
  indices = _RNG.integers(-9, 9, indices_shape).astype(np.int32)
  want = ref_gather_nd(x, indices, batch_dims)
  # Integer-valued cotangents: duplicate sums are exact in any order, so the gradients must be equal;
  # arbitrary ones: the same sums in another order.
  cotangents = [_RNG.integers(-4, 5, want.shape).astype(np.float32), _floats(want.shape)]
  tangent = _floats(x_shape)
  out, (exact, rounded), forward, hvp = results(True)(x, cotangents, tangent)
  d_out, (d_exact, d_rounded), d_forward, d_hvp = results(False)(x, cotangents, tangent)
  np.testing.assert_array_equal(np.asarray(out).view(np.uint32), want.view(np.uint32))
  np.testing.assert_array_equal(np.asarray(d_out).view(np.uint32), want.view(np.uint32))
  np.testing.assert_array_equal(exact, d_exact)
  np.testing.assert_allclose(rounded, d_rounded, rtol=1e-6, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(forward).view(np.uint32), np.asarray(d_forward).view(np.uint32))
  np.testing.assert_allclose(hvp, d_hvp, rtol=1e-5, atol=1e-4)


def _colliding_scatter_adds(jaxpr: Any) -> list[str]:
  """For every scatter-add not promised unique indices, the primitives that produce its updates."""
  found, producers = [], {}
  for eqn in jaxpr.eqns:
    for out in eqn.outvars:
      producers[out] = eqn
    if eqn.primitive.name == "scatter-add" and not eqn.params["unique_indices"]:
      producer = producers.get(eqn.invars[2])
      inner = producer.params.get("jaxpr") if producer is not None else None
      found.append(",".join(e.primitive.name for e in inner.eqns) if inner is not None else str(producer))
    for sub in _subjaxprs(eqn):
      found += _colliding_scatter_adds(sub)
  return found


def test_deterministic_gather_nd_reverse_mode_adds_duplicates_only_through_a_mask() -> None:
  """The default gradient scatter-adds the cotangent of every duplicate (unordered on GPUs); the
  deterministic one has a single such scatter, whose updates are masked to the first of each run."""
  default = jax.make_jaxpr(jax.grad(lambda x: jnp.sum(dml.gather_nd(x, INDICES) * W_GATHER)))(X)
  assert _colliding_scatter_adds(default.jaxpr)
  grad = jax.grad(lambda x: jnp.sum(dml.gather_nd(x, INDICES, deterministic=True) * W_GATHER))
  assert _colliding_scatter_adds(jax.make_jaxpr(grad)(X).jaxpr) == ["broadcast_in_dim,select_n"]


# --------------------------------------------------------------------------- no host sync, no data-dependent raise


def _primitive_names(jaxpr: Any) -> set[str]:
  names = set()
  for eqn in jaxpr.eqns:
    names.add(eqn.primitive.name)
    for sub in _subjaxprs(eqn):
      names |= _primitive_names(sub)
  return names


def _subjaxprs(eqn: Any) -> list[Any]:
  found = []
  for value in eqn.params.values():
    for v in value if isinstance(value, (tuple, list)) else (value,):
      inner = getattr(v, "jaxpr", v)
      if hasattr(inner, "eqns"):
        found.append(inner)
  return found


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_callbacks_in_any_jaxpr(name: str) -> None:
  f, args = CASES[name]
  names = _primitive_names(jax.make_jaxpr(f)(*args).jaxpr)
  assert not {n for n in names if "callback" in n or n in ("outside_call", "host_callback")}, names


NAN_X = np.array([[np.nan, 1.0, -np.inf, np.nan, 0.0, -0.0]], np.float32)
WILD = np.array([[-(2**31)], [2**31 - 1], [-7], [6], [-6], [5], [0]], np.int32)
WILD_U = np.array([[2**32 - 1], [6], [5]], np.uint32)


def _data_dependent_cases() -> list[tuple[str, Callable[..., Any], tuple[Any, ...], Any]]:
  return [
    ("top_k NaN", lambda x: dml.top_k(x, 4, axis=1)[1], (NAN_X,), ref_top_k(NAN_X, 4, 1, "decreasing")[1]),
    (
      "top_k NaN increasing",
      lambda x: dml.top_k(x, 6, axis=1, direction="increasing")[1],
      (NAN_X,),
      ref_top_k(NAN_X, 6, 1, "increasing")[1],
    ),
    (
      "argmin NaN",
      lambda x: dml.argmin(x, 1, keepdims=True),
      (NAN_X,),
      ref_arg_reduce(NAN_X, (1,), "min", "increasing"),
    ),
    (
      "argmax NaN",
      lambda x: dml.argmax(x, 1, keepdims=True),
      (NAN_X,),
      ref_arg_reduce(NAN_X, (1,), "max", "increasing"),
    ),
    (
      "gather_nd out of range",
      lambda x, i: dml.gather_nd(x, i),
      (NAN_X.reshape(6), WILD),
      ref_gather_nd(NAN_X.reshape(6), WILD, 0),
    ),
    (
      "gather_nd huge unsigned",
      lambda x, i: dml.gather_nd(x, i, deterministic=True),
      (NAN_X.reshape(6), WILD_U),
      ref_gather_nd(NAN_X.reshape(6), WILD_U, 0),
    ),
    (
      "one_hot out of range",
      lambda i, v: one_hot_dml_layout(i, v, 6, axis=-1),
      (WILD, ON_OFF),
      ref_one_hot(WILD, ON_OFF, 6, 1),
    ),
    (
      "one_hot huge unsigned",
      lambda i, v: one_hot_dml_layout(i, v, 6, axis=-1),
      (WILD_U, ON_OFF),
      ref_one_hot(WILD_U, ON_OFF, 6, 1),
    ),
    (
      "reduce NaN",
      lambda x: dml.reduce(x, "max", 1, keepdims=True),
      (NAN_X,),
      np.array([[np.nan]], np.float32),
    ),
  ]


@pytest.mark.parametrize(
  ("f", "args", "want"), [c[1:] for c in _data_dependent_cases()], ids=[c[0] for c in _data_dependent_cases()]
)
def test_data_dependent_cases_under_jit_never_raise_nor_touch_the_host(
  f: Callable[..., Any], args: Any, want: Any
) -> None:
  jitted = jax.jit(f)
  on_device = [jax.device_put(a) for a in args]
  jitted(*on_device)  # compile, and move constants, before the guard
  with jax.transfer_guard("disallow"):
    out = jitted(*on_device)
    out.block_until_ready()
  _assert_policy_result(np.asarray(out), want)


def _assert_policy_result(got: np.ndarray, want: np.ndarray) -> None:
  """Integers equal; floats: NaN where the reference has NaN, the same bits elsewhere."""
  if got.dtype.kind != "f":
    np.testing.assert_array_equal(got.astype(np.int64), want)
    return
  assert got.dtype == want.dtype
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_array_equal(got[~np.isnan(got)].view(np.uint32), want[~np.isnan(want)].view(np.uint32))


def test_descriptor_path_under_transfer_guard() -> None:
  f32, u32 = dml.DataType.FLOAT32, dml.DataType.UINT32
  desc = dml.GatherNDDesc(dml.TensorDesc(f32, (1, 6)), dml.TensorDesc(u32, (3, 1)), dml.TensorDesc(f32, (1, 3)), 1, 2)
  x, i = jax.device_put(NAN_X), jax.device_put(WILD_U)
  jitted = jax.jit(lambda x, i: dml.execute(desc, x, i))
  jitted(x, i)
  with jax.transfer_guard("disallow"):
    out = jitted(x, i)
    out.block_until_ready()
  _assert_policy_result(np.asarray(out), ref_gather_nd(NAN_X.reshape(6), WILD_U, 0).reshape(1, 3))
