"""Property-based conformance of REDUCE: random valid calls of every function against the NumPy reference.

The cases, the two paths and the subnormal rule are those of tests/test_properties.py (a file of its own so that
the long profile's Hypothesis tests run on both workers: ``--dist loadfile`` gives a file one worker).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import ml_dtypes
import numpy as np
from dml_strategies import (
  TWICE,
  against_either,
  assert_bitwise,
  assert_close,
  assert_indices,
  both_paths,
  reduce_cases,
  x64,
)
from hypothesis import given
from reference import ref_reduce

import dmljax as dml


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


@TWICE
@given(reduce_cases())
def test_reduce_matches_reference(case: dict[str, Any]) -> None:
  with x64(case["x64"]):
    results = both_paths(case)
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
