"""The library against the independent NumPy reference (tests/reference.py), issue 2 point 2.

The product of dtypes x ranks x axes x directions x K x batch dims x ... is far
too large to enumerate, so every test draws a fixed number of cases from a
seeded RNG (as jax's own tests do), keeping shapes to a few hundred elements.
Each drawn configuration is compiled once and then run on several data sets
(plain random, ties from a tiny value set, NaN/±inf/±0 and integer extremes),
so compilations, not data sets, bound the runtime.

Integer results and indices must match exactly; TOP_K/GATHER_ND/ONE_HOT values
are copies and must match bit for bit; float reductions match within the
per-dtype tolerances of ``_TOLERANCE``. The descriptor path (dml.execute) runs
on a sampled subset of DirectML-typed cases, the functional path on all.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Iterator
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import reference
from _helpers import (
  BFLOAT16,
  SMALL_FLOATS,
  SMALL_INTS,
  WIDE_TYPES,
  assert_bitwise_equal,
  desc_of,
  long_profile,
  one_hot_dml_layout,
  ties,
  x64,
)

import dmljax as dml

MAX_ELEMENTS = 256
# Drawn configurations per operator and type (each compiled once, run on several data sets): 3 by default, 30 in the
# long profile (every test here is ``deep``); DMLJAX_CONFORMANCE_CASES=N sets another count.
pytestmark = pytest.mark.deep
CASES_PER_TYPE = int(os.environ.get("DMLJAX_CONFORMANCE_CASES", "30" if long_profile() else "1"))
# A different DMLJAX_CONFORMANCE_SEED draws a different (equally fixed) sample.
SEED = int(os.environ.get("DMLJAX_CONFORMANCE_SEED", "0"))
DIRECTIONS = ("increasing", "decreasing")
INDEX_DTYPES = tuple(np.dtype(t) for t in (np.uint32, np.int32))
WIDE_INDEX_DTYPES = tuple(np.dtype(t) for t in (np.uint32, np.int32, np.uint64, np.int64))
ALL_INTS = (*SMALL_INTS, np.dtype(np.int64), np.dtype(np.uint64))
DML_INDEX_TYPES = tuple(np.dtype(t) for t in (np.int32, np.int64, np.uint32, np.uint64))


def _dtype_id(dtype: Any) -> str:
  return np.dtype(dtype).name


def _offset(dtype: np.dtype) -> int:
  """Where a type's cycle through ranks 1 to 8 starts, so that the types together cover every rank."""
  return zlib.crc32(dtype.name.encode()) % 8


def _rng(*key: object) -> np.random.Generator:
  """A generator seeded by the test's own key, so each test's sample is fixed and independent."""
  return np.random.default_rng(zlib.crc32(repr(key if SEED == 0 else (SEED, *key)).encode()))


@pytest.fixture(params=[*SMALL_FLOATS, *SMALL_INTS, *WIDE_TYPES], ids=_dtype_id)
def dtype(request) -> Iterator[np.dtype]:
  """Every type the SPEC allows; the 64-bit ones with jax_enable_x64 on (restored after)."""
  if request.param in WIDE_TYPES:
    with x64():
      yield request.param
  else:
    yield request.param


def _wide() -> bool:
  import jax

  return bool(jax.config.read("jax_enable_x64"))


def _is_float(dtype: np.dtype) -> bool:
  return dtype == BFLOAT16 or dtype.kind == "f"


def _is_dml(dtype: np.dtype, *, float64: bool = True) -> bool:
  """Whether the descriptor path takes ``dtype`` (TOP_K1 and ARGMIN/ARGMAX have no FLOAT64 in their tables)."""
  return dtype != BFLOAT16 and (float64 or dtype != np.float64)


# --------------------------------------------------------------------------- #
# data
# --------------------------------------------------------------------------- #
def _shape(rng: np.random.Generator, rank: int, *, at_least: dict[int, int] | None = None) -> tuple[int, ...]:
  """A random shape of ``rank`` with at most MAX_ELEMENTS elements; ``at_least`` pins lower bounds."""
  at_least = at_least or {}
  top = {1: 12, 2: 9, 3: 6, 4: 5, 5: 4}.get(rank, 3)
  sizes = [int(rng.integers(max(1, at_least.get(d, 1)), max(top, at_least.get(d, 1)) + 1)) for d in range(rank)]
  while math.prod(sizes) > MAX_ELEMENTS:
    shrinkable = [d for d in range(rank) if sizes[d] > max(1, at_least.get(d, 1))]
    d = shrinkable[int(rng.integers(len(shrinkable)))]
    sizes[d] -= 1
  return tuple(sizes)


