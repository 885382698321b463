"""The bit-level matrix: every operator that returns input elements, every type, every path, by bits.

Rows are operators (top_k in both directions on short and long rows, argmin/argmax with first and last
ties, gather_nd, one_hot with DirectML's and with jax.nn.one_hot's rule for negative indices, reduce MAX/MIN, and
MAX/MIN of 8- and 16-bit integers that wrapping arithmetic in the same program computed)
and the functional path's JAX input kinds (SUM in jnp's result types, of bool, integers and complex numbers;
rank-0 argmax and MAX; size-0 SUM, argmax, top_k and one_hot); the other dimensions are every numeric type
JAX has, bool and complex included (:data:`DTYPES`), the path (:data:`PATHS`: the platform's own, each
``platform.branch`` branch forced on CPU with Pallas kernels in interpret mode, and each named top-k strategy
forced where it declares it handles the case), ``jax_enable_x64`` off and on, and the column (:data:`COLUMNS`:
plain call, jit, vmap, jvp of the values, automatic and explicit sharding along the operated axis and along a
batch axis over 4 devices, and a ``jax.export`` for cpu, cuda and tpu run on CPU).

Inputs are random bit patterns of every class (tests/bit_patterns.py). Expectations come from the
independent NumPy reference (tests/reference.py): indices equal to the reference's, values with the
input's bits at those indices, compared by :func:`_assert_values` alone (``assert_bitwise_equal``). A type
the call refuses (complex where an order is needed, as JAX refuses it), a type XLA cannot hold (float6), or a
64-bit type with x64 off given to gather_nd must raise a DescriptorError, on every path alike; the other calls
narrow 64-bit data without x64 as JAX does, and are checked against the reference on the narrowed data.

The product is sampled with a fixed seed (every type on every path, every column of every operator,
every strategy, both x64 settings of every operator, every operator's export with x64 off and on);
``DMLJAX_MATRIX=full`` runs all of it, and ``DMLJAX_MATRIX=slice:<seed>`` a slice of
:data:`SLICE_CELLS` cells drawn by ``<seed>`` (any text: CI passes the commit's hash, so every run
covers other cells of the product).
Cells failing for reasons another change is fixing are listed in :data:`KNOWN_INTEGRATOR_DEFECTS` only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import warnings
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import assert_bitwise_equal, x64
from bit_patterns import finite_tangent, sample
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from reference import (
  ref_arg_reduce,
  ref_complex_extreme,
  ref_extreme,
  ref_gather_nd,
  ref_one_hot,
  ref_reduce,
  ref_top_k,
)

import dmljax as dml
from dmljax._src import cpu_kernel_library, platform
from dmljax._src.strategies import dispatch
from dmljax._src.strategies.case import Case

# Types -------------------------------------------------------------------------------------------------------

_NAMES = (
  "bool",
  "bfloat16",
  "float16",
  "float32",
  "float64",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint8",
  "uint16",
  "uint32",
  "uint64",
  "complex64",
  "complex128",
  *sorted(n for n in dir(jnp) if n.startswith(("float8_", "float6_", "float4_"))),
  *(n for n in ("int2", "int4", "uint2", "uint4") if hasattr(jnp, n)),
)
DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(bool) if n == "bool" else np.dtype(getattr(jnp, n)) for n in _NAMES)
# 64-bit types (complex128: two float64s) need x64. Without it the functional path narrows their NumPy data as JAX
# does (float64 to float32, int64 to int32, complex128 to complex64); gather_nd refuses it.
WIDE = frozenset(d for d in DTYPES if d.itemsize == (16 if d.kind == "c" else 8))
NARROW = {np.dtype(n): np.dtype(w) for n, w in (("float64", "float32"), ("int64", "int32"), ("uint64", "uint32"))}
NARROW[np.dtype(np.complex128)] = np.dtype(np.complex64)
# XLA has no type for these: refused with a DescriptorError on every path.
NO_XLA_TYPE = frozenset(d for d in DTYPES if d.name.startswith("float6_"))
# jax.export's serialization has no code for these (JAX's limit): their export runs without the round trip.
NOT_SERIALIZED = frozenset(d for d in DTYPES if d.name in ("int2", "uint2"))


def _is_float(dtype: np.dtype) -> bool:
  return bool(jnp.issubdtype(dtype, jnp.floating))


def _is_complex(dtype: np.dtype) -> bool:
  return np.dtype(dtype).kind == "c"


def _real(dtype: np.dtype) -> bool:
  """An ordered type: everything but complex (bool orders False < True), as jax.lax.top_k and jnp.argmax."""
  return not _is_complex(dtype)


def _summed(dtype: np.dtype) -> np.dtype:
  """jnp.sum's result type (written from docs/semantics.rst): bool as int32, then integers narrower than JAX's
  default integer widened to it (unsigned: the default unsigned); other types stay."""
  wide = jax.config.read("jax_enable_x64")
  if dtype == np.dtype(bool):
    dtype = np.dtype(np.int32)
  if dtype.kind in "iu" or dtype.name in ("int2", "int4", "uint2", "uint4"):
    unsigned = dtype.kind == "u" or dtype.name.startswith("uint")
    default = np.dtype(("u" if unsigned else "i") + ("8" if wide else "4"))
    bits = 8 * dtype.itemsize if dtype.kind in "iu" else int(dtype.name.removeprefix("u").removeprefix("int"))
    return default if bits < 8 * default.itemsize else dtype
  return dtype


def _ordered_as(x: np.ndarray) -> np.ndarray:
  """What the reference orders: bool as uint8 (False < True)."""
  return x.astype(np.uint8) if x.dtype == np.dtype(bool) else x


# Rows --------------------------------------------------------------------------------------------------------

Outputs = tuple[np.ndarray | None, np.ndarray | None]  # (values, indices) as NumPy; None: no such output


@dataclasses.dataclass(frozen=True)
class Op:
  """One operator row.

  make: the arguments from a generator and a dtype. call: the library call. expect: ``(values,
  indices)`` from the reference (raising TypeError where the reference refuses the type). tangent: the
  expected tangent of the values output for tangents of argument 0 (``None``: no values to differentiate).
  accepts: whether the call takes a type (else a DescriptorError: complex for orderings, as JAX refuses it).
  dtypes: the types the row is about (others: not a cell). narrows: whether the call narrows 64-bit data without
  x64, as JAX does (gather_nd refuses it). op_axis/batch_axis: axes of argument 0 to shard (``None``: none).
  top_k: ``(k, largest_first)`` for the strategy table's Case.
  """

  id: str
  make: Callable[[np.random.Generator, np.dtype], tuple[np.ndarray, ...]]
  call: Callable[..., Any]
  expect: Callable[..., Outputs]
  tangent: Callable[..., np.ndarray] | None = None
  accepts: Callable[[np.dtype], bool] = _real
  dtypes: Callable[[np.dtype], bool] = lambda dtype: True
  narrows: bool = True
  op_axis: int | None = None
  batch_axis: int | None = 0
  top_k: tuple[int, bool] | None = None
  diff_arg: int = 0
  shape: tuple[int, ...] = ()
  least: int = 1  # the shortest op_axis the call takes (top_k: k), a constraint of a symbolic op_axis
  out_batch_axis: int | None = None  # the outputs' batch axis, where not batch_axis


def _top_k_op(shape: tuple[int, int], k: int, largest_first: bool) -> Op:
  direction = "decreasing" if largest_first else "increasing"

  def expect(x: np.ndarray) -> Outputs:
    indices = ref_top_k(_ordered_as(x), k, -1, direction)[1]
    return np.take_along_axis(x, indices, axis=-1), indices.astype(np.int32)

  def tangent(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.take_along_axis(t, ref_top_k(x, k, -1, direction)[1], axis=-1)

  return Op(
    id=f"top_k_{direction}_{shape[1]}_k{k}",
    make=lambda rng, dtype: (sample(rng, dtype, shape),),
    call=lambda x: dml.top_k(x, k, direction=direction, index_dtype=jnp.int32),
    expect=expect,
    tangent=tangent,
    op_axis=1,
    top_k=(k, largest_first),
    shape=shape,
    least=k,
  )


def _arg_op(find_max: bool, last: bool) -> Op:
  fn = dml.argmax if find_max else dml.argmin
  direction = "decreasing" if last else "increasing"
  return Op(
    id=f"arg{'max' if find_max else 'min'}_{'last' if last else 'first'}",
    make=lambda rng, dtype: (sample(rng, dtype, (4, 40)),),
    call=lambda x: fn(x, 1, ties="last" if last else "first", keepdims=True, index_dtype=jnp.int32),
    expect=lambda x: (
      None,
      ref_arg_reduce(_ordered_as(x), (1,), "max" if find_max else "min", direction).astype(np.int32),
    ),
    op_axis=1,
  )


def _extreme(x: np.ndarray, kind: str, axes: tuple[int, ...]) -> np.ndarray:
  if _is_complex(x.dtype):
    return ref_complex_extreme(x, kind, axes)
  return ref_extreme(_ordered_as(x), kind, axes).astype(x.dtype)


def _extreme_op(find_max: bool) -> Op:
  """MAX/MIN return an element of the input, bit for bit: the NaN with the largest bits, +0.0 for MAX of both zeros
  and -0.0 for MIN (IEEE 754-2019 maximum/minimum); bool as False < True; complex numbers in JAX's lexicographic
  order (tests/reference.py, ref_complex_extreme)."""
  kind = "max" if find_max else "min"
  return Op(
    id=kind,
    make=lambda rng, dtype: (sample(rng, dtype, (4, 40)),),
    call=lambda x: dml.reduce(x, kind, 1, keepdims=True),
    expect=lambda x: (_extreme(x, kind, (1,)), None),
    accepts=lambda dtype: True,
    op_axis=1,
  )


_WRAPPING_TYPES = frozenset(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16))


def _wrapped_extreme_op(find_max: bool) -> Op:
  """MAX of ``x - 3`` and MIN of ``x + 3`` in the same program, integers of 8 and 16 bits: NumPy's wrapped values'
  extreme (XLA:CPU's own 8-bit reduction of 4096 elements or more saturates the arithmetic it fuses in)."""
  kind = "max" if find_max else "min"

  def wrapped(x: Any) -> Any:
    three = np.array(3, x.dtype)
    return x - three if find_max else x + three

  def expect(x: np.ndarray) -> Outputs:
    with np.errstate(over="ignore"):
      return ref_extreme(wrapped(x), kind, (1,)), None

  return Op(
    id=f"{kind}_of_wrapped",
    make=lambda rng, dtype: (sample(rng, dtype, (4, 4096)),),
    call=lambda x: dml.reduce(wrapped(x), kind, 1, keepdims=True),
    expect=expect,
    accepts=lambda dtype: True,
    dtypes=lambda dtype: dtype in _WRAPPING_TYPES,
    op_axis=1,
  )


def _exact_sum_input(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
  """Random bit patterns for integers and bool (their sums wrap exactly); complex numbers with small whole parts,
  whose sums are exact in any order."""
  if _is_complex(dtype):
    out = np.empty(shape, dtype)
    out.real, out.imag = rng.integers(-8, 9, shape), rng.integers(-8, 9, shape)
    return out
  return sample(rng, dtype, shape)


def _sum_expect(x: np.ndarray) -> Outputs:
  """jnp.sum over axis 1, keeping dims: in jnp's result type, wrapping there (complex: NumPy's exact sum)."""
  if _is_complex(x.dtype):
    return x.sum(1, keepdims=True), None
  return ref_reduce(x.astype(_summed(x.dtype)), "sum", (1,)), None


# SUM with jnp's result types: bool and integers widened as jnp.sum widens them, complex numbers. (Float sums are
# rounded in an order the contract leaves open: tests/test_conformance.py checks them within their rounding.)
_SUM = Op(
  id="sum",
  make=lambda rng, dtype: (_exact_sum_input(rng, dtype, (4, 40)),),
  call=lambda x: dml.reduce(x, "sum", 1, keepdims=True),
  expect=_sum_expect,
  accepts=lambda dtype: True,
  dtypes=lambda dtype: not _is_float(dtype),
  op_axis=1,
)


def _scalar(x: np.ndarray) -> np.ndarray:
  return np.asarray(x.reshape(-1)[0])


# Rank 0 (an array of one element, reduced as that element), as jnp.argmax and jnp.max take it.
_ARGMAX_SCALAR = Op(
  id="argmax_scalar",
  make=lambda rng, dtype: (_scalar(sample(rng, dtype, (3,))),),
  call=lambda x: dml.argmax(x, index_dtype=jnp.int32),
  expect=lambda x: (None, np.zeros((), np.int32)),
  batch_axis=None,
)
_MAX_SCALAR = Op(
  id="max_scalar",
  make=lambda rng, dtype: (_scalar(sample(rng, dtype, (3,))),),
  call=lambda x: dml.reduce(x, "max"),
  expect=lambda x: (np.asarray(x), None),
  accepts=lambda dtype: True,
  batch_axis=None,
)


def _zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
  """The number 0 in ``dtype`` (float8_e8m0fnu has none: converting 0 gives its NaN, as in JAX)."""
  return np.zeros(shape, np.float32).astype(dtype) if _is_float(dtype) else np.zeros(shape, dtype)


# Size-0 dimensions: a block of no elements sums to 0 (jnp.sum of shape (0, 8) over axis 0); an empty kept axis gives
# an empty output (argmax and top_k of shape (0, 8) along axis 1); one_hot of no indices.
_SUM_EMPTY = Op(
  id="sum_empty",
  make=lambda rng, dtype: (sample(rng, dtype, (0, 8)),),
  call=lambda x: dml.reduce(x, "sum", 0),
  expect=lambda x: (_zeros(x.shape[1:], _summed(x.dtype)), None),
  accepts=lambda dtype: True,
  batch_axis=1,
  out_batch_axis=0,
)
_ARGMAX_EMPTY = Op(
  id="argmax_empty",
  make=lambda rng, dtype: (sample(rng, dtype, (0, 8)),),
  call=lambda x: dml.argmax(x, 1, index_dtype=jnp.int32),
  expect=lambda x: (None, np.zeros((0,), np.int32)),
  op_axis=1,
)
_TOP_K_EMPTY = Op(
  id="top_k_empty",
  make=lambda rng, dtype: (sample(rng, dtype, (0, 8)),),
  call=lambda x: dml.top_k(x, 3),
  expect=lambda x: (x[:, :3], np.zeros((0, 3), np.int32)),
  op_axis=1,
  least=3,
)


def _gather_indices(rng: np.random.Generator) -> np.ndarray:
  return rng.integers(-10, 10, (6, 1)).astype(np.int32)  # negatives count from the end; the rest clamp


_GATHER = Op(
  id="gather_nd",
  make=lambda rng, dtype: (sample(rng, dtype, (8, 4)), _gather_indices(rng)),
  call=lambda x, i: dml.gather_nd(x, i),
  expect=lambda x, i: (ref_gather_nd(x, i, 0), None),
  tangent=lambda x, i, t: ref_gather_nd(t, i, 0),
  accepts=lambda dtype: True,
  narrows=False,  # gather_nd replaces no JAX call: 64-bit data without x64 is refused, as DirectML needs x64
  op_axis=0,
  batch_axis=1,
)


def _one_hot_args(rng: np.random.Generator, dtype: np.dtype) -> tuple[np.ndarray, ...]:
  """Indices, then OffValue and OnValue as arguments of their own (0-d arrays).

  Not one array sliced in the call: XLA:CPU slices bfloat16 and most 8-bit floats through a wider float
  wherever the slice fuses with what reads it (float normalization), which rewrites NaN payloads in the
  caller's own code, before dmljax sees the values.
  """
  indices = rng.integers(-20, 20, (8,)).astype(np.int32)
  off, on = sample(rng, dtype, (2,), ties=False)
  return indices, np.asarray(off), np.asarray(on)


def _zero_tangent(t: np.ndarray) -> np.ndarray:
  """OffValue's tangent: the number 0 converted to ``t``'s type, as JAX's zero tangents are.

  Not ``np.zeros_like``, which writes zero bits: float8_e8m0fnu has no zero, and its zero bits are 2**-127,
  where converting 0 gives its NaN (what JAX's own ``jnp.where`` differentiates to for that type).
  """
  return np.zeros(t.shape, np.float32).astype(t.dtype)


_ONE_HOT = Op(
  id="one_hot",
  make=_one_hot_args,
  call=lambda i, off, on: dml.one_hot(i, 16, on_value=on, off_value=off, negative_indices="from_end"),
  expect=lambda i, off, on: (ref_one_hot(i[:, None], np.stack([off, on]), 16, 1), None),
  tangent=lambda i, off, on, t: ref_one_hot(i[:, None], np.stack([_zero_tangent(t), t]), 16, 1),
  accepts=lambda dtype: True,
  diff_arg=2,
)


def _all_off_below_0(i: np.ndarray) -> np.ndarray:
  """jax.nn.one_hot's rule through the DirectML reference: a negative index set to 16, out of range (all off)."""
  return np.where(i < 0, 16, i)[:, None]


# The functional default: negative indices give all-off rows, as jax.nn.one_hot.
_ONE_HOT_JAX = Op(
  id="one_hot_negative_off",
  make=_one_hot_args,
  call=lambda i, off, on: dml.one_hot(i, 16, on_value=on, off_value=off),
  expect=lambda i, off, on: (ref_one_hot(_all_off_below_0(i), np.stack([off, on]), 16, 1), None),
  tangent=lambda i, off, on, t: ref_one_hot(_all_off_below_0(i), np.stack([_zero_tangent(t), t]), 16, 1),
  accepts=lambda dtype: True,
  diff_arg=2,
)
_ONE_HOT_EMPTY = Op(
  id="one_hot_empty",
  make=lambda rng, dtype: (np.zeros((0,), np.int32), *_one_hot_args(rng, dtype)[1:]),
  call=lambda i, off, on: dml.one_hot(i, 16, on_value=on, off_value=off),
  expect=lambda i, off, on: (np.zeros((0, 16), np.result_type(off)), None),
  accepts=lambda dtype: True,
)

OPS: tuple[Op, ...] = (
  _top_k_op((4, 40), 5, True),
  _top_k_op((4, 40), 5, False),
  _top_k_op((4, 1100), 5, True),
  _top_k_op((4, 1100), 3, False),
  _top_k_op((4, 2048), 20, True),
  _arg_op(True, False),
  _arg_op(True, True),
  _arg_op(False, False),
  _arg_op(False, True),
  _extreme_op(True),
  _extreme_op(False),
  _wrapped_extreme_op(True),
  _wrapped_extreme_op(False),
  _SUM,
  _ARGMAX_SCALAR,
  _MAX_SCALAR,
  _SUM_EMPTY,
  _ARGMAX_EMPTY,
  _TOP_K_EMPTY,
  _GATHER,
  _ONE_HOT,
  _ONE_HOT_JAX,
  _ONE_HOT_EMPTY,
)

# Paths -------------------------------------------------------------------------------------------------------

# "auto": the platform's own choice (CPU here, with the compiled CPU kernels where built); "cpu_no_kernel": the
# CPU branch without them (a build without a C++ compiler: XLA's top-k selections, REDUCE MAX/MIN's and
# argmin/argmax's compositions).
BRANCHES: tuple[str, ...] = ("auto", *platform.BRANCHES, "cpu_no_kernel")
# The paths every operator is sampled on: with the CPU kernels and without them.
_KERNEL_PATHS = ("auto", "cpu_no_kernel")
# argmin/argmax with both tie rules (rows of 40 elements: the compiled kernel on "auto").
_ARG_OPS = frozenset(f"arg{kind}_{ties}" for kind in ("max", "min") for ties in ("first", "last"))


def _strategy_branch(name: str) -> platform.Branch:
  return next((b for b, table in dispatch.TABLES.items() if any(s.name == name for s in table)), "cuda")


STRATEGIES: tuple[str, ...] = tuple(f"strategy:{name}" for name in sorted(dispatch.BY_NAME))
PATHS: tuple[str, ...] = (*BRANCHES, *STRATEGIES)


def _choice(path: str) -> contextlib.AbstractContextManager[Any]:
  if path == "auto":
    return platform.choosing(branch=None, top_k=None, interpret=False)
  if path.startswith("strategy:"):
    name = path.removeprefix("strategy:")
    return platform.choosing(branch=_strategy_branch(name), top_k=name, interpret=True)
  if path == "cpu_no_kernel":
    return platform.choosing(branch="cpu", top_k=None, interpret=True, cpu_kernel=False)
  return platform.choosing(branch=path, top_k=None, interpret=True)


# Columns -----------------------------------------------------------------------------------------------------

COLUMNS = (
  "plain",
  "jit",
  "vmap",
  "jvp",
  "auto_op",
  "auto_batch",
  "explicit_op",
  "explicit_batch",
  "export",
  "export_symbolic",
  "shard_map",
)
_UNSHARDED = ("plain", "jit", "vmap", "jvp")


@dataclasses.dataclass(frozen=True)
class Cell:
  op: Op
  dtype: np.dtype
  path: str
  x64: bool
  column: str

  @property
  def id(self) -> str:
    return f"{self.op.id}-{self.dtype.name}-{self.path}-{'x64' if self.x64 else 'x32'}-{self.column}"

  @property
  def refused(self) -> bool:
    """Whether the call must raise a DescriptorError (the same on every path)."""
    if self.dtype in NO_XLA_TYPE or (self.dtype in WIDE and not self.x64 and not self.op.narrows):
      return True
    return not self.op.accepts(self.dtype)

  @property
  def narrowed(self) -> bool:
    """Whether the call narrows 64-bit NumPy data to 32 bits (x64 off), as JAX does."""
    return self.dtype in WIDE and not self.x64 and not self.refused


def _applies(op: Op, dtype: np.dtype, path: str, use_x64: bool, column: str) -> bool:
  if not op.dtypes(dtype):
    return False
  cell = Cell(op, dtype, path, use_x64, column)
  if cell.refused:
    return column == "plain"  # a refusal is the same whatever the transformation
  if cell.narrowed:
    return column in ("plain", "jit") and path == "auto"  # JAX narrows the data before dmljax sees it
  if path.startswith("strategy:"):
    # A forced strategy also runs the merge of sharded candidates, a case of its own: unsharded columns only.
    if op.top_k is None or column not in _UNSHARDED:
      return False
    k, largest_first = op.top_k
    shapes = [op.shape] + ([(2, *op.shape)] if column == "vmap" else [])
    strategy = dispatch.BY_NAME[path.removeprefix("strategy:")]
    selected = np.dtype(np.uint8) if dtype == np.dtype(bool) else dtype  # bool is selected as uint8
    if not all(strategy.handles(Case(selected, s, k, largest_first)) for s in shapes):
      return False
  if column == "export":
    return path == "auto"  # an export for several platforms lowers every branch
  if column == "export_symbolic":
    return path == "auto" and bool(_symbolic_axes(op, op.make(_seed(op.id), dtype)[0]))
  if column == "shard_map":
    return op.batch_axis is not None and op.make(_seed(op.id), dtype)[0].shape[op.batch_axis] % _SHARDS == 0
  if column == "jvp":
    return op.tangent is not None and _is_float(dtype)
  if column.endswith("_op"):
    return op.op_axis is not None
  if column.endswith("_batch"):
    return op.batch_axis is not None
  return True


# Known defects ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Defect:
  """Cells failing for a reason another change fixes: every field a set of what it matches (empty: anything)."""

  reason: str
  ops: frozenset[str] = frozenset()
  dtypes: frozenset[str] = frozenset()
  paths: frozenset[str] = frozenset()
  x64: frozenset[bool] = frozenset()
  columns: frozenset[str] = frozenset()

  def matches(self, cell: Cell) -> bool:
    return all(
      not allowed or value in allowed
      for allowed, value in (
        (self.ops, cell.op.id),
        (self.dtypes, cell.dtype.name),
        (self.paths, cell.path),
        (self.x64, cell.x64),
        (self.columns, cell.column),
      )
    )


_LONG_ROWS = frozenset(op.id for op in OPS if op.top_k is not None and op.shape[1] >= 256)  # TPU: tpu_kernel
_SHORT_ROWS = frozenset(op.id for op in OPS if op.top_k is not None and op.shape[1] < 256)
_NARROW_FLOATS = frozenset(d.name for d in DTYPES if _is_float(d) and d.itemsize == 1 and d not in NO_XLA_TYPE)
_FLOATS_UP_TO_32 = frozenset(d.name for d in DTYPES if _is_float(d) and d.itemsize <= 4 and d not in NO_XLA_TYPE)

# The integrator's changes (one order key for every type, the TPU x64 fix, strategies that declare what they
# handle) empty this set; a cell listed here that passes fails the suite (strict xfail).
KNOWN_INTEGRATOR_DEFECTS: frozenset[Defect] = frozenset()

# Found by this matrix, not fixed yet, and in no one else's change: listed so the suite stays green while
# they are, and failing it (strict xfail) once fixed.
KNOWN_OPEN_DEFECTS: frozenset[Defect] = frozenset()


# Running one cell --------------------------------------------------------------------------------------------


def _seed(*parts: object) -> np.random.Generator:
  return np.random.default_rng(zlib.crc32("/".join(map(str, parts)).encode()))


def _assert_values(got: Any, want: np.ndarray, what: str) -> None:
  """The one comparison of values in this matrix: same dtype, shape and bits."""
  assert_bitwise_equal(np.asarray(got), want, what)


def _check(op: Op, got: Any, args: tuple[np.ndarray, ...], what: str) -> None:
  values, indices = op.expect(*args)
  outputs = got if isinstance(got, tuple) else (got,)
  if values is not None and indices is not None:
    got_values, got_indices = outputs
  elif values is not None:
    (got_values,), got_indices = outputs, None
  else:
    got_values, (got_indices,) = None, outputs
  if indices is not None:
    got_indices = np.asarray(got_indices)
    assert got_indices.dtype == indices.dtype, f"{what}: index dtype {got_indices.dtype}"
    np.testing.assert_array_equal(got_indices, indices, err_msg=f"{what}: indices")
  if values is not None:
    _assert_values(got_values, values, f"{what}: values")


def _mesh(explicit: bool) -> jax.sharding.Mesh:
  axis_type = AxisType.Explicit if explicit else AxisType.Auto
  return jax.make_mesh((4,), ("d",), axis_types=(axis_type,), devices=jax.devices()[:4])


def _run_sharded(op: Op, args: tuple[np.ndarray, ...], explicit: bool, axis: int) -> Any:
  spec = P(*([None] * axis), "d")
  mesh = _mesh(explicit)
  shardings = (NamedSharding(mesh, spec), *(NamedSharding(mesh, P()) for _ in args[1:]))
  if explicit:
    placed = [jax.device_put(a, s) for a, s in zip(args, shardings, strict=True)]
    return jax.jit(op.call)(*placed)
  return jax.jit(op.call, in_shardings=shardings)(*args)


def _symbolic_axes(op: Op, first: np.ndarray) -> dict[int, str]:
  """The axes of argument 0 that the ``export_symbolic`` column makes symbolic: the batch axis (``b``) and the axis
  operated on (``n``), where the argument has them and they are not empty (a symbolic dimension is at least 1)."""
  named = {op.batch_axis: "b", op.op_axis: "n"}
  return {axis: name for axis, name in named.items() if axis is not None and first.shape[axis] > 0}


def _symbolic_specs(op: Op, args: tuple[np.ndarray, ...]) -> list[jax.ShapeDtypeStruct]:
  """Argument 0 with :func:`_symbolic_axes` symbolic (op_axis at least ``op.least`` long: a top-k row ``k``, as
  jax.lax.top_k needs), the others as they are."""
  symbols = _symbolic_axes(op, args[0])
  constraints = [f"n >= {op.least}"] if op.least > 1 and "n" in symbols.values() else []
  shape = ", ".join(symbols.get(axis, str(size)) for axis, size in enumerate(args[0].shape))
  first = jax.ShapeDtypeStruct(jax.export.symbolic_shape(shape, constraints=constraints), args[0].dtype)
  return [first, *(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args[1:])]


def _grown(op: Op, args: tuple[np.ndarray, ...], rng: np.random.Generator, dtype: np.dtype) -> tuple[np.ndarray, ...]:
  """The arguments at another size: argument 0 with another of its kind joined along each symbolic axis."""
  first = args[0]
  for axis in _symbolic_axes(op, first):
    other = op.make(rng, dtype)[0]
    first = np.concatenate([first, np.resize(other, first.shape)], axis=axis)
  return (first, *args[1:])


_SHARDS = 4


# Paths whose Pallas kernels run in Pallas's interpret mode on CPU: JAX's interpreter does not type what it computes
# as varying over shard_map's axes (its loops and slices then fail check_vma), so their shard_map cells check the
# bits with check_vma off; tests/test_sharding.py lowers their kernels for CUDA and TPU with it on.
_INTERPRETED_PALLAS = frozenset({"cuda", "tpu"})


def _run_shard_mapped(op: Op, args: tuple[np.ndarray, ...], path: str) -> Any:
  """The call inside ``jax.shard_map`` over 4 devices, each on its block of the batch axis of argument 0 (the others
  replicated), as a data-parallel user runs it (``check_vma`` on, JAX's default, but on the interpreted Pallas
  paths)."""
  assert op.batch_axis is not None
  mesh = _mesh(False)
  out_axis = op.batch_axis if op.out_batch_axis is None else op.out_batch_axis
  in_specs = (P(*([None] * op.batch_axis), "d"), *(P() for _ in args[1:]))
  outputs = jax.eval_shape(op.call, *args)
  out_specs = jax.tree.map(lambda _: P(*([None] * out_axis), "d"), outputs)
  check = path not in _INTERPRETED_PALLAS
  mapped = jax.shard_map(op.call, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=check)
  return jax.jit(mapped)(*args)


def _narrowed(args: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
  """The arguments as JAX narrows 64-bit NumPy data without x64 (float64 to float32, int64 to int32, ...)."""
  with np.errstate(over="ignore", invalid="ignore"):
    return tuple(a.astype(NARROW[a.dtype]) if a.dtype in NARROW else a for a in args)


@contextlib.contextmanager
def _jax_narrowing_warnings() -> Iterator[None]:
  """JAX warns when it narrows a 64-bit NaN or a float64 beyond float32's range (x64 off): expected here."""
  with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "(overflow|invalid value) encountered in cast", RuntimeWarning)
    yield


def _run(cell: Cell, args: tuple[np.ndarray, ...]) -> None:
  # A function of the cell's own: jax.jit caches a trace by function, and a trace made under another path's
  # choice would run that path's code.
  op = dataclasses.replace(cell.op, call=lambda *a: cell.op.call(*a))
  column = cell.column
  if column == "plain":
    _check(op, op.call(*map(jnp.asarray, args)), args, column)
  elif column == "jit":
    _check(op, jax.jit(op.call)(*args), args, column)
  elif column == "vmap":
    other = op.make(_seed(cell.id, "vmap"), cell.dtype)[0]
    got = jax.vmap(op.call, in_axes=(0, *(None for _ in args[1:])))(np.stack([args[0], other]), *args[1:])
    for n, first in enumerate((args[0], other)):
      # Sliced in NumPy: an eager slice of a JAX array is an XLA program, which may rewrite a narrow float's NaNs.
      _check(op, jax.tree.map(lambda a, n=n: np.asarray(a)[n], got), (first, *args[1:]), f"vmap, batch {n}")
  elif column == "jvp":
    assert op.tangent is not None
    position = op.diff_arg
    tangent = finite_tangent(_seed(cell.id, "tangent"), cell.dtype, args[position].shape)

    def values(diff: jax.Array) -> jax.Array:
      full = list(map(jnp.asarray, args))
      full[position] = diff
      out = op.call(*full)
      return out[0] if isinstance(out, tuple) else out

    primal, tangent_out = jax.jvp(values, (jnp.asarray(args[position]),), (jnp.asarray(tangent),))
    _check(op, (primal, *op.call(*args)[1:]) if op.top_k else primal, args, "jvp primal")
    _assert_values(tangent_out, op.tangent(*args, tangent), "jvp tangent")
  elif column == "export":
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    exported = jax.export.export(jax.jit(op.call), platforms=("cpu", "cuda", "tpu"))(*specs)
    if cell.dtype not in NOT_SERIALIZED:
      exported = jax.export.deserialize(exported.serialize())
    _check(op, exported.call(*args), args, column)
  elif column == "export_symbolic":
    exported = jax.export.export(jax.jit(op.call), platforms=("cpu", "cuda", "tpu"))(*_symbolic_specs(op, args))
    if cell.dtype not in NOT_SERIALIZED:
      exported = jax.export.deserialize(exported.serialize())
    grown = _grown(op, args, _seed(cell.id, "grown"), cell.dtype)
    for n, at in enumerate((args, grown)):
      _check(op, exported.call(*at), at, f"{column}, size {n}: {at[0].shape}")
  elif column == "shard_map":
    _check(op, _run_shard_mapped(op, args, cell.path), args, column)
  else:
    explicit = column.startswith("explicit")
    axis = op.op_axis if column.endswith("_op") else op.batch_axis
    assert axis is not None
    _check(op, _run_sharded(op, args, explicit, axis), args, column)


# Sampling ----------------------------------------------------------------------------------------------------


def _product() -> Iterator[Cell]:
  for op, dtype, path, use_x64, column in itertools.product(OPS, DTYPES, PATHS, (False, True), COLUMNS):
    if _applies(op, dtype, path, use_x64, column):
      yield Cell(op, dtype, path, use_x64, column)


def _coverage(cell: Cell) -> set[tuple[Any, ...]]:
  """What a sampled cell stands for: a type on a path, a column of an operator, a strategy, an operator's x64."""
  covered: set[tuple[Any, ...]] = {("op-column", cell.op.id, cell.column), ("op-x64", cell.op.id, cell.x64)}
  if not cell.path.startswith("strategy:"):
    covered.add(("dtype-path", cell.dtype.name, cell.path))
  if cell.path in _KERNEL_PATHS:  # every operator with and without the compiled CPU kernels
    covered.add(("op-path", cell.op.id, cell.path))
  else:
    covered.add(("strategy", cell.path, _is_float(cell.dtype)))
  if cell.dtype in WIDE:
    covered.add(("wide-x64", cell.dtype.name, cell.x64))
  if cell.column in ("export", "export_symbolic"):  # every platform's branch lowered, the TPU kernel's included
    covered.add((f"{cell.column}-x64", cell.op.id, cell.x64))
  return covered


SLICE_CELLS = 1000


def _slice(cells: list[Cell], seed: str) -> list[Cell]:
  """``SLICE_CELLS`` cells of the product drawn by ``seed`` (any text: CI passes the commit's hash), in order."""
  rng = np.random.default_rng(zlib.crc32(seed.encode()))
  chosen = rng.choice(len(cells), size=min(SLICE_CELLS, len(cells)), replace=False)
  return [cells[int(n)] for n in sorted(chosen)]


def _cells() -> list[Cell]:
  cells = list(_product())
  profile = os.environ.get("DMLJAX_MATRIX", "")
  if profile == "full":
    return cells
  if profile.startswith("slice:"):
    return _slice(cells, profile.removeprefix("slice:"))
  rng = np.random.default_rng(20261125)
  order = rng.permutation(len(cells))
  chosen: list[Cell] = []
  covered: set[tuple[Any, ...]] = set()
  for n in order:  # greedy: a cell joins where it covers something no earlier cell did
    cell = cells[int(n)]
    new = _coverage(cell) - covered
    if any(kind in ("dtype-path", "strategy", "wide-x64") for kind, *_ in new) or len(new) >= 2:
      chosen.append(cell)
      covered |= _coverage(cell)
  for n in order:  # then whatever is still missing
    cell = cells[int(n)]
    if _coverage(cell) - covered:
      chosen.append(cell)
      covered |= _coverage(cell)
  return sorted(chosen, key=lambda c: (c.path, c.op.id, c.dtype.name, c.x64, c.column))


CELLS = _cells()


def _marks(cell: Cell) -> list[Any]:
  reasons = [f"integrator: {d.reason}" for d in KNOWN_INTEGRATOR_DEFECTS if d.matches(cell)]
  reasons += [f"open: {d.reason}" for d in KNOWN_OPEN_DEFECTS if d.matches(cell)]
  return [pytest.mark.xfail(strict=True, reason=reasons[0])] if reasons else []


@pytest.fixture(scope="module", autouse=True)
def _choice_restored() -> Iterator[None]:
  yield
  platform.force(None)


@pytest.mark.parametrize("cell", [pytest.param(c, id=c.id, marks=_marks(c)) for c in CELLS])
def test_bits(cell: Cell) -> None:
  args = cell.op.make(_seed(cell.op.id, cell.dtype.name), cell.dtype)
  with x64() if cell.x64 else contextlib.nullcontext(), _choice(cell.path):
    if cell.refused:
      with pytest.raises(dml.DescriptorError), _jax_narrowing_warnings():
        cell.op.call(*args)
      return
    if cell.narrowed:
      with _jax_narrowing_warnings():
        got = cell.op.call(*args) if cell.column == "plain" else jax.jit(cell.op.call)(*args)
      _check(cell.op, got, _narrowed(args), f"{cell.column}, narrowed")
      return
    _run(cell, args)


def test_sample_covers_every_type_path_column_and_strategy() -> None:
  if os.environ.get("DMLJAX_MATRIX", "").startswith("slice:"):
    pytest.skip("a slice is drawn at random: the runs of many commits cover the product together")
  wanted: set[tuple[Any, ...]] = set()
  for cell in _product():
    wanted |= _coverage(cell)
  got: set[tuple[Any, ...]] = set()
  for cell in CELLS:
    got |= _coverage(cell)
  assert wanted <= got, sorted(wanted - got)[:10]
  assert {(d.name, b) for d in DTYPES for b in BRANCHES} <= {k[1:] for k in got if k[0] == "dtype-path"}
  assert {s for s in STRATEGIES} <= {k[1] for k in got if k[0] == "strategy"}
  assert {(o, p) for o in _ARG_OPS for p in _KERNEL_PATHS} <= {k[1:] for k in got if k[0] == "op-path"}


def test_the_kernel_paths_differ_where_the_kernels_are_built() -> None:
  """The two paths every operator is sampled on run different programs: ``auto`` the compiled argmin/argmax kernel
  (where the package was built with it), ``cpu_no_kernel`` its composition."""
  if not cpu_kernel_library.available():
    pytest.skip(f"the package was built without the CPU kernels: {cpu_kernel_library.status()}")
  for op in (op for op in OPS if op.id in _ARG_OPS):
    (x,) = op.make(_seed(op.id, "float32"), np.dtype(np.float32))
    for path, holds in (("auto", True), ("cpu_no_kernel", False)):
      with _choice(path):
        program = jax.jit(lambda v, op=op: op.call(v)).lower(x).as_text()
      assert (cpu_kernel_library.ARG_EXTREME_TARGET in program) is holds, f"{op.id} on {path}"


def test_a_program_lowered_after_its_choice_ended_keeps_it() -> None:
  """The platform choice a call was traced with is a parameter of the rules that trace again later.

  The TPU table's chunked selection on automatic axes (of arrays other than matrices: a matrix's keys go to XLA's
  TopK whole) and the partitioning rule on CPU and CUDA trace their bodies when the program is lowered or
  compiled, which may be after the block that chose ended (or, for XLA's partitioning callback, on another
  thread): they run under the choice of their call, not the one in force then.
  """
  x = sample(_seed("choice-travels"), np.dtype(jnp.bfloat16), (2, 2, 1100))
  sharding = NamedSharding(_mesh(explicit=False), P(None, None, "d"))
  want = ref_top_k(x, 5, -1, "decreasing")[0]
  for branch in ("tpu", "cuda"):
    with platform.choosing(branch=branch, top_k=None, interpret=True):
      traced = jax.jit(lambda x: dml.top_k(x, 5), in_shardings=sharding).trace(x)
    lowered = traced.lower()
    if branch == "tpu":  # the chunks are selected by the TPU table's kernel row, not by the CPU table
      assert "dmljax_tpu_fetch" in lowered.as_text(debug_info=True)
    _assert_values(lowered.compile()(x)[0], want, branch)
