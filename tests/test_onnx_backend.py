"""ONNX's own backend conformance tests (onnx.backend.test.BackendTest) on dmljax.onnx.Backend.

Every node test of TopK, ArgMax, ArgMin, GatherND, the ten Reduce* operators and OneHot runs (with the
`_expanded` forms, whose function bodies use the backend's glue), twice: with jax_enable_x64 on, where
every ONNX type is computed as declared, and with it off (the suite's default), where int64 tensors
are computed as int32 and returned as declared. A case is left out only for a named semantic limit.
"""

import re
import unittest
import warnings

import jax
import onnx.backend.test

import dmljax.onnx as donnx

# The operators, and Gather, which the backend runs as GatherND (the gather_elements tests are another op).
_OPERATORS = (
  r"^test_(top_k|argmax|argmin|gathernd|gather_(0|1|2d_indices|negative_indices)_"
  r"|reduce_(sum|mean|max|min|prod|l1|l2|log_sum|log_sum_exp|sum_square)|onehot)"
)
_DEVICE = "cuda" if donnx.supports_device("CUDA") else "cpu"

# Every exclusion, with its reason: each is a limit of dmljax's semantics, not of the backend.
_SIZE_ZERO = "size-0 tensor: dmljax refuses any size-0 dimension (DirectML has no empty tensors)"
_BOOL = "bool input: dmljax's reductions take integer and floating types (DirectML's tables), not bool"
EXCLUDED = {
  r"_empty_set": _SIZE_ZERO,
  r"^test_reduce_(max|min)_bool_inputs": _BOOL,
}
# Without x64, float64 tensors are refused (never computed in float32 silently); those run with x64 only.
_FLOAT64_CASES = r"^test_reduce_log_sum_exp_(?!empty_set)"


def _reason(name):
  for pattern, reason in EXCLUDED.items():
    if re.search(pattern, name):
      return reason
  return None


def _build():
  with warnings.catch_warnings():
    # ONNX generates every operator's test data on loading; some of it (not ours) warns in NumPy.
    warnings.simplefilter("ignore")
    backend_test = onnx.backend.test.BackendTest(donnx.Backend, __name__)
  backend_test.include(_OPERATORS)
  cases = backend_test.test_cases["OnnxBackendNodeModelTest"]
  names = sorted(n for n in dir(cases) if re.search(_OPERATORS, n) and n.endswith(f"_{_DEVICE}"))
  return {n: getattr(cases, n) for n in names}


# ONNX's generated test functions by name (kept out of module scope as a TestCase, which pytest would collect).
_FUNCTIONS = _build()
SELECTED = sorted(_FUNCTIONS)


def _make_class(class_name, x64, names):
  def set_up(self):
    context = jax.enable_x64(x64)
    context.__enter__()
    self.addCleanup(context.__exit__, None, None, None)

  members = {"setUp": set_up}
  for name in names:
    function = _FUNCTIONS[name]
    reason = _reason(name)
    members[name] = unittest.skip(reason)(function) if reason else function
  return type(class_name, (unittest.TestCase,), members)


OnnxNodeTestsX64 = _make_class("OnnxNodeTestsX64", True, SELECTED)
OnnxNodeTestsX32 = _make_class("OnnxNodeTestsX32", False, [n for n in SELECTED if not re.search(_FLOAT64_CASES, n)])


def test_selection_covers_every_operator():
  """The selection is what ONNX ships for these operators, with exclusions only for the stated reasons."""
  prefixes = {
    "top_k",
    "argmax",
    "argmin",
    "gathernd",
    "gather",
    "onehot",
    "reduce_sum",
    "reduce_mean",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "reduce_l1",
    "reduce_l2",
    "reduce_log_sum",
    "reduce_log_sum_exp",
    "reduce_sum_square",
  }
  for prefix in prefixes:
    assert any(n.startswith(f"test_{prefix}_") or n == f"test_{prefix}_{_DEVICE}" for n in SELECTED), prefix
  excluded = [n for n in SELECTED if _reason(n)]
  assert len(SELECTED) - len(excluded) >= 160  # ONNX 1.23 ships 184 such cases, 18 of them size-0 or bool
  assert all("empty_set" in n or "bool" in n for n in excluded)