def _special_values(dtype: np.dtype) -> np.ndarray:
  """Extremes and the IEEE specials of a type (NaN, ±inf, ±0, the largest finite values)."""
  if _is_float(dtype):
    info = np.finfo(np.float32) if dtype == BFLOAT16 else np.finfo(dtype)
    big = float(jnp.finfo(dtype).max) if dtype == BFLOAT16 else float(info.max)
    values = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, big, -big, 1.0, -1.0, 0.5, -2.0]
    return np.array(values, dtype=np.float64).astype(dtype)
  info = np.iinfo(dtype)
  return np.array([info.min, info.min + 1, info.max, info.max - 1, 0, 1, 2], dtype=dtype)


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, kind: str) -> np.ndarray:
  """Input data of one of three kinds: "random", "ties" (tiny value set) or "special" (extremes mixed in)."""
  n = math.prod(shape)
  if kind == "ties":
    pool = np.array([-1, 0, 1, 2], np.float64)
    if _is_float(dtype):
      pool = np.array([-1.0, -0.0, 0.0, 2.0], np.float64)
    elif dtype.kind == "u":
      pool = np.array([0, 1, 2, 3], np.float64)
    return pool[rng.integers(len(pool), size=n)].astype(dtype).reshape(shape)
  if _is_float(dtype):
    base = rng.standard_normal(n) * 8
  else:
    info = np.iinfo(dtype)
    base = rng.integers(info.min, int(info.max) + 1, size=n, dtype=np.dtype(dtype))
  out = np.asarray(base).astype(dtype).reshape(-1)
  if kind == "special":
    specials = _special_values(dtype)
    where = rng.random(n) < 0.4
    out[where] = specials[rng.integers(len(specials), size=int(where.sum()))]
  return out.reshape(shape)


KINDS = ("random", "ties", "special")


def _as_jax(x: np.ndarray) -> Any:
  return jnp.asarray(x)


def _index_dtypes() -> tuple[np.dtype, ...]:
  return WIDE_INDEX_DTYPES if _wide() else INDEX_DTYPES


# --------------------------------------------------------------------------- #
# TOP_K
# --------------------------------------------------------------------------- #
def _top_k_cases(rng: np.random.Generator, count: int, offset: int) -> Iterator[tuple[tuple[int, ...], int, int, str]]:
  for i in range(count):
    rank = (i + offset) % 8 + 1
    axis = int(rng.integers(rank))
    shape = _shape(rng, rank, at_least={axis: int(rng.integers(1, 8))})
    k = int(rng.integers(1, shape[axis] + 1))
    yield shape, axis, k, DIRECTIONS[i % 2]


