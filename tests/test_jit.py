"""Under jax.jit every operator equals its eager self, bit for bit, and does not retrace (issue 2, point 4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest
from _helpers import assert_bitwise_equal, one_hot_dml_layout, tensor_desc

import dmljax as dml
from dmljax._src import arg_reduce, gather_nd, one_hot, reduce, top_k

RNG = np.random.default_rng(20260)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)
X[0, 1, 2] = np.nan
X[1, 2, 3] = -0.0
X[2, 0, :2] = np.inf
GATHER_X = RNG.standard_normal((2, 3, 4)).astype(np.float32)
GATHER_I = np.array([[[2, -1], [7, 0]], [[-9, 3], [1, 1]]], np.int32)
ONE_HOT_I = np.array([[[0]], [[-1]], [[5]], [[2]]], np.int32)
ONE_HOT_V = np.array([[[-2.5, 7.0]]], np.float32)


def T(name: str, *sizes: int) -> dml.TensorDesc:
  return tensor_desc(name, sizes)


# name -> (function of arrays, its arrays, the implementation's inner jitted function)
CASES: dict[str, tuple[Callable[..., Any], tuple[np.ndarray, ...], Any]] = {
  "top_k": (lambda x: dml.top_k(x, 3, axis=1, direction="increasing"), (X,), top_k._top_k_program),
  "TOP_K1": (
    lambda x: dml.execute(
      dml.TopK1Desc(
        T("FLOAT32", 3, 4, 5), T("FLOAT32", 3, 4, 2), T("UINT32", 3, 4, 2), 2, 2, dml.AxisDirection.DECREASING
      ),
      x,
    ),
    (X,),
    top_k._top_k_program,
  ),
  "TOP_K": (
    lambda x: dml.execute(dml.TopKDesc(T("FLOAT32", 3, 4, 5), T("FLOAT32", 1, 4, 5), T("UINT32", 1, 4, 5), 0, 1), x),
    (X,),
    top_k._top_k_program,
  ),
  "argmin": (lambda x: dml.argmin(x, (0, 2), ties="last"), (X,), arg_reduce.arg_program),
  "argmax": (lambda x: dml.argmax(x, 1, keepdims=False), (X,), arg_reduce.arg_program),
  "ARGMIN": (
    lambda x: dml.execute(dml.ArgMinDesc(T("FLOAT32", 3, 4, 5), T("INT32", 3, 1, 1), (2, 1), 0), x),
    (X,),
    arg_reduce.arg_program,
  ),
  "ARGMAX": (
    lambda x: dml.execute(dml.ArgMaxDesc(T("FLOAT32", 3, 4, 5), T("UINT32", 1, 4, 5), (0,), 1), x),
    (X,),
    arg_reduce.arg_program,
  ),
  "gather_nd": (lambda x, i: dml.gather_nd(x, i, batch_dims=1), (GATHER_X, GATHER_I), gather_nd._gather_nd),
  "GATHER_ND1": (
    lambda x, i: dml.execute(
      dml.GatherND1Desc(T("FLOAT32", 2, 3, 4), T("INT32", 2, 2, 2), T("FLOAT32", 1, 2, 2), 3, 3, 1), x, i
    ),
    (GATHER_X, GATHER_I),
    gather_nd._gather_nd,
  ),
  "GATHER_ND": (
    lambda x, i: dml.execute(
      dml.GatherNDDesc(T("FLOAT32", 2, 3, 4), T("INT32", 2, 2, 2), T("FLOAT32", 2, 2, 4), 3, 3), x, i
    ),
    (GATHER_X, GATHER_I),
    gather_nd._gather_nd,
  ),
  "one_hot": (lambda i, v: one_hot_dml_layout(i, v, 6, axis=1), (ONE_HOT_I, ONE_HOT_V), one_hot._one_hot),
  "ONE_HOT": (
    lambda i, v: dml.execute(
      dml.OneHotDesc(T("INT32", 4, 1, 1), T("FLOAT32", 1, 1, 2), T("FLOAT32", 4, 3, 1), 1), i, v
    ),
    (ONE_HOT_I, ONE_HOT_V),
    one_hot._one_hot,
  ),
}
for _function in dml.ReduceFunction:
  _name = _function.name.lower()
  _data = np.abs(X) + 0.5 if _function == dml.ReduceFunction.LOG_SUM else X
  CASES[f"reduce_{_name}"] = (lambda x, f=_name: dml.reduce(x, f, (0, 2)), (_data,), reduce._program)
  _out = "UINT32" if _name.startswith("arg") else "FLOAT32"
  _desc = dml.ReduceDesc(_function, T("FLOAT32", 3, 4, 5), T(_out, 3, 1, 5), (1,))
  CASES[f"REDUCE_{_function.name}"] = (lambda x, d=_desc: dml.execute(d, x), (_data,), reduce._program)


def _leaves(tree: Any) -> list[np.ndarray]:
  return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize("name", list(CASES))
def test_jit_equals_eager_bitwise(name):
  function, args, _ = CASES[name]
  eager = _leaves(function(*args))
  jitted = _leaves(jax.jit(function)(*args))
  assert len(eager) == len(jitted) > 0
  for e, j in zip(eager, jitted, strict=True):
    assert_bitwise_equal(j, e, name)


@pytest.mark.parametrize("name", list(CASES))
def test_no_retrace_with_same_shapes(name):
  """A Python side effect counts traces: new data of the same shapes reuses the trace; a new shape traces again."""
  function, args, _ = CASES[name]
  traces = []

  def counted(*xs):
    traces.append(1)
    return function(*xs)

  jitted = jax.jit(counted)
  first = _leaves(jitted(*args))
  other = [np.roll(a, 1) if a.dtype.kind == "f" else a for a in args]  # different values, same shapes and dtypes
  jitted(*other)
  jitted(*args)
  assert len(traces) == 1
  for a, b in zip(first, _leaves(jitted(*args)), strict=True):
    assert_bitwise_equal(b, a, name)
  assert len(traces) == 1


@pytest.mark.parametrize("name", list(CASES))
def test_repeated_eager_calls_reuse_the_compiled_implementation(name):
  """Eager calls go through one jitted implementation whose cache does not grow on repeated calls."""
  function, args, inner = CASES[name]
  function(*args)
  size = inner._cache_size()
  for _ in range(3):
    function(*[np.array(a) for a in args])
  assert inner._cache_size() == size


def test_new_static_options_trace_again_but_old_ones_do_not():
  traces = []

  def counted(x, k):
    traces.append(k)
    return dml.top_k(x, k, axis=2)

  jitted = jax.jit(counted, static_argnums=1)
  for k in (1, 2, 1, 2, 1):
    jitted(X, k)
  assert traces == [1, 2]


def test_descriptor_built_inside_jit_from_shapes():
  """The descriptor path composes with jit when the descriptor is derived from the traced shapes."""
  traces = []

  @jax.jit
  def f(x):
    traces.append(1)
    desc = dml.ArgMinDesc(
      dml.TensorDesc.like(x), T("UINT32", *(1 if d == 1 else s for d, s in enumerate(x.shape))), (1,), 0
    )
    return dml.execute(desc, x)

  a = f(X)
  b = f(X + np.float32(1))
  assert len(traces) == 1
  assert_bitwise_equal(a, dml.argmin(X, 1, keepdims=True, index_dtype=np.uint32), "jit(execute)")
  assert_bitwise_equal(b, dml.argmin(X + np.float32(1), 1, keepdims=True, index_dtype=np.uint32), "jit(execute) again")


def test_value_reductions_share_one_compilation_across_paths_and_index_dtypes():
  """index_dtype only matters to ARGMAX/ARGMIN: SUM through either path and any index_dtype compiles once."""
  x = RNG.standard_normal((2, 7)).astype(np.float32)
  want = dml.reduce(x, "sum", 1, keepdims=True)
  size = reduce._program._cache_size()
  desc = dml.ReduceDesc(dml.ReduceFunction.SUM, T("FLOAT32", 2, 7), T("FLOAT32", 2, 1), (1,))
  results = [
    dml.reduce(x, "sum", 1, keepdims=True, index_dtype=np.uint32),
    dml.reduce(x, "sum", (-1,), keepdims=True),
    dml.execute(desc, x),
  ]
  assert reduce._program._cache_size() == size
  for got in results:
    assert_bitwise_equal(got, want, "sum")
  # The default keepdims=False (a compilation of its own) gives the same sums without the size-1 axis.
  assert_bitwise_equal(dml.reduce(x, "sum", 1), np.asarray(want).reshape(2), "sum, keepdims=False")
