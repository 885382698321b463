"""What a benchmark workload is: its inputs, the library call, and the forms every contender would naturally write.

A workload draws its inputs from a seeded generator (never zeros) and names:

* ``dmljax``: the library call (timed under an outer ``jax.jit``, and eagerly);
* ``jax``: the natural native-JAX forms that compute the same thing; ``approx_reasons`` names those
  that only approximate DirectML's semantics, with the reason (any other form is exact). Target 1
  compares the library with the fastest native form;
* ``baseline``: for the slow-path workloads (target 2), the fast float32 case of the same shape;
* ``torch`` and ``onnx``: PyTorch forms and a single-node ONNX model.

The first input is the differentiated one where the workload has a gradient. The workloads themselves are
listed by :mod:`benchmarks.cpu.workloads`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

Fn = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class OnnxNode:
  """One ONNX node: ``op_type`` with ``attributes``, on the (prepared) inputs ``in0``, ``in1``... and ``constants``.

  ``inputs`` orders the node's inputs by name (default: the workload inputs, then the constants).
  """

  op_type: str
  attributes: dict[str, Any]
  constants: tuple[tuple[str, np.ndarray], ...] = ()
  outputs: int = 1
  inputs: tuple[str, ...] | None = None
  prepare: Callable[[tuple[np.ndarray, ...]], tuple[np.ndarray, ...]] | None = None


@dataclasses.dataclass(frozen=True)
class Workload:
  """One timed case; ``jax``/``baseline``/``torch`` map a form's name to its function."""

  name: str
  group: str
  make: Callable[[np.random.Generator], tuple[np.ndarray, ...]]
  dmljax: Fn
  jax: dict[str, Fn]
  approx_reasons: dict[str, str] = dataclasses.field(default_factory=dict)
  baseline: dict[str, Fn] = dataclasses.field(default_factory=dict)
  baseline_make: Callable[[np.random.Generator], tuple[np.ndarray, ...]] | None = None
  torch: dict[str, Fn] = dataclasses.field(default_factory=dict)
  onnx: dict[str, OnnxNode] = dataclasses.field(default_factory=dict)
  grad: bool = False
  value_output: int | None = None
  reduction_bytes: int | None = None
  slow_native: bool = False

  @property
  def target(self) -> str:
    """``native`` (target 1: an exact native form exists) or ``slow_path`` (target 2)."""
    return "slow_path" if self.baseline else "native"


def normal(shape: tuple[int, ...], dtype: Any = np.float32) -> Callable[[np.random.Generator], tuple[np.ndarray]]:
  def make(rng: np.random.Generator) -> tuple[np.ndarray]:
    x = rng.standard_normal(shape, dtype=np.float32)
    x[x == 0] = 0.5
    return (x.astype(dtype),)

  return make


def integers(shape: tuple[int, ...]) -> Callable[[np.random.Generator], tuple[np.ndarray]]:
  def make(rng: np.random.Generator) -> tuple[np.ndarray]:
    info = np.iinfo(np.int32)
    return (rng.integers(info.min, info.max, shape, dtype=np.int32, endpoint=True),)

  return make


# Why a native form only approximates DirectML's semantics (shown in the report's legend).
FLOAT_TOP_K = (
  "XLA's TopK orders floats by their IEEE total order: +0.0 ranks above -0.0 instead of tying with it "
  "(ties go by index), and NaNs rank by sign and payload (a negative NaN comes last instead of first)"
)
NEGATED_TOP_K = (
  "smallest-k as -top_k(-x): -0.0 and +0.0 tie-break by sign instead of by index, and NaNs rank by sign "
  "and payload (a NaN may come first instead of last); on integers -INT_MIN overflows"
)
FILL_MODE = "mode 'fill' (the default): an out-of-range index reads NaN, where DirectML clamps it"


def torch_mod() -> Any:
  import torch

  return torch