def test_top_k(dtype):
  rng = _rng("top_k", dtype.name)
  for case, (shape, axis, k, direction) in enumerate(_top_k_cases(rng, CASES_PER_TYPE, _offset(dtype))):
    use_descriptor = _is_dml(dtype, float64=False) and case % 2 == 1
    # The descriptor path takes UINT32/UINT64 indices; sharing the functional call's type shares its compilation.
    index_dtype = _index_dtypes()[case % len(_index_dtypes())] if not use_descriptor else np.dtype(np.uint32)
    if use_descriptor and _wide() and case % 4 == 3:
      index_dtype = np.dtype(np.uint64)
    negative_axis = case % 3 == 0
    for kind in KINDS:
      x = _data(rng, shape, dtype, kind)
      want_values, want_indices = reference.ref_top_k(x, k, axis, direction)
      msg = f"top_k {dtype.name}{shape} axis={axis} k={k} {direction} {kind}"
      values, indices = dml.top_k(
        _as_jax(x), k, axis=axis - len(shape) if negative_axis else axis, direction=direction, index_dtype=index_dtype
      )
      assert_bitwise_equal(values, want_values, msg)
      assert_bitwise_equal(indices, want_indices.astype(index_dtype), msg)
      if use_descriptor:
        index_type = index_dtype
        out_shape = want_values.shape
        desc = dml.TopK1Desc(
          desc_of(dtype, shape),
          desc_of(dtype, out_shape),
          desc_of(index_type, out_shape),
          axis=axis,
          k=k,
          axis_direction=dml.AxisDirection[direction.upper()],
        )
        values, indices = dml.execute(desc, x)
        assert_bitwise_equal(values, want_values, "execute " + msg)
        assert_bitwise_equal(indices, want_indices.astype(index_type), "execute " + msg)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_top_k_every_k(direction):
  """K from 1 up to and including the axis size, on one row with ties, NaN, ±inf and ±0."""
  x = np.array([[0.0, -0.0, np.nan, 3.0, -np.inf, 3.0, np.inf, np.nan, 1.0]], np.float32)
  for k in range(1, x.shape[1] + 1):
    want_values, want_indices = reference.ref_top_k(x, k, 1, direction)
    values, indices = dml.top_k(x, k, axis=1, direction=direction, index_dtype=np.uint32)
    assert_bitwise_equal(values, want_values, f"k={k}")
    assert_bitwise_equal(indices, want_indices.astype(np.uint32), f"k={k}")
    desc = dml.TopK1Desc(
      desc_of(np.float32, x.shape),
      desc_of(np.float32, (1, k)),
      desc_of(np.uint32, (1, k)),
      axis=1,
      k=k,
      axis_direction=dml.AxisDirection[direction.upper()],
    )
    values, indices = dml.execute(desc, x)
    assert_bitwise_equal(values, want_values, f"execute k={k}")
    assert_bitwise_equal(indices, want_indices.astype(np.uint32), f"execute k={k}")


# --------------------------------------------------------------------------- #
# ARGMIN / ARGMAX
# --------------------------------------------------------------------------- #
def _axes_subset(rng: np.random.Generator, rank: int, *, allow_empty: bool = False) -> tuple[int, ...]:
  count = int(rng.integers(0 if allow_empty else 1, rank + 1))
  return tuple(int(a) for a in rng.permutation(rank)[:count])


