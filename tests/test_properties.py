"""Property-based conformance: random valid calls of every operator against the NumPy reference.

Each test draws a case from tests/dml_strategies.py (ranks 1 to 8, every type
SPEC §1 allows on the path, random axes, K, directions, batch dimensions, tuple
lengths and depths; values mixing NaN, ±inf, ±0, subnormals, integer extremes,
heavy ties, and negative or out-of-range indices) and runs it through both
public paths: :func:`dmljax.execute` with the case's descriptor (where the seed
tables allow its types) and the functional API.

Subnormals (SPEC §1 lets a device flush them): ordering results must match the
reference on the input either as given or with subnormals flushed to zero, and
returned values must be bit-exact copies of input elements either way; the
arithmetic reductions compare with subnormals flushed on both sides.

Each test runs twice the profile's derandomized examples (see conftest): 20 by default, 1,000 in the long profile.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import ml_dtypes
import numpy as np
from dml_strategies import (
  against_either,
  arg_reduce_cases,
  assert_bitwise,
  assert_close,
  assert_indices,
  call_functional,
  gather_nd_cases,
  one_hot_cases,
  reduce_cases,
  top_k_cases,
  x64,
)
from hypothesis import given, settings
from reference import ref_arg_reduce, ref_gather_nd, ref_one_hot, ref_reduce, ref_top_k

import dmljax as dml

# Twice the profile's examples: the operators' results, not their errors, are the point here.
_TWICE = settings(max_examples=2 * settings.default.max_examples)


def _both_paths(case: dict[str, Any]) -> list[Any]:
  """The functional result, and the descriptor-path result where the case has a descriptor."""
  results = [call_functional(case)]
  if case["desc"] is not None:
    results.append(dml.execute(case["desc"], *case["inputs"]))
  return results


def _reshape(result: Any, shape: tuple[int, ...]) -> Any:
  return np.asarray(result).reshape(shape)


@_TWICE
@given(top_k_cases())
def test_top_k_matches_reference(case: dict[str, Any]) -> None:
  x = case["x"]
  with x64(case["x64"]):
    results = _both_paths(case)
  for values, indices in results:
    indices = np.asarray(indices)

    def check(x_seen: np.ndarray, indices: np.ndarray = indices) -> None:
      _, want = ref_top_k(x_seen, case["k"], case["axis"], case["direction"])
      assert_indices(indices, want, case["index_dtype"])

    against_either(x, check)
    assert_bitwise(values, np.take_along_axis(x, indices.astype(np.int64), axis=case["axis"]))


@_TWICE
@given(arg_reduce_cases())
def test_argmin_argmax_match_reference(case: dict[str, Any]) -> None:
  with x64(case["x64"]):
    results = _both_paths(case)
  for got in results:
    against_either(
      case["x"],
      lambda x_seen, got=got: assert_indices(
        got, ref_arg_reduce(x_seen, case["axes"], case["kind"], case["direction"]), case["index_dtype"]
      ),
    )


def _eps(dtype: np.dtype) -> float:
  return float((ml_dtypes.finfo(dtype) if dtype == np.dtype(ml_dtypes.bfloat16) else np.finfo(dtype)).eps)


def _check_reduce(case: dict[str, Any], got: Any, x_seen: np.ndarray) -> None:
  function, x = case["function"], case["x"]
  want = ref_reduce(x_seen, function, case["axes"])
  if function in ("argmax", "argmin"):
    assert_indices(got, want, case["index_dtype"])
  elif x.dtype.kind in "iu":
    assert_bitwise(got, want)
  elif function in ("max", "min"):
    assert_close(got, want, rtol=0.0, atol=0.0)
  else:
    # Sums, squares and products of the drawn values are exact in float32; only the final
    # division, square root, log and exp round, and LOG_SUM_EXP adds up N rounded terms.
    n = math.prod(x.shape[a] for a in case["axes"])
    eps_out = _eps(x.dtype)
    eps_acc = min(eps_out, _eps(np.dtype(np.float32)))
    slack = 2 * n * eps_acc if function == "log_sum_exp" else 0.0
    assert_close(got, want, rtol=4 * eps_out, atol=4 * eps_out * (function != "multiply") + slack)


@_TWICE
@given(reduce_cases())
def test_reduce_matches_reference(case: dict[str, Any]) -> None:
  with x64(case["x64"]):
    results = _both_paths(case)
  for got in results:
    against_either(case["x"], lambda x_seen, got=got: _check_reduce(case, got, x_seen))


def test_log_sum_of_a_subnormal_sum_is_minus_inf_in_every_program() -> None:
  """A subnormal sum counts as zero (SPEC §1): LOG_SUM gives -inf eagerly, jitted, vmapped and per element.

  XLA:CPU's float32 log gave about -103.97 for a subnormal in one compiled program and -inf in another (the long
  profile drew ``[0, 0, 0, 0, 1e-45]`` with no axes); the gradient is +inf, as at a zero sum.
  """
  for dtype, tiny in ((np.float32, 1e-45), (np.float64, 5e-324)):
    with x64(dtype == np.float64):
      x = np.array([0.0, 0.0, tiny, -tiny, 3 * tiny], dtype)
      want = np.full(5, -np.inf, dtype)
      assert_bitwise(dml.reduce(x, "LOG_SUM", ()), want)
      assert_bitwise(jax.jit(lambda v: dml.reduce(v, "LOG_SUM", ()))(x), want)
      assert_bitwise(jax.vmap(lambda v: dml.reduce(v, "LOG_SUM"))(x[:, None]), want)
      assert_bitwise(jax.jit(lambda v: dml.reduce(v, "LOG_SUM", 1))(np.stack([x, np.zeros_like(x)], 1)), want)
      grad = jax.grad(lambda v: dml.reduce(v, "LOG_SUM"))(x[2:3])
      assert_bitwise(grad, np.array([np.inf], dtype))


@_TWICE
@given(gather_nd_cases())
def test_gather_nd_matches_reference(case: dict[str, Any]) -> None:
  want = ref_gather_nd(case["x"], case["indices"], case["batch_dims"])
  with x64(case["x64"]):
    functional, *descriptor = _both_paths(case)
  assert_bitwise(functional, want)
  for got in descriptor:
    assert np.asarray(got).shape == case["desc"].output_tensor.sizes
    assert_bitwise(_reshape(got, want.shape), want)


@_TWICE
@given(one_hot_cases())
def test_one_hot_matches_reference(case: dict[str, Any]) -> None:
  want = ref_one_hot(case["indices"], case["values"], case["depth"], case["axis"])
  with x64(case["x64"]):
    for got in _both_paths(case):
      assert_bitwise(got, want)
