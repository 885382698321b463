"""Composition with jax.vmap and jax.jit (issue 4, points 1 and 2).

Every operator, on the functional path and through ``dml.execute``, is mapped
with jax.vmap over each array argument alone and over all of them, at randomly
chosen (seeded) batch positions, once and nested twice, and compared exactly
with a Python loop over the slices. Under jax.jit, a second call with the same
shapes and options does not retrace, and validation runs only while tracing.
"""

import itertools
import zlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmljax as dml
from dmljax._src import errors

F32, U32, I32 = dml.DataType.FLOAT32, dml.DataType.UINT32, dml.DataType.INT32
_RNG = np.random.default_rng(4)


def _ties(shape: tuple[int, ...]) -> np.ndarray:
  """Small integers as float32: many ties, and sums that are exact in any order."""
  return _RNG.integers(-3, 4, shape).astype(np.float32)


def _indices(shape: tuple[int, ...], low: int, high: int) -> np.ndarray:
  return _RNG.integers(low, high, shape).astype(np.int32)


def _reduce_desc(function: dml.ReduceFunction, out_type: dml.DataType) -> dml.ReduceDesc:
  return dml.ReduceDesc(function, dml.TensorDesc(F32, (3, 4)), dml.TensorDesc(out_type, (3, 1)), axes=(1,))


# (name, function, per-example arguments); every function returns an array or a tuple of arrays.
CASES: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
  ("top_k", lambda x: dml.top_k(x, 3, axis=0), (_ties((5, 4)),)),
  ("top_k_increasing", lambda x: dml.top_k(x, 2, direction="increasing"), (_ties((3, 6)),)),
  ("argmin", lambda x: dml.argmin(x, (0, 2)), (_ties((3, 4, 2)),)),
  ("argmax_decreasing", lambda x: dml.argmax(x, 1, ties="last"), (_ties((3, 5)),)),
  *[(f"reduce_{f.name}", lambda x, f=f: dml.reduce(x, f, (0,)), (_ties((4, 3)) + 4.0,)) for f in dml.ReduceFunction],
  ("gather_nd", lambda x, i: dml.gather_nd(x, i), (_ties((4, 3, 2)), _indices((5, 2), -5, 5))),
  ("gather_nd_batch", lambda x, i: dml.gather_nd(x, i, batch_dims=1), (_ties((3, 4, 2)), _indices((3, 2, 1), -5, 5))),
  (
    "one_hot",
    lambda i, v: dml.one_hot(i, 4, axis=0, on_value=v[1], off_value=v[0]),
    (_indices((5,), -6, 6), _ties((2,))),
  ),
  (
    "execute_top_k1",
    lambda x: dml.execute(
      dml.TopK1Desc(
        dml.TensorDesc(F32, (3, 6)), dml.TensorDesc(F32, (3, 2)), dml.TensorDesc(U32, (3, 2)), 1, 2, "increasing"
      ),
      x,
    ),
    (_ties((3, 6)),),
  ),
  (
    "execute_argmax",
    lambda x: dml.execute(dml.ArgMaxDesc(dml.TensorDesc(F32, (3, 4)), dml.TensorDesc(I32, (1, 1)), (0, 1), 1), x),
    (_ties((3, 4)),),
  ),
  ("execute_reduce_sum", lambda x: dml.execute(_reduce_desc(dml.ReduceFunction.SUM, F32), x), (_ties((3, 4)),)),
  ("execute_reduce_argmin", lambda x: dml.execute(_reduce_desc(dml.ReduceFunction.ARGMIN, U32), x), (_ties((3, 4)),)),
  (
    "execute_gather_nd1",
    lambda x, i: dml.execute(
      dml.GatherND1Desc(dml.TensorDesc(F32, (2, 3)), dml.TensorDesc(I32, (2, 1)), dml.TensorDesc(F32, (1, 2)), 2, 2, 1),
      x,
      i,
    ),
    (_ties((2, 3)), _indices((2, 1), -4, 4)),
  ),
  (
    "execute_one_hot",
    lambda i, v: dml.execute(
      dml.OneHotDesc(dml.TensorDesc(I32, (3, 1)), dml.TensorDesc(F32, (1, 2)), dml.TensorDesc(F32, (3, 4)), 1), i, v
    ),
    (_indices((3, 1), -5, 5), _ties((1, 2))),
  ),
]