def test_arg_min_max(dtype):
  rng = _rng("arg", dtype.name)
  for case in range(CASES_PER_TYPE):
    rank = (case + _offset(dtype)) % 8 + 1
    shape = _shape(rng, rank)
    axes = _axes_subset(rng, rank)
    kind, direction = ("min", "max")[case % 2], DIRECTIONS[(case // 2) % 2]
    index_dtype = _index_dtypes()[case % len(_index_dtypes())]
    functional = dml.argmin if kind == "min" else dml.argmax
    given_axes = tuple(a - rank if case % 3 == 0 else a for a in axes)  # negative axes in the functional path
    keepdims = case % 4 != 3
    use_descriptor = _is_dml(dtype, float64=False) and case % 3 == 1
    for data_kind in KINDS:
      x = _data(rng, shape, dtype, data_kind)
      want = reference.ref_arg_reduce(x, axes, kind, direction).astype(index_dtype)
      msg = f"arg{kind} {dtype.name}{shape} axes={axes} {direction} {data_kind}"
      got = functional(_as_jax(x), given_axes, ties=ties(direction), keepdims=keepdims, index_dtype=index_dtype)
      assert_bitwise_equal(got, want if keepdims else want.squeeze(axes), msg)
      if use_descriptor:
        desc_type = dml.ArgMinDesc if kind == "min" else dml.ArgMaxDesc
        desc = desc_type(
          desc_of(dtype, shape), desc_of(index_dtype, want.shape), axes, dml.AxisDirection[direction.upper()]
        )
        assert_bitwise_equal(dml.execute(desc, x), want, "execute " + msg)


def test_arg_min_max_all_axes_default():
  """``axis=None`` is every axis; the index is the row-major flat index over all of them.

  With ``keepdims=True`` the result has DirectML's layout (size 1 on every axis); by default (JAX's convention)
  it is a 0-d int32 array holding the same index.
  """
  rng = _rng("arg_all")
  x = _data(rng, (3, 4, 5), np.dtype(np.float32), "ties")
  for kind, functional in (("min", dml.argmin), ("max", dml.argmax)):
    for direction in DIRECTIONS:
      want = reference.ref_arg_reduce(x, (0, 1, 2), kind, direction)
      got = functional(x, ties=ties(direction), keepdims=True, index_dtype=np.uint32)
      assert_bitwise_equal(got, want.astype(np.uint32), f"{kind} {direction}")
      assert_bitwise_equal(
        functional(x, ties=ties(direction)), want.reshape(()).astype(np.int32), f"{kind} {direction}"
      )


# --------------------------------------------------------------------------- #
# GATHER_ND
# --------------------------------------------------------------------------- #
def _indices(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, sizes: tuple[int, ...]) -> np.ndarray:
  """Index tuples mixing in-range, negative, out-of-range and extreme values (last dim = tuple)."""
  info = np.iinfo(dtype)
  columns = []
  for j, size in enumerate(sizes):
    col_shape = shape[:-1]
    n = math.prod(col_shape)
    choice = rng.integers(6, size=n)
    in_range = rng.integers(0, size, size=n)
    negative = -rng.integers(1, size + 1, size=n)
    beyond = size + rng.integers(0, 5, size=n)
    far_negative = -size - 1 - rng.integers(0, 5, size=n)
    candidates = [in_range, in_range, negative, beyond, far_negative, None]
    col = np.empty(n, dtype=object)
    for i in range(n):
      c = choice[i]
      if candidates[c] is None:
        col[i] = (int(info.min), int(info.max))[(i + j) % 2]
      else:
        col[i] = int(candidates[c][i])
      if info.min == 0 and col[i] < 0:
        col[i] = int(info.max) - (i % 3)  # huge unsigned values
      col[i] = min(max(col[i], int(info.min)), int(info.max))
    columns.append(np.array(col.tolist(), dtype=dtype).reshape(col_shape))
  return np.stack(columns, axis=-1) if columns else np.zeros(shape, dtype)


def _gather_cases(
  rng: np.random.Generator, count: int, offset: int
) -> Iterator[tuple[tuple[int, ...], tuple[int, ...], int]]:
  """(x shape, indices shape, batch_dims) with ranks 1 to 8 (x) and 1 to 5 (indices)."""
  for case in range(count):
    x_rank = (case + offset) % 8 + 1
    batch = int(rng.integers(0, min(x_rank - 1, 3) + 1)) if x_rank > 1 else 0
    q = int(rng.integers(1, x_rank - batch + 1))
    lead_rank = int(rng.integers(0, 3))
    x_shape = _shape(rng, x_rank)
    lead = tuple(int(s) for s in rng.integers(1, 4, size=lead_rank))
    yield x_shape, x_shape[:batch] + lead + (q,), batch


def test_gather_nd(dtype):
  rng = _rng("gather", dtype.name)
  index_types = ALL_INTS if _wide() else SMALL_INTS
  for case, (x_shape, i_shape, batch) in enumerate(_gather_cases(rng, CASES_PER_TYPE, _offset(dtype))):
    index_dtype = index_types[case % len(index_types)]
    q = i_shape[-1]
    descriptor_ok = _is_dml(dtype) and index_dtype in DML_INDEX_TYPES
    for kind in ("random", "special"):
      x = _data(rng, x_shape, dtype, kind)
      indices = _indices(rng, i_shape, index_dtype, x_shape[batch : batch + q])
      want = reference.ref_gather_nd(x, indices, batch)
      msg = f"gather_nd {dtype.name}{x_shape} indices {index_dtype.name}{i_shape} batch={batch} {kind}"
      assert_bitwise_equal(dml.gather_nd(_as_jax(x), _as_jax(indices), batch_dims=batch), want, msg)
      if descriptor_ok:
        rank = max(len(x_shape), len(i_shape), want.ndim)
        if rank > 8:
          continue

        def pad(s: tuple[int, ...], rank: int = rank) -> tuple[int, ...]:
          return (1,) * (rank - len(s)) + s

        desc = dml.GatherND1Desc(
          desc_of(dtype, pad(x_shape)),
          desc_of(index_dtype, pad(i_shape)),
          desc_of(dtype, pad(want.shape)),
          input_dimension_count=len(x_shape),
          indices_dimension_count=len(i_shape),
          batch_dimension_count=batch,
        )
        got = dml.execute(desc, x.reshape(pad(x_shape)), indices.reshape(pad(i_shape)))
        assert_bitwise_equal(got, want.reshape(pad(want.shape)), "execute " + msg)
        if batch == 0:
          v0 = dml.GatherNDDesc(desc.input_tensor, desc.indices_tensor, desc.output_tensor, len(x_shape), len(i_shape))
          got = dml.execute(v0, x.reshape(pad(x_shape)), indices.reshape(pad(i_shape)))
          assert_bitwise_equal(got, want.reshape(pad(want.shape)), "GATHER_ND " + msg)


def test_gather_nd_huge_unsigned_and_extreme_signed_indices():
  """uint32/int32 extremes clamp (after one wrap of negatives); nothing is read out of bounds."""
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  u = np.array([[0, 4294967295], [4294967295, 0], [2, 3], [3, 4]], np.uint32)
  s = np.array([[-1, -4], [-2147483648, 2147483647], [-3, -5], [5, -1]], np.int32)
  for indices in (u, s):
    assert_bitwise_equal(dml.gather_nd(x, indices), reference.ref_gather_nd(x, indices, 0), str(indices.dtype))
  with x64():
    u64 = np.array([[2**64 - 1, 2**63], [2**63 - 1, 1]], np.uint64)
    i64 = np.array([[-(2**63), 2**63 - 1], [-3, -4]], np.int64)
    for indices in (u64, i64):
      assert_bitwise_equal(dml.gather_nd(x, indices), reference.ref_gather_nd(x, indices, 0), str(indices.dtype))


# --------------------------------------------------------------------------- #
# REDUCE
# --------------------------------------------------------------------------- #
FUNCTIONS = tuple(f.name.lower() for f in dml.ReduceFunction)
FLOAT_ONLY = ("average", "l2", "log_sum", "log_sum_exp")
ADDITIVE = ("sum", "average", "l1", "sum_square", "l2")

# Relative tolerance of float results, per dtype: float16/bfloat16 accumulate in
# float32 and round once, so library and reference may land one unit in the last
# place apart; float32 accumulates in float32 (the reference in float64).
_TOLERANCE = {
  np.dtype(np.float16): 2 * float(np.finfo(np.float16).eps),
  BFLOAT16: 2 * float(jnp.finfo(jnp.bfloat16).eps),
  np.dtype(np.float32): 1e-5,
  np.dtype(np.float64): 1e-12,
}

# Types the REDUCE seed table admits at feature level 5_0 (the default level), per function.
_SUM_LIKE = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.int64, np.int32, np.uint64, np.uint32))
_ORDERED = frozenset(d for d in (*SMALL_FLOATS, *ALL_INTS) if d != BFLOAT16)
_DML_REDUCE_TYPES = {
  **dict.fromkeys(("argmax", "argmin", "max", "min"), _ORDERED),
  **dict.fromkeys(FLOAT_ONLY, frozenset({np.dtype(np.float32), np.dtype(np.float16)})),
  **dict.fromkeys(("l1", "sum_square", "sum", "multiply"), _SUM_LIKE),
}


