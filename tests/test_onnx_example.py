"""examples/onnx_routing.py on its reduced settings: the ONNX routing graph under jit and grad, against ONNX
Runtime and a plain-JAX rewrite."""

import importlib.util
import pathlib

from _helpers import peer

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "onnx_routing.py"


def test_onnx_routing_example():
  peer("onnx")
  peer("onnxruntime")  # the example compares with ONNX Runtime
  spec = importlib.util.spec_from_file_location("examples_onnx_routing", EXAMPLE)
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  result = module.main(fast=True)
  # The bars the example asserts, restated so that a weakened example cannot pass silently.
  assert result["ort_error"] is not None and result["ort_error"] < 1e-5
  assert result["mixed_error"] < 1e-5
  assert result["gradient_error"] < 1e-5


def test_onnx_overhead_benchmark_smoke():
  """benchmarks/peers/onnx_overhead.py on a tiny workload: same optimized XLA program, same outputs, a finite ratio."""
  peer("onnx")
  path = EXAMPLE.parent.parent / "benchmarks" / "peers" / "onnx_overhead.py"
  spec = importlib.util.spec_from_file_location("benchmarks_onnx_overhead", path)
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  result = module.main(tokens=64, experts=8, width=4, rounds=3, calls=2)
  assert result["same_program"] is True
  assert 0 < result["ratio"] < 100
  small = module.four_node(rounds=2, calls=2)
  assert small["same_program"] is True
  assert all(0 < us < 1e6 for us in small["us"].values()) and 0 < small["run_over_function"] < 100
