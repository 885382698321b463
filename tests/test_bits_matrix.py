"""The bit-level matrix: every operator that returns input elements, every type, every path, by bits.

Rows are operators (top_k in both directions on short and long rows, argmin/argmax with first and last
ties, gather_nd, one_hot, reduce MAX/MIN); the other dimensions are every numeric type JAX has
(:data:`DTYPES`), the path (:data:`PATHS`: the platform's own, each ``platform.branch`` branch forced on
CPU with Pallas kernels in interpret mode, and each named top-k strategy forced where it declares it
handles the case), ``jax_enable_x64`` off and on, and the column (:data:`COLUMNS`: plain call, jit,
vmap, jvp of the values, automatic and explicit sharding along the operated axis and along a batch
axis over 4 devices, and a ``jax.export`` for cpu, cuda and tpu run on CPU).

Inputs are random bit patterns of every class (tests/bit_patterns.py). Expectations come from the
independent NumPy reference (tests/reference.py): indices equal to the reference's, values with the
input's bits at those indices, compared by :func:`_assert_values` alone (``assert_bitwise_equal``). A type
the reference refuses (bool where an order is needed), a type XLA cannot hold (float6), or a 64-bit type
with x64 off must raise a DescriptorError, on every path alike.

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
from reference import ref_arg_reduce, ref_extreme, ref_gather_nd, ref_one_hot, ref_top_k

import dmljax as dml
from dmljax._src import platform
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
  *sorted(n for n in dir(jnp) if n.startswith(("float8_", "float6_", "float4_"))),
  *(n for n in ("int2", "int4", "uint2", "uint4") if hasattr(jnp, n)),
)
DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(bool) if n == "bool" else np.dtype(getattr(jnp, n)) for n in _NAMES)
WIDE = frozenset(d for d in DTYPES if d.itemsize == 8)
# XLA has no type for these: refused with a DescriptorError on every path.
NO_XLA_TYPE = frozenset(d for d in DTYPES if d.name.startswith("float6_"))
# jax.export's serialization has no code for these (JAX's limit): their export runs without the round trip.
NOT_SERIALIZED = frozenset(d for d in DTYPES if d.name in ("int2", "uint2"))


def _is_float(dtype: np.dtype) -> bool:
  return bool(jnp.issubdtype(dtype, jnp.floating))


# Rows --------------------------------------------------------------------------------------------------------

Outputs = tuple[np.ndarray | None, np.ndarray | None]  # (values, indices) as NumPy; None: no such output


@dataclasses.dataclass(frozen=True)
class Op:
  """One operator row.

  make: the arguments from a generator and a dtype. call: the library call. expect: ``(values,
  indices)`` from the reference (raising TypeError where the reference refuses the type). tangent: the
  expected tangent of the values output for tangents of argument 0 (``None``: no values to differentiate).
  ordered: whether the type must have an order (bool is refused). op_axis/batch_axis: axes of argument
  0 to shard (``None``: none). top_k: ``(k, largest_first)`` for the strategy table's Case.
  """

  id: str
  make: Callable[[np.random.Generator, np.dtype], tuple[np.ndarray, ...]]
  call: Callable[..., Any]
  expect: Callable[..., Outputs]
  tangent: Callable[..., np.ndarray] | None = None
  ordered: bool = True
  op_axis: int | None = None
  batch_axis: int | None = 0
  top_k: tuple[int, bool] | None = None
  diff_arg: int = 0
  shape: tuple[int, ...] = ()


def _top_k_op(shape: tuple[int, int], k: int, largest_first: bool) -> Op:
  direction = "decreasing" if largest_first else "increasing"

  def expect(x: np.ndarray) -> Outputs:
    values, indices = ref_top_k(x, k, -1, direction)
    return values, indices.astype(np.int32)

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
  )


def _arg_op(find_max: bool, last: bool) -> Op:
  fn = dml.argmax if find_max else dml.argmin
  direction = "decreasing" if last else "increasing"
  return Op(
    id=f"arg{'max' if find_max else 'min'}_{'last' if last else 'first'}",
    make=lambda rng, dtype: (sample(rng, dtype, (4, 40)),),
    call=lambda x: fn(x, 1, ties="last" if last else "first", keepdims=True, index_dtype=jnp.int32),
    expect=lambda x: (None, ref_arg_reduce(x, (1,), "max" if find_max else "min", direction).astype(np.int32)),
    op_axis=1,
  )


def _extreme_op(find_max: bool) -> Op:
  """MAX/MIN return an element of the input, bit for bit: the NaN with the largest bits, +0.0 for MAX of both zeros
  and -0.0 for MIN (IEEE 754-2019 maximum/minimum)."""
  kind = "max" if find_max else "min"

  def expect(x: np.ndarray) -> Outputs:
    return ref_extreme(x, kind, (1,)), None

  return Op(
    id=kind,
    make=lambda rng, dtype: (sample(rng, dtype, (4, 40)),),
    call=lambda x: dml.reduce(x, kind, 1, keepdims=True),
    expect=expect,
    op_axis=1,
  )


def _gather_indices(rng: np.random.Generator) -> np.ndarray:
  return rng.integers(-10, 10, (6, 1)).astype(np.int32)  # negatives count from the end; the rest clamp


_GATHER = Op(
  id="gather_nd",
  make=lambda rng, dtype: (sample(rng, dtype, (8, 4)), _gather_indices(rng)),
  call=lambda x, i: dml.gather_nd(x, i),
  expect=lambda x, i: (ref_gather_nd(x, i, 0), None),
  tangent=lambda x, i, t: ref_gather_nd(t, i, 0),
  ordered=False,
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
  call=lambda i, off, on: dml.one_hot(i, 16, on_value=on, off_value=off),
  expect=lambda i, off, on: (ref_one_hot(i[:, None], np.stack([off, on]), 16, 1), None),
  tangent=lambda i, off, on, t: ref_one_hot(i[:, None], np.stack([_zero_tangent(t), t]), 16, 1),
  ordered=False,
  diff_arg=2,
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
  _GATHER,
  _ONE_HOT,
)

# Paths -------------------------------------------------------------------------------------------------------

# "auto": the platform's own choice (CPU here, with the compiled CPU kernels where built); "cpu_no_kernel": the
# CPU branch without them (a build without a C++ compiler: XLA's top-k selections, REDUCE MAX/MIN's composition).
BRANCHES: tuple[str, ...] = ("auto", *platform.BRANCHES, "cpu_no_kernel")


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

COLUMNS = ("plain", "jit", "vmap", "jvp", "auto_op", "auto_batch", "explicit_op", "explicit_batch", "export")
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
    if self.dtype in NO_XLA_TYPE or (self.dtype in WIDE and not self.x64):
      return True
    return self.op.ordered and self.dtype == np.dtype(bool)


def _applies(op: Op, dtype: np.dtype, path: str, use_x64: bool, column: str) -> bool:
  refused = Cell(op, dtype, path, use_x64, column).refused
  if refused:
    return column == "plain"  # a refusal is the same whatever the transformation
  if path.startswith("strategy:"):
    # A forced strategy also runs the merge of sharded candidates, a case of its own: unsharded columns only.
    if op.top_k is None or column not in _UNSHARDED:
      return False
    k, largest_first = op.top_k
    shapes = [op.shape] + ([(2, *op.shape)] if column == "vmap" else [])
    strategy = dispatch.BY_NAME[path.removeprefix("strategy:")]
    if not all(strategy.handles(Case(dtype, s, k, largest_first)) for s in shapes):
      return False
  if column == "export":
    return path == "auto"  # an export for several platforms lowers every branch
  if column == "jvp":
    return op.tangent is not None and _is_float(dtype)
  if column.endswith("_op"):
    return op.op_axis is not None
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
      _check(op, jax.tree.map(lambda a, n=n: a[n], got), (first, *args[1:]), f"vmap, batch {n}")
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
  else:
    covered.add(("strategy", cell.path, _is_float(cell.dtype)))
  if cell.dtype in WIDE:
    covered.add(("wide-x64", cell.dtype.name, cell.x64))
  if cell.column == "export":  # every platform's branch lowered, the TPU kernel's Mosaic one included
    covered.add(("export-x64", cell.op.id, cell.x64))
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
      with pytest.raises(dml.DescriptorError):
        cell.op.call(*args)
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


def test_a_program_lowered_after_its_choice_ended_keeps_it() -> None:
  """The platform choice a call was traced with is a parameter of the rules that trace again later.

  The TPU table's chunked selection on automatic axes and the partitioning rule on CPU and CUDA trace their
  bodies when the program is lowered or compiled, which may be after the block that chose ended (or, for
  XLA's partitioning callback, on another thread): they run under the choice of their call, not the one in
  force then.
  """
  x = sample(_seed("choice-travels"), np.dtype(jnp.bfloat16), (4, 1100))
  sharding = NamedSharding(_mesh(explicit=False), P(None, "d"))
  want = ref_top_k(x, 5, -1, "decreasing")[0]
  for branch in ("tpu", "cuda"):
    with platform.choosing(branch=branch, top_k=None, interpret=True):
      traced = jax.jit(lambda x: dml.top_k(x, 5), in_shardings=sharding).trace(x)
    lowered = traced.lower()
    if branch == "tpu":  # the chunks are selected by the TPU table's kernel row, not by the CPU table
      assert "dmljax_tpu_fetch" in lowered.as_text(debug_info=True)
    _assert_values(lowered.compile()(x)[0], want, branch)