def _reduce_data(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, function: str, kind: str):
  """Data on which the reduction's result is well conditioned (subnormal results would be flushed)."""
  x = _data(rng, shape, dtype, kind)
  if not _is_float(dtype):
    return x
  v = x.astype(np.float64)
  if kind == "special":
    if function == "l2":
      # Where x² overflows, XLA computes a one-element L2 (axes=()) as |x| instead of inf;
      # the SPEC leaves intermediate overflow open, so keep x² finite here.
      v = np.where(np.isfinite(v), np.clip(v, -1e15, 1e15), v)
    return v.astype(dtype)
  if function == "multiply":
    v = np.sign(v + 0.5) * rng.uniform(0.9, 1.1, size=v.shape) if kind == "random" else v
  elif function == "log_sum":
    v = np.abs(v) + 0.25
  elif function in ("sum_square", "l2") and kind == "random":
    v = v / 4
  return v.astype(dtype)


def _scale(x: np.ndarray, axes: tuple[int, ...], function: str) -> np.ndarray:
  """The magnitude that bounds the rounding error of an additive reduction: Σ|x| (or Σx²) over the axes."""
  v = np.abs(x.astype(np.float64) if x.dtype == np.float64 else x.astype(np.float32).astype(np.float64))
  v = np.where(np.isfinite(v), v, 0)
  with np.errstate(over="ignore"):
    if function in ("sum_square", "l2"):
      v = v * v
    total = np.sum(v, axis=axes, keepdims=True) if axes else v
  if function == "average":
    total = total / max(1, math.prod(x.shape[a] for a in axes))
  if function == "l2":
    total = np.sqrt(total)
  return total


