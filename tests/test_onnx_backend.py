"""ONNX's own backend conformance tests (onnx.backend.test.BackendTest) on dmljax.onnx.Backend.

Every node test of TopK, ArgMax, ArgMin, GatherND, the ten Reduce* operators and OneHot runs (with the
`_expanded` forms, whose function bodies use the backend's glue), and so does every node test of the glue
itself: Cast, CastLike, Reshape, Squeeze, Unsqueeze, Identity, Constant, Gather and the elementwise Abs, Neg,
Exp, Log, Sqrt, Add, Sub, Mul and Div. Each runs twice: with jax_enable_x64 on, where every ONNX type is
computed as declared, and with it off (the suite's default), where int64 tensors are computed as int32 and
returned as declared.

No case is skipped. A case the backend cannot run exactly is listed below by name with its reason, and its test
asserts that ``prepare`` refuses the model with a ModelError saying that reason: a type the backend does not run
(sequences, optionals), or, without x64, float64 data and 64-bit integer arithmetic that 32 bits could get wrong.
Size-0 and bool tensors run, with ONNX's results (an empty ReduceMax is -inf, an empty ReduceSum 0). The backend's
``is_compatible`` is bypassed, so that ONNX's runner cannot turn a refusal into a silent skip.
"""

import re
import unittest
import warnings

import jax
import pytest
from _helpers import peer

import dmljax.onnx as donnx

onnx = peer("onnx")
load_model_tests = peer("onnx.backend.test.loader").load_model_tests

_OPERATORS = (
  r"^test_(top_k|argmax|argmin|gathernd|gather_(0|1|2d_indices|negative_indices)_"
  r"|reduce_(sum|mean|max|min|prod|l1|l2|log_sum|log_sum_exp|sum_square)|onehot)"
)
_GLUE = (
  r"^test_(cast|castlike)_|^test_(reshape|unsqueeze)_|^test_squeeze(_negative_axes)?_(cpu|cuda)$"
  r"|^test_(identity|identity_opt|identity_sequence|constant)_(cpu|cuda)$"
  r"|^test_(abs|neg|neg_example|exp|exp_example|log|log_example|sqrt|sqrt_example)_(cpu|cuda)$"
  r"|^test_(add|sub|mul|div)(_bcast|_example|_u?int(8|16|32|64)|_int32_trunc)?_(cpu|cuda)$"
)
_DEVICE = "cuda" if donnx.supports_device("CUDA") else "cpu"

# Every case prepare refuses, by name, with the reason and the words of its ModelError. First match wins.
REFUSED = {
  r"^test_identity_opt$": ("optional type: the backend runs tensors only", "is an optional"),
  r"^test_identity_sequence$": ("sequence type: the backend runs tensors only", "is a sequence"),
}
# Without x64 only: float64 data, which dmljax never computes in 32 bits, and uint64 arithmetic, whose results
# 32 bits could get wrong. Both are refused at prepare with the fix (enable x64).
FLOAT64 = r"DOUBLE|^test_reduce_log_sum_exp_(?!empty_set$)"
REFUSED_WITHOUT_X64 = {
  FLOAT64: ("float64 data: computed only with jax_enable_x64", "float64, which dmljax computes only with"),
  r"^test_(add|sub|mul|div)_uint64$": ("uint64 arithmetic can leave 32 bits", "of uint64 values can leave 32 bits"),
}


def _refusal(name, x64):
  for table in (REFUSED,) if x64 else (REFUSED_WITHOUT_X64, REFUSED):
    for pattern, reason in table.items():
      if re.search(pattern, name):
        return reason
  return None


class _NoSkip(donnx.Backend):
  """The backend, with ONNX's runner unable to skip a model it refuses (it asks is_compatible first)."""

  @classmethod
  def is_compatible(cls, model, device="CPU", **kwargs):
    return True


