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
REDUCE's tests are in tests/test_properties_reduce.py, so that the long profile spreads them over both workers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from dml_strategies import (
  TWICE,
  against_either,
  arg_reduce_cases,
  assert_bitwise,
  assert_indices,
  both_paths,
  gather_nd_cases,
  one_hot_cases,
  top_k_cases,
  x64,
)
from hypothesis import given
from reference import ref_arg_reduce, ref_gather_nd, ref_one_hot, ref_top_k


def _reshape(result: Any, shape: tuple[int, ...]) -> Any:
  return np.asarray(result).reshape(shape)


@TWICE
@given(top_k_cases())
def test_top_k_matches_reference(case: dict[str, Any]) -> None:
  x = case["x"]
  with x64(case["x64"]):
    results = both_paths(case)
  for values, indices in results:
    indices = np.asarray(indices)

    def check(x_seen: np.ndarray, indices: np.ndarray = indices) -> None:
      _, want = ref_top_k(x_seen, case["k"], case["axis"], case["direction"])
      assert_indices(indices, want, case["index_dtype"])

    against_either(x, check)
    assert_bitwise(values, np.take_along_axis(x, indices.astype(np.int64), axis=case["axis"]))


@TWICE
@given(arg_reduce_cases())
def test_argmin_argmax_match_reference(case: dict[str, Any]) -> None:
  with x64(case["x64"]):
    results = both_paths(case)
  for got in results:
    against_either(
      case["x"],
      lambda x_seen, got=got: assert_indices(
        got, ref_arg_reduce(x_seen, case["axes"], case["kind"], case["direction"]), case["index_dtype"]
      ),
    )


@TWICE
@given(gather_nd_cases())
def test_gather_nd_matches_reference(case: dict[str, Any]) -> None:
  want = ref_gather_nd(case["x"], case["indices"], case["batch_dims"])
  with x64(case["x64"]):
    functional, *descriptor = both_paths(case)
  assert_bitwise(functional, want)
  for got in descriptor:
    assert np.asarray(got).shape == case["desc"].output_tensor.sizes
    assert_bitwise(_reshape(got, want.shape), want)


@TWICE
@given(one_hot_cases())
def test_one_hot_matches_reference(case: dict[str, Any]) -> None:
  want = ref_one_hot(case["indices"], case["values"], case["depth"], case["axis"])
  with x64(case["x64"]):
    for got in both_paths(case):
      assert_bitwise(got, want)