def _assert_reduce_close(got: Any, want: np.ndarray, x: np.ndarray, axes: tuple[int, ...], function: str, msg: str):
  got = np.asarray(got)
  assert got.dtype == want.dtype, f"{msg}: dtype {got.dtype} != {want.dtype}"
  assert got.shape == want.shape, f"{msg}: shape {got.shape} != {want.shape}"
  if not _is_float(want.dtype):
    np.testing.assert_array_equal(got, want, err_msg=msg, strict=True)
    return
  if function in ("max", "min"):  # a copy of an element: exact (either zero of a ±0 tie)
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64), err_msg=msg)
    return
  wide = want.dtype == np.float64
  g = got.astype(np.float64) if wide else got.astype(np.float32).astype(np.float64)
  w = want.astype(np.float64) if wide else want.astype(np.float32).astype(np.float64)
  # Non-finite results (NaN, ±inf) must agree exactly.
  np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{msg}: NaN positions")
  finite = np.isfinite(w)
  np.testing.assert_array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)], err_msg=f"{msg}: infinities")
  rtol = _TOLERANCE[np.dtype(want.dtype)]
  bound = rtol * np.abs(w)
  if function in ADDITIVE:
    bound = bound + rtol * np.broadcast_to(_scale(x, axes, function), w.shape)
  elif function in ("log_sum", "log_sum_exp"):
    bound = bound + rtol
  elif function == "multiply":
    bound = bound * 4
  with np.errstate(invalid="ignore", over="ignore"):
    err = np.abs(g - w)
  bad = finite & ~(err <= bound)
  assert not bad.any(), f"{msg}: {g[bad][:5]} vs {w[bad][:5]} (bound {bound[bad][:5]})"


def _ref_reduce(x: np.ndarray, function: str, axes: tuple[int, ...]) -> np.ndarray:
  with np.errstate(over="ignore"):  # the reference's final rounding to float16 may overflow to inf, as intended
    return reference.ref_reduce(x, function, axes)


def _reduce_cases(rng: np.random.Generator, dtype: np.dtype) -> Iterator[tuple[str, tuple[int, ...], tuple[int, ...]]]:
  functions = [f for f in FUNCTIONS if _is_float(dtype) or f not in FLOAT_ONLY]
  # The offset varies which function meets which rank and axes style from dtype to dtype.
  offset = _offset(dtype)
  for case, function in enumerate(functions + functions[1::2]):
    rank = (case * 3 + offset) % 8 + 1
    shape = _shape(rng, rank)
    style = (case + offset) % 4
    if style == 0:
      axes: tuple[int, ...] = ()
    elif style == 1:
      axes = (int(rng.integers(rank)),)
    elif style == 2:
      axes = tuple(range(rank))
    else:
      axes = _axes_subset(rng, rank)
    yield function, shape, axes


def test_reduce(dtype):
  rng = _rng("reduce", dtype.name)
  for case, (function, shape, axes) in enumerate(_reduce_cases(rng, dtype)):
    index_dtype = _index_dtypes()[case % len(_index_dtypes())]
    use_descriptor = _is_dml(dtype) and dtype in _DML_REDUCE_TYPES[function] and case % 2 == 0
    given_axes: Any = None if axes == tuple(range(len(shape))) and case % 3 == 0 else axes
    for kind in KINDS:
      x = _reduce_data(rng, shape, dtype, function, kind)
      want = _ref_reduce(x, function, axes)
      if function in ("argmax", "argmin"):
        want = want.astype(index_dtype)
      msg = f"reduce {function} {dtype.name}{shape} axes={axes} {kind}"
      # DirectML's types: integer results in the input's type (jnp's promotion: tests/test_jax_conventions.py).
      options = dict(keepdims=True, index_dtype=index_dtype, promote_integers=False)
      got = dml.reduce(_as_jax(x), function, given_axes, **options)
      _assert_reduce_close(got, want, x, axes, function, msg)
      if use_descriptor:
        desc = dml.ReduceDesc(
          dml.ReduceFunction[function.upper()], desc_of(dtype, shape), desc_of(want.dtype, want.shape), axes
        )
        _assert_reduce_close(dml.execute(desc, x), want, x, axes, function, "execute " + msg)