def _batched(args: tuple[np.ndarray, ...], which: tuple[bool, ...], size: int, rng: np.random.Generator) -> Any:
  """Batched arrays (batch at a random position) and their in_axes; unbatched arguments pass as they are."""
  arrays, in_axes = [], []
  for arg, batch in zip(args, which, strict=True):
    if not batch:
      arrays.append(arg)
      in_axes.append(None)
      continue
    position = int(rng.integers(0, arg.ndim + 1))
    stacked = np.stack([np.roll(arg, shift) if arg.dtype.kind == "f" else arg - shift for shift in range(size)])
    arrays.append(np.moveaxis(stacked, 0, position))
    in_axes.append(position if rng.random() < 0.5 else position - arg.ndim - 1)
  return arrays, tuple(in_axes)


def _loop(fn: Callable[..., Any], arrays: list[np.ndarray], in_axes: tuple[Any, ...], size: int) -> Any:
  """What vmap must give: ``fn`` on every slice, stacked along a new leading axis."""
  outs = [
    fn(*(a if ax is None else np.take(a, b, axis=ax) for a, ax in zip(arrays, in_axes, strict=True)))
    for b in range(size)
  ]
  return jax.tree.map(lambda *xs: np.stack(xs), *outs)


def _assert_same(got: Any, want: Any) -> None:
  got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
  assert len(got_leaves) == len(want_leaves)
  for g, w in zip(got_leaves, want_leaves, strict=True):
    assert g.dtype == w.dtype
    np.testing.assert_array_equal(np.asarray(g), w)


def _batchings(count: int) -> list[tuple[bool, ...]]:
  """Each argument batched alone, and all batched together."""
  alone = [tuple(i == j for j in range(count)) for i in range(count)]
  return alone if count == 1 else [*alone, (True,) * count]


@pytest.mark.parametrize(("name", "fn", "args"), CASES, ids=[c[0] for c in CASES])
def test_vmap_matches_a_loop_over_slices(name: str, fn: Callable[..., Any], args: tuple[np.ndarray, ...]) -> None:
  rng = np.random.default_rng(zlib.crc32(name.encode()))
  for which in _batchings(len(args)):
    arrays, in_axes = _batched(args, which, 3, rng)
    _assert_same(jax.vmap(fn, in_axes=in_axes)(*arrays), _loop(fn, arrays, in_axes, 3))


@pytest.mark.parametrize(("name", "fn", "args"), CASES, ids=[c[0] for c in CASES])
def test_nested_vmap_matches_nested_loops(name: str, fn: Callable[..., Any], args: tuple[np.ndarray, ...]) -> None:
  rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
  which = _batchings(len(args))[-1]
  inner_arrays, inner_axes = _batched(args, which, 2, rng)
  arrays, outer_axes = _batched(tuple(inner_arrays), which, 3, rng)
  inner = jax.vmap(fn, in_axes=inner_axes)
  want = _loop(lambda *xs: _loop(fn, list(xs), inner_axes, 2), arrays, outer_axes, 3)
  _assert_same(jax.vmap(inner, in_axes=outer_axes)(*arrays), want)
  # Mixed: the outer vmap maps only the first argument, the inner one every argument.
  if len(args) > 1:
    outer_axes = (outer_axes[0], *([None] * (len(args) - 1)))
    mixed = [arrays[0], *inner_arrays[1:]]
    want = _loop(lambda *xs: _loop(fn, list(xs), inner_axes, 2), mixed, outer_axes, 3)
    _assert_same(jax.vmap(inner, in_axes=outer_axes)(*mixed), want)


def test_vmap_of_eight_dimensional_examples() -> None:
  """Validation sees the per-example rank (8, the most DirectML allows), not the batched rank 9."""
  x = _ties((3, 2, 1, 2, 1, 2, 1, 2, 5))
  desc = dml.TopK1Desc(
    dml.TensorDesc(F32, x.shape[1:]),
    dml.TensorDesc(F32, (*x.shape[1:-1], 2)),
    dml.TensorDesc(U32, (*x.shape[1:-1], 2)),
    axis=7,
    k=2,
    axis_direction=dml.AxisDirection.DECREASING,
  )
  fns = [
    lambda e: dml.top_k(e, 2),
    lambda e: dml.execute(desc, e),
    lambda e: dml.argmin(e, (0, 7)),
    lambda e: dml.reduce(e, "sum", (1, 7)),
    lambda e: dml.gather_nd(e, jnp.array([[1, 0, -1]], jnp.int32)),
    lambda e: dml.one_hot(e[..., 0].astype(jnp.int32), 3, axis=-1),  # rank-7 indices, rank-8 output
  ]
  for fn in fns:
    _assert_same(jax.vmap(fn)(x), _loop(fn, [x], (0,), 3))
    _assert_same(jax.vmap(fn, in_axes=8)(np.moveaxis(x, 0, 8)), _loop(fn, [x], (0,), 3))
  with pytest.raises(dml.DescriptorError, match="rank 1 to 8"):
    jax.vmap(lambda e: dml.execute(dml.TopK1Desc.from_inputs(dml.TensorDesc(F32, e.shape), axis=8, k=2), e))(x[None])
  # The functional path takes any rank, as the JAX calls it replaces: rank 9 examples are folded to rank 8 or less.
  _assert_same(jax.vmap(lambda e: dml.top_k(e, 2))(x[None]), _loop(lambda e: dml.top_k(e, 2), [x[None]], (0,), 1))