def _build():
  with warnings.catch_warnings():
    # ONNX generates every operator's test data on loading; some of it (not ours) warns in NumPy.
    warnings.simplefilter("ignore")
    backend_test = onnx.backend.test.BackendTest(_NoSkip, __name__)
  cases = backend_test.test_cases["OnnxBackendNodeModelTest"]
  names = sorted(
    n for n in dir(cases) if (re.search(_OPERATORS, n) or re.search(_GLUE, n)) and n.endswith(f"_{_DEVICE}")
  )
  return {n: getattr(cases, n) for n in names}


# ONNX's generated test functions by name (kept out of module scope as a TestCase, which pytest would collect).
_FUNCTIONS = _build()
SELECTED = sorted(_FUNCTIONS)
_CASES = {f"{case.name}_{_DEVICE}": case for case in load_model_tests(kind="node")}
_MODELS = {name: case.model for name, case in _CASES.items()}
_INPUTS = {name: case.data_sets[0][0] if case.data_sets else [] for name, case in _CASES.items()}


def _base(name):
  return name.removesuffix(f"_{_DEVICE}")


def _refused(name, reason):
  def test(self):
    with pytest.raises(donnx.ModelError, match=re.escape(reason[1])):
      rep = donnx.Backend.prepare(_MODELS[name])
      # A shape-setting graph input (such as a reduction's axes) is only known at run: the graph is traced, and
      # refused, then, before anything of it executes.
      rep.run([onnx.numpy_helper.to_array(t) if isinstance(t, onnx.TensorProto) else t for t in _INPUTS[name]])

  test.__doc__ = f"refused: {reason[0]}"
  return test


def _make_class(class_name, x64):
  def set_up(self):
    context = jax.enable_x64(x64)
    context.__enter__()
    self.addCleanup(context.__exit__, None, None, None)

  members = {"setUp": set_up}
  for name in SELECTED:
    reason = _refusal(_base(name), x64)
    members[name] = _refused(name, reason) if reason else _FUNCTIONS[name]
  return type(class_name, (unittest.TestCase,), members)


OnnxNodeTestsX64 = _make_class("OnnxNodeTestsX64", True)
OnnxNodeTestsX32 = _make_class("OnnxNodeTestsX32", False)


def _has_double(model):
  graph = model.graph
  types = [v.type.tensor_type.elem_type for v in [*graph.input, *graph.output, *graph.value_info]]
  types += [t.data_type for t in graph.initializer]
  types += [a.i for n in graph.node for a in n.attribute if a.name == "to"]
  return onnx.TensorProto.DOUBLE in types or any(
    a.t.data_type == onnx.TensorProto.DOUBLE for n in graph.node for a in n.attribute if a.HasField("t")
  )


def test_selection_covers_every_operator_and_the_lists_name_real_cases():
  """The selection is what ONNX ships for these operators; every refusal list entry names cases that exist, and
  the float64 list is exactly the cases whose models hold float64 (as read from the models, not the names)."""
  prefixes = "top_k argmax argmin gathernd gather onehot cast castlike reshape squeeze unsqueeze".split()
  prefixes += "identity constant".split()
  prefixes += "abs neg exp log sqrt add sub mul div".split()
  prefixes += [f"reduce_{f}" for f in ("sum", "mean", "max", "min", "prod", "l1", "l2", "log_sum", "log_sum_exp")]
  for prefix in prefixes:
    assert any(n.startswith(f"test_{prefix}_") for n in SELECTED), prefix
  bases = [_base(n) for n in SELECTED]
  for table in (REFUSED, REFUSED_WITHOUT_X64):
    for pattern in table:
      assert any(re.search(pattern, b) for b in bases), pattern
  for name in SELECTED:
    assert _has_double(_MODELS[name]) == bool(re.search(FLOAT64, _base(name))), name
  with_x64 = [b for b in bases if not _refusal(b, True)]
  without_x64 = [b for b in bases if not _refusal(b, False)]
  # ONNX 1.23: 424 cases (240 of the glue); 422 run with x64 and 389 without, the others are refused as listed.
  assert len(SELECTED) >= 420 and len(with_x64) >= 418 and len(without_x64) >= 385