def test_reduce_keepdims_false_and_negative_axes():
  rng = _rng("reduce_keepdims")
  x = _data(rng, (2, 3, 4), np.dtype(np.float32), "random")
  for function in FUNCTIONS:
    data = np.abs(x) + 0.25 if function == "log_sum" else x
    want = _ref_reduce(data, function, (0, 2))
    if function in ("argmax", "argmin"):
      want = want.astype(np.int32)  # the functional path's default index type
    got = dml.reduce(data, function, (-1, 0), keepdims=False)
    assert got.shape == (3,), function
    _assert_reduce_close(np.asarray(got).reshape(want.shape), want, data, (0, 2), function, function)


def test_reduce_integer_wraps():
  """With DirectML's rule (promote_integers=False) integers accumulate in their own type and wrap."""
  x = np.array([[127, 1], [-128, -1], [100, 100]], np.int8)
  for function in ("sum", "multiply", "sum_square", "l1"):
    want = _ref_reduce(x, function, (1,))
    got = dml.reduce(x, function, 1, keepdims=True, promote_integers=False)
    np.testing.assert_array_equal(np.asarray(got), want, err_msg=function, strict=True)
  u = np.array([4294967295, 2], np.uint32)
  wrapped = dml.reduce(u, "sum", keepdims=True, promote_integers=False)
  np.testing.assert_array_equal(np.asarray(wrapped), np.array([1], np.uint32), strict=True)


# --------------------------------------------------------------------------- #
# ONE_HOT
# --------------------------------------------------------------------------- #
def _one_hot_indices(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, depth: int) -> np.ndarray:
  info = np.iinfo(dtype)
  n = math.prod(shape)
  pools = [
    rng.integers(0, depth, size=n),
    -rng.integers(1, depth + 1, size=n),
    depth + rng.integers(0, 4, size=n),
    -depth - 1 - rng.integers(0, 4, size=n),
  ]
  choice = rng.integers(5, size=n)
  out = []
  for i in range(n):
    value = int(pools[choice[i]][i]) if choice[i] < 4 else (int(info.min), int(info.max))[i % 2]
    if info.min == 0 and value < 0:
      value = int(info.max) - (i % 3)
    out.append(min(max(value, int(info.min)), int(info.max)))
  return np.array(out, dtype=dtype).reshape(shape)


def test_one_hot(dtype):
  rng = _rng("one_hot", dtype.name)
  index_types = ALL_INTS if _wide() else SMALL_INTS
  for case in range(CASES_PER_TYPE):
    rank = (case + _offset(dtype)) % 8 + 1
    axis = int(rng.integers(rank))
    depth = int(rng.integers(1, 7))
    shape = list(_shape(rng, rank))
    shape[axis] = 1
    index_dtype = index_types[case % len(index_types)]
    values_shape = ((2,), (3,), (1, 2), (2, 2))[case % 4]
    indices = _one_hot_indices(rng, tuple(shape), index_dtype, depth)
    msg = f"one_hot {dtype.name} indices {index_dtype.name}{tuple(shape)} axis={axis} depth={depth}"
    for kind in ("random", "special"):
      values = _data(rng, values_shape, dtype, kind)
      want = reference.ref_one_hot(indices, values, depth, axis)
      given_axis = axis - rank if case % 2 else axis
      got = one_hot_dml_layout(_as_jax(indices), _as_jax(values), depth, axis=given_axis)
      assert_bitwise_equal(got, want, msg)
      if _is_dml(dtype) and index_dtype in DML_INDEX_TYPES:
        dml_values = values.reshape((1,) * (rank - 1) + (values.size,))
        desc = dml.OneHotDesc(
          desc_of(index_dtype, tuple(shape)), desc_of(dtype, dml_values.shape), desc_of(dtype, want.shape), axis
        )
        assert_bitwise_equal(dml.execute(desc, indices, dml_values), want, "execute " + msg)