def test_grad_of_vmapped_top_k_matches_loop() -> None:
  x = _ties((4, 9)) + np.arange(9, dtype=np.float32) / 16

  def loss(row: jax.Array) -> jax.Array:
    values, _ = dml.top_k(row, 3, direction="increasing")
    return jnp.sum(values * jnp.array([1.0, 2.0, 3.0], jnp.float32))

  _assert_same(jax.vmap(jax.grad(loss))(x), _loop(jax.grad(loss), [x], (0,), 4))
  _assert_same(jax.grad(lambda v: jnp.sum(jax.vmap(loss)(v)))(x), _loop(jax.grad(loss), [x], (0,), 4))


JIT_CASES = [c for c in CASES if c[0] in ("top_k", "argmin", "reduce_SUM", "gather_nd", "one_hot")] + [
  c for c in CASES if c[0].startswith("execute_")
]


@pytest.mark.parametrize(("name", "fn", "args"), JIT_CASES, ids=[c[0] for c in JIT_CASES])
def test_jit_does_not_retrace_and_validates_only_while_tracing(
  name: str, fn: Callable[..., Any], args: tuple[np.ndarray, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
  del name
  traces = 0
  validations = 0
  raise_if_any = errors.Problems.raise_if_any

  def counting_raise_if_any(self: errors.Problems) -> None:
    nonlocal validations
    validations += 1
    raise_if_any(self)

  monkeypatch.setattr(errors.Problems, "raise_if_any", counting_raise_if_any)

  def traced(*xs: Any) -> Any:
    nonlocal traces
    traces += 1
    return fn(*xs)

  jitted = jax.jit(traced)
  first = jitted(*args)
  assert (traces, validations) == (1, 1)
  for shift in (1, 2, 3):
    again = jitted(*(a + a.dtype.type(shift) if a.dtype.kind == "f" else a - a.dtype.type(shift) for a in args))
    jax.block_until_ready(again)
  assert (traces, validations) == (1, 1)
  _assert_same(jitted(*args), first)
  # Eagerly, every call validates (it is Python), and each runs the operator's cached kernel.
  for _ in range(2):
    fn(*args)
  assert validations == 3


def test_jit_retraces_for_new_static_options_only() -> None:
  traces = []

  @jax.jit
  def f(x: jax.Array) -> Any:
    traces.append(x.shape)
    return dml.top_k(x, 2)

  x = _ties((3, 5))
  f(x)
  f(x + np.float32(1))
  assert traces == [(3, 5)]
  f(_ties((3, 6)))
  assert traces == [(3, 5), (3, 6)]
  ks = []

  def by_k(x: jax.Array, k: int) -> Any:
    ks.append(k)
    return dml.top_k(x, k)

  g = jax.jit(by_k, static_argnums=1)
  for k, _ in itertools.product((1, 2), range(2)):
    np.testing.assert_array_equal(g(x, k)[0], np.sort(x, axis=-1)[:, ::-1][:, :k])
  assert ks == [1, 2]


def test_second_order_derivatives_of_top_k_under_vmap() -> None:
  """Hessian of sum(values**2): 2 on the diagonal at the selected positions, 0 elsewhere."""
  x = _ties((3, 7)) + np.arange(7, dtype=np.float32) / 8

  def loss(row: jax.Array) -> jax.Array:
    return jnp.sum(dml.top_k(row, 3)[0] ** 2)

  hessians = jax.vmap(jax.hessian(loss))(x)
  selected = np.argsort(-x, axis=1, kind="stable")[:, :3]
  want = np.zeros((3, 7, 7), np.float32)
  for b in range(3):
    want[b, selected[b], selected[b]] = 2.0
  np.testing.assert_array_equal(hessians, want)
  _assert_same(hessians, _loop(jax.hessian(loss), [x], (0,), 3))
