"""What dmljax's top-k and argmax lower to on CUDA, from any machine (no GPU needed).

Lowers ``dml.top_k`` (and ``dml.argmax``, for comparison) for the ``cuda`` platform with
``jax.jit(f).trace(spec).lower(lowering_platforms=("cuda",))`` under every GPU selection of
``dmljax._src.key_top_k`` and prints, per dtype, the selection operations of the StableHLO
(``chlo.top_k``, ``stablehlo.sort``, scatters, running sums, Pallas/Triton custom calls) with their
operand types. A sort over the whole row (``64x131072``) is what the radix selections avoid; XLA's
GPU ``TopK`` kernel covers only float32/bfloat16 operands, so ``chlo.top_k`` on ``i32`` keys
becomes a full sort when XLA compiles it.

Run: ``python benchmarks/gpu_lowering.py [--shape 64x131072] [--k 1 8 50 256 1024]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dmljax as dml
from dmljax._src import key_top_k

DTYPES = ("float32", "float16", "bfloat16", "int32", "int8", "uint32")
# The operations that select, sort, scatter, run sums or call kernels.
SELECTION_OPS = (
  "chlo.top_k",
  "stablehlo.sort",
  "stablehlo.scatter",
  "stablehlo.reduce_window",
  "stablehlo.custom_call",
)


def _walk(op: Any) -> Any:
  for region in op.regions:
    for block in region.blocks:
      for inner in block.operations:
        yield inner.operation
        yield from _walk(inner.operation)


def selection_ops(module: Any) -> list[tuple[str, tuple[str, ...]]]:
  """``(operation, operand types)`` of every selection-related operation of a StableHLO module."""
  found = []
  for op in _walk(module.operation):
    if op.name in SELECTION_OPS:
      name = op.name
      if name == "stablehlo.custom_call":
        name += " @" + str(op.attributes["call_target_name"]).strip('"')
      found.append((name, tuple(str(v.type) for v in op.operands)))
  return found


def lower_for_cuda(f: Callable[..., Any], shape: tuple[int, ...], dtype: Any) -> Any:
  """The StableHLO module of ``jax.jit(f)`` on a ``shape``/``dtype`` input, lowered for CUDA."""
  spec = jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))
  return jax.jit(f).trace(spec).lower(lowering_platforms=("cuda",)).compiler_ir("stablehlo")


def full_row_sorts(module: Any, shape: tuple[int, ...]) -> list[tuple[str, tuple[str, ...]]]:
  """The ``sort``/``top_k`` operations of ``module`` whose operand is a whole ``shape`` (row included)."""
  whole = "tensor<" + "x".join(map(str, shape)) + "x"
  return [
    (op, types)
    for op, types in selection_ops(module)
    if op in ("chlo.top_k", "stablehlo.sort") and any(t.startswith(whole) for t in types)
  ]


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--shape", default="64x131072")
  parser.add_argument("--k", type=int, nargs="*", default=[1, 8, 50, 256, 1024])
  parser.add_argument("--dtypes", nargs="*", default=list(DTYPES))
  args = parser.parse_args(argv)
  shape = tuple(int(s) for s in args.shape.split("x"))
  previous = key_top_k.GPU_SELECTION
  try:
    for selection in key_top_k.GPU_SELECTIONS:
      key_top_k.set_gpu_selection(selection)
      print(f"== GPU selection {selection!r}")
      for dtype in args.dtypes:
        for k in args.k:
          module = lower_for_cuda(lambda x, k=k: dml.top_k(x, k), shape, dtype)
          whole = ("" if full_row_sorts(module, shape) else "no ") + "sort or top_k over whole rows"
          print(f"top_k {dtype} {args.shape} k={k}: {whole}")
          for op, types in selection_ops(module):
            print(f"    {op}: {' '.join(types)}")
        module = lower_for_cuda(lambda x: dml.argmax(x, axis=-1), shape, dtype)
        print(f"argmax {dtype} {args.shape} axis=-1: {[op for op, _ in selection_ops(module)] or 'reductions only'}")
  finally:
    key_top_k.set_gpu_selection(previous)


if __name__ == "__main__":
  main()