def test_one_hot_extreme_unsigned_and_small_signed_indices():
  """Huge unsigned indices are invalid (all OffValue); int8 indices next to a large depth are exact."""
  values = np.array([7, -3], np.int16)
  u = np.array([[4294967295], [4294967294], [2], [5]], np.uint32)
  assert_bitwise_equal(one_hot_dml_layout(u, values, 5, axis=1), reference.ref_one_hot(u, values, 5, 1), "uint32")
  s = np.array([[-128], [127], [-1], [0]], np.int8)
  assert_bitwise_equal(one_hot_dml_layout(s, values, 300, axis=1), reference.ref_one_hot(s, values, 300, 1), "int8")
  with x64():
    u64 = np.array([[2**64 - 1], [2**63], [3]], np.uint64)
    assert_bitwise_equal(one_hot_dml_layout(u64, values, 4, axis=1), reference.ref_one_hot(u64, values, 4, 1), "uint64")


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BFLOAT16], ids=_dtype_id)
def test_reduce_low_precision_accumulates_in_float32(dtype):
  """2048 + 1 + 1 + ... stalls in a float16 accumulator; accumulated in float32 and rounded once it does not."""
  x = np.ones(1024, dtype)
  x[0] = 2048
  for function in ("sum", "l1", "average"):
    want = _ref_reduce(x, function, (0,))
    got = dml.reduce(x, function, 0, keepdims=True)
    assert_bitwise_equal(got, want, function)
    assert float(np.asarray(got, np.float32)[0]) != (2048.0 if function != "average" else 2.0)


# --------------------------------------------------------------------------- #
# narrow JAX types (functional path only: DirectML has no such types)
# --------------------------------------------------------------------------- #
NARROW_INTS = tuple(np.dtype(getattr(jnp, name)) for name in ("int4", "uint4", "int2", "uint2"))
NARROW_FLOATS = tuple(np.dtype(getattr(jnp, name)) for name in ("float8_e4m3fn", "float8_e5m2"))


def _widened(x: np.ndarray) -> np.ndarray:
  """Narrow integers as int64/uint64 (value-preserving), which the NumPy reference understands."""
  return x.astype(np.int64) if int(jnp.iinfo(x.dtype).min) < 0 else x.astype(np.uint64)


@pytest.mark.parametrize("index_dtype", NARROW_INTS, ids=_dtype_id)
def test_narrow_integer_indices(index_dtype):
  """Every value of a 4-bit or 2-bit index type, against sizes below and above its range."""
  info = jnp.iinfo(index_dtype)
  every = np.arange(int(info.min), int(info.max) + 1).astype(index_dtype)
  for size in (3, 40):
    x = np.arange(size, dtype=np.float32)
    indices = every.reshape(-1, 1)
    want = reference.ref_gather_nd(x, _widened(indices), 0)
    assert_bitwise_equal(dml.gather_nd(x, indices), want, f"gather_nd size {size}")
    values = np.array([0.5, -1.5], np.float32)
    want = reference.ref_one_hot(_widened(indices), values, size, 1)
    assert_bitwise_equal(one_hot_dml_layout(indices, values, size, axis=1), want, f"one_hot depth {size}")


@pytest.mark.parametrize("dtype", NARROW_FLOATS + NARROW_INTS[:2], ids=_dtype_id)
def test_narrow_value_types(dtype):
  rng = _rng("narrow", dtype.name)
  pool = np.array([np.nan, 0.0, -0.0, 1.0, -2.0, 3.0, 0.5]) if dtype in NARROW_FLOATS else np.arange(-8, 8)
  if dtype.name.startswith("uint"):
    pool = np.arange(16)
  x = pool[rng.integers(len(pool), size=(4, 6))].astype(dtype)
  wide = x if dtype in NARROW_FLOATS else _widened(x)  # the reference reads float8 itself, narrow ints widened
  for direction in DIRECTIONS:
    want_values, want_indices = reference.ref_top_k(wide, 3, 1, direction)
    values, indices = dml.top_k(x, 3, axis=1, direction=direction, index_dtype=np.uint32)
    assert_bitwise_equal(values, want_values.astype(dtype), f"top_k {direction}")
    assert_bitwise_equal(indices, want_indices.astype(np.uint32), f"top_k {direction}")
    for kind, functional in (("min", dml.argmin), ("max", dml.argmax)):
      want = reference.ref_arg_reduce(wide, (1,), kind, direction).astype(np.uint32)
      got = functional(x, 1, ties=ties(direction), keepdims=True, index_dtype=np.uint32)
      assert_bitwise_equal(got, want, f"arg{kind} {direction}")
  for function in ("max", "min"):
    want = reference.ref_reduce(wide, function, (0,))
    got = np.asarray(dml.reduce(x, function, 0, keepdims=True))
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32), err_msg=function)
