"""Hypothesis strategies for valid dmljax calls, and value comparisons against tests/reference.py.

Shared by test_properties.py (which checks valid calls against the reference) and
test_fuzz_invalid.py (which corrupts them). Not a test module itself.

Every strategy here draws a *case*: a dict with the functional arguments, the
descriptor that describes the same call (or ``None`` where the descriptor path
cannot express it: bfloat16, float64 TOP_K, ...), the input arrays and whether
the call needs ``jax_enable_x64``. Supported types are restated from SPEC §1 and
the seed tables, not read from the library.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import jax
import ml_dtypes
import numpy as np
from _helpers import ties
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dmljax as dml

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = np.dtype(ml_dtypes.bfloat16)
I8, I16, I32, I64 = (np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
U8, U16, U32, U64 = (np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))

FLOATS = (F16, BF16, F32, F64)
INTS = (I8, I16, I32, I64, U8, U16, U32, U64)
INDEX_TYPES = (I32, I64, U32, U64)

DML_TYPE = {
  F16: dml.DataType.FLOAT16,
  F32: dml.DataType.FLOAT32,
  F64: dml.DataType.FLOAT64,
  I8: dml.DataType.INT8,
  I16: dml.DataType.INT16,
  I32: dml.DataType.INT32,
  I64: dml.DataType.INT64,
  U8: dml.DataType.UINT8,
  U16: dml.DataType.UINT16,
  U32: dml.DataType.UINT32,
  U64: dml.DataType.UINT64,
}

# Seed tables at the newest feature level (5_0), restated.
ALL_NO_F64 = frozenset((F16, F32, *INTS))
SUM_LIKE = frozenset((F16, F32, I32, I64, U32, U64))
DESCRIPTOR_TYPES = {
  "TOP_K": ALL_NO_F64,
  "ARG": ALL_NO_F64,
  "GATHER": ALL_NO_F64 | {F64},
  "ONE_HOT": ALL_NO_F64 | {F64},
  "argmax": ALL_NO_F64,
  "argmin": ALL_NO_F64,
  "average": frozenset((F16, F32)),
  "l2": frozenset((F16, F32)),
  "log_sum": frozenset((F16, F32)),
  "log_sum_exp": frozenset((F16, F32)),
  "l1": SUM_LIKE,
  "sum_square": SUM_LIKE,
  "max": ALL_NO_F64,
  "min": ALL_NO_F64,
  "multiply": SUM_LIKE,
  "sum": SUM_LIKE,
}
FLOAT_ONLY = ("average", "l2", "log_sum", "log_sum_exp")
REDUCE_FUNCTIONS = (
  "argmax",
  "argmin",
  "average",
  "l1",
  "l2",
  "log_sum",
  "log_sum_exp",
  "max",
  "min",
  "multiply",
  "sum",
  "sum_square",
)

# A modest pool of shapes (every rank 1 to 8, at most 200 elements) that most
# draws come from, so jit compilations repeat; the rest are drawn freely.
SHAPE_POOL = (
  (1,),
  (5,),
  (7,),
  (3, 4),
  (1, 6),
  (4, 1),
  (2, 3, 4),
  (3, 1, 5),
  (1, 1, 3, 4),
  (2, 2, 3, 2),
  (2, 1, 3, 1, 2),
  (1, 2, 1, 3, 1, 2),
  (2, 1, 2, 1, 2, 1, 3),
  (1, 2, 1, 2, 1, 2, 1, 3),
  (2, 2, 2, 2, 2, 2, 1, 1),
)


def is_64bit(*dts: np.dtype) -> bool:
  return any(np.dtype(d).itemsize == 8 for d in dts)


@contextlib.contextmanager
def x64(enabled: bool) -> Iterator[None]:
  if enabled:
    with jax.enable_x64(True):
      yield
  else:
    yield


def free_shapes(min_rank: int = 1, max_rank: int = 8, max_size: int = 4) -> st.SearchStrategy[tuple[int, ...]]:
  return (
    st.lists(st.integers(1, max_size), min_size=min_rank, max_size=max_rank)
    .map(tuple)
    .filter(lambda s: math.prod(s) <= 200)
  )


def shapes(min_rank: int = 1, max_rank: int = 8) -> st.SearchStrategy[tuple[int, ...]]:
  pool = [s for s in SHAPE_POOL if min_rank <= len(s) <= max_rank]
  return st.one_of(st.sampled_from(pool), st.sampled_from(pool), free_shapes(min_rank, max_rank))


def float_specials(dtype: np.dtype) -> list[float]:
  info = ml_dtypes.finfo(dtype) if dtype == BF16 else np.finfo(dtype)
  tiny = float(info.smallest_subnormal)
  return [
    np.nan,
    np.inf,
    -np.inf,
    0.0,
    -0.0,
    tiny,
    -tiny,
    float(info.tiny) - tiny,
    float(info.tiny),
    float(info.max),
    -float(info.max),
    1.0,
    -1.0,
  ]


def int_specials(dtype: np.dtype) -> list[int]:
  info = np.iinfo(dtype)
  return sorted({int(info.min), int(info.min) + 1, 0, 1, int(info.max) - 1, int(info.max), -1 if info.min else 2})


def _array(draw: st.DrawFn, dtype: np.dtype, shape: tuple[int, ...], elements: st.SearchStrategy[Any]) -> np.ndarray:
  if dtype == BF16:
    return draw(hnp.arrays(F32, shape, elements=elements)).astype(BF16)
  return draw(hnp.arrays(dtype, shape, elements=elements))


@st.composite
def values(draw: st.DrawFn, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
  """Any values of ``dtype``: specials (NaN, ±inf, ±0, subnormals, extremes), heavy ties, or anything."""
  dtype = np.dtype(dtype)
  mode = draw(st.sampled_from(["mixed", "ties", "specials"]))
  if dtype.kind == "f" or dtype == BF16:
    specials = float_specials(dtype)
    width = 32 if dtype == BF16 else dtype.itemsize * 8
    anything = st.floats(width=width, allow_nan=True, allow_infinity=True)
    ties = st.sampled_from([-1.0, 0.0, -0.0, 2.0, np.nan])
  else:
    specials = int_specials(dtype)
    anything = st.integers(int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    ties = st.sampled_from([0, 1, 2, *specials[:1]])
  if mode == "ties":
    elements = ties
  elif mode == "specials":
    elements = st.sampled_from(specials)
  else:
    elements = st.one_of(st.sampled_from(specials), ties, anything)
  return _array(draw, dtype, shape, elements)


@st.composite
def tame_values(draw: st.DrawFn, dtype: np.dtype, shape: tuple[int, ...], function: str) -> np.ndarray:
  """Values for the arithmetic reductions: multiples of 1/4 in [-8, 8] (sums and squares of up to 200
  are exact in float32), powers of two near 1 for MULTIPLY, mixed with NaN, ±inf, ±0 and subnormals.
  Integers take any value: they wrap exactly."""
  dtype = np.dtype(dtype)
  if dtype.kind in "iu":
    return draw(values(dtype, shape))
  specials = float_specials(dtype)
  singular = [v for v in specials if not math.isfinite(v) or abs(v) < 1e-30]
  if function == "multiply":
    plain = st.sampled_from([1.0, 1.0, -1.0, 2.0, 0.5, -2.0, -0.5])
  else:
    plain = st.integers(-32, 32).map(lambda i: i / 4)
  use_singular = draw(st.booleans())
  elements = st.one_of(plain, plain, plain, st.sampled_from(singular)) if use_singular else plain
  return _array(draw, dtype, shape, elements)


@st.composite
def index_values(draw: st.DrawFn, dtype: np.dtype, shape: tuple[int, ...], size: int) -> np.ndarray:
  """Indices in and around ``[-size, size)``, and the index type's extremes."""
  info = np.iinfo(dtype)
  near = st.integers(max(-2 * size - 1, int(info.min)), min(2 * size + 1, int(info.max)))
  return draw(hnp.arrays(dtype, shape, elements=st.one_of(near, near, st.sampled_from(int_specials(dtype)))))


def axis_for_functional(draw: st.DrawFn, axis: int, rank: int) -> int:
  return axis - rank if draw(st.booleans()) else axis


def tensor(dtype: np.dtype, sizes: tuple[int, ...]) -> dml.TensorDesc:
  return dml.TensorDesc(DML_TYPE[np.dtype(dtype)], tuple(sizes))


def functional_x64(draw: st.DrawFn, *dts: np.dtype) -> bool:
  return is_64bit(*dts) or draw(st.booleans())


@st.composite
def top_k_cases(draw: st.DrawFn) -> dict[str, Any]:
  dtype = draw(st.sampled_from((*FLOATS, *INTS)))
  shape = draw(shapes())
  rank = len(shape)
  axis = draw(st.integers(0, rank - 1))
  k = draw(st.integers(1, shape[axis]))
  direction = draw(st.sampled_from(["increasing", "decreasing"]))
  index_dtype = draw(st.sampled_from(INDEX_TYPES))
  x = draw(values(dtype, shape))
  out_shape = (*shape[:axis], k, *shape[axis + 1 :])
  desc = None
  if dtype in DESCRIPTOR_TYPES["TOP_K"] and index_dtype in (U32, U64):
    outs = (tensor(dtype, shape), tensor(dtype, out_shape), tensor(index_dtype, out_shape))
    if direction == "decreasing" and draw(st.booleans()):
      desc = dml.TopKDesc(*outs, axis=axis, k=k)
    else:
      desc = dml.TopK1Desc(*outs, axis=axis, k=k, axis_direction=dml.AxisDirection[direction.upper()])
  return dict(
    op="top_k",
    x=x,
    k=k,
    axis=axis,
    functional_axis=axis_for_functional(draw, axis, rank),
    direction=direction,
    index_dtype=index_dtype,
    desc=desc,
    inputs=(x,),
    x64=functional_x64(draw, dtype, index_dtype),
  )


def _axes(draw: st.DrawFn, rank: int, *, allow_empty: bool) -> tuple[int, ...]:
  chosen = draw(st.lists(st.integers(0, rank - 1), min_size=0 if allow_empty else 1, max_size=rank, unique=True))
  return tuple(chosen)


@st.composite
def arg_reduce_cases(draw: st.DrawFn) -> dict[str, Any]:
  dtype = draw(st.sampled_from((*FLOATS, *INTS)))
  shape = draw(shapes())
  rank = len(shape)
  axes = _axes(draw, rank, allow_empty=False)
  kind = draw(st.sampled_from(["min", "max"]))
  direction = draw(st.sampled_from(["increasing", "decreasing"]))
  index_dtype = draw(st.sampled_from(INDEX_TYPES))
  x = draw(values(dtype, shape))
  out_shape = tuple(1 if d in axes else s for d, s in enumerate(shape))
  desc = None
  if dtype in DESCRIPTOR_TYPES["ARG"]:
    cls = dml.ArgMinDesc if kind == "min" else dml.ArgMaxDesc
    desc = cls(
      tensor(dtype, shape),
      tensor(index_dtype, out_shape),
      axes=axes,
      axis_direction=dml.AxisDirection[direction.upper()],
    )
  functional_axes = tuple(axis_for_functional(draw, a, rank) for a in axes)
  return dict(
    op="arg_reduce",
    x=x,
    axes=axes,
    functional_axes=functional_axes,
    kind=kind,
    direction=direction,
    index_dtype=index_dtype,
    desc=desc,
    inputs=(x,),
    x64=functional_x64(draw, dtype, index_dtype),
  )


@st.composite
def reduce_cases(draw: st.DrawFn) -> dict[str, Any]:
  function = draw(st.sampled_from(REDUCE_FUNCTIONS))
  dtype = draw(st.sampled_from(FLOATS if function in FLOAT_ONLY else (*FLOATS, *INTS)))
  shape = draw(shapes())
  rank = len(shape)
  axes = _axes(draw, rank, allow_empty=True)
  index_dtype = draw(st.sampled_from(INDEX_TYPES))
  ordering = function in ("argmax", "argmin", "max", "min")
  x = draw(values(dtype, shape) if ordering else tame_values(dtype, shape, function))
  out_shape = tuple(1 if d in axes else s for d, s in enumerate(shape))
  desc = None
  if dtype in DESCRIPTOR_TYPES[function]:
    out_dtype = index_dtype if function in ("argmax", "argmin") else dtype
    desc = dml.ReduceDesc(
      dml.ReduceFunction[function.upper()], tensor(dtype, shape), tensor(out_dtype, out_shape), axes=axes
    )
  functional_axes = tuple(axis_for_functional(draw, a, rank) for a in axes)
  return dict(
    op="reduce",
    x=x,
    function=function,
    axes=axes,
    functional_axes=functional_axes,
    index_dtype=index_dtype,
    desc=desc,
    inputs=(x,),
    x64=functional_x64(draw, dtype, index_dtype),
  )


@st.composite
def gather_nd_cases(draw: st.DrawFn) -> dict[str, Any]:
  dtype = draw(st.sampled_from((*FLOATS, *INTS)))
  index_dtype = draw(st.sampled_from((*INDEX_TYPES, I8, I16, U8, U16)))
  x_shape = draw(shapes())
  r = len(x_shape)
  b = draw(st.integers(0, r - 1))
  q = draw(st.integers(1, r - b))
  extra_rank = draw(st.integers(0, 7 - b))
  extra = draw(st.lists(st.integers(1, 3), min_size=extra_rank, max_size=extra_rank).map(tuple))
  indices_shape = (*x_shape[:b], *extra, q)
  out_shape = (*indices_shape[:-1], *x_shape[b + q :])
  x = draw(values(dtype, x_shape))
  indices = draw(index_values(np.dtype(index_dtype), indices_shape, max(x_shape[b : b + q])))
  desc = None
  common_rank = max(r, len(indices_shape), len(out_shape))
  if dtype in DESCRIPTOR_TYPES["GATHER"] and index_dtype in INDEX_TYPES and common_rank <= 8:
    rank = draw(st.integers(common_rank, 8))

    def pad(s: tuple[int, ...]) -> tuple[int, ...]:
      return (1,) * (rank - len(s)) + s

    tensors = (tensor(dtype, pad(x_shape)), tensor(index_dtype, pad(indices_shape)), tensor(dtype, pad(out_shape)))
    if b == 0 and draw(st.booleans()):
      desc = dml.GatherNDDesc(*tensors, input_dimension_count=r, indices_dimension_count=len(indices_shape))
    else:
      desc = dml.GatherND1Desc(
        *tensors, input_dimension_count=r, indices_dimension_count=len(indices_shape), batch_dimension_count=b
      )
    inputs = (x.reshape(pad(x_shape)), indices.reshape(pad(indices_shape)))
  else:
    inputs = (x, indices)
  return dict(
    op="gather_nd",
    x=x,
    indices=indices,
    batch_dims=b,
    deterministic=draw(st.booleans()),
    desc=desc,
    inputs=inputs,
    x64=functional_x64(draw, dtype, index_dtype),
  )


@st.composite
def one_hot_cases(draw: st.DrawFn) -> dict[str, Any]:
  index_dtype = draw(st.sampled_from((*INDEX_TYPES, I8, I16, U8, U16)))
  dtype = draw(st.sampled_from((*FLOATS, *INTS)))
  shape = draw(shapes())
  rank = len(shape)
  axis = draw(st.integers(0, rank - 1))
  depth = draw(st.integers(1, 12))
  indices_shape = (*shape[:axis], 1, *shape[axis + 1 :])
  out_shape = (*shape[:axis], depth, *shape[axis + 1 :])
  indices = draw(index_values(np.dtype(index_dtype), indices_shape, depth))
  values_shape = draw(st.sampled_from([(2,), (3,), (2, 2), (1, 2), (2, 1, 3)]))
  on_off = draw(values(dtype, values_shape))
  desc = None
  inputs: tuple[np.ndarray, ...] = (indices, on_off)
  if dtype in DESCRIPTOR_TYPES["ONE_HOT"] and index_dtype in INDEX_TYPES:
    desc_values = on_off.reshape((1,) * (rank - 1) + (-1,))
    desc = dml.OneHotDesc(
      tensor(index_dtype, indices_shape), tensor(dtype, desc_values.shape), tensor(dtype, out_shape), axis=axis
    )
    inputs = (indices, desc_values)
  flat = on_off.reshape(-1)
  return dict(
    op="one_hot",
    indices=indices,
    functional_indices=indices.squeeze(axis),  # jax.nn.one_hot's layout: the output's shape without `depth`
    values=on_off,
    on_value=flat[1:2].reshape(()),  # 0-d arrays: the output keeps the values' dtype
    off_value=flat[:1].reshape(()),
    depth=depth,
    axis=axis,
    functional_axis=axis_for_functional(draw, axis, rank),
    desc=desc,
    inputs=inputs,
    x64=functional_x64(draw, dtype, index_dtype),
  )


CASES: dict[str, Callable[[], st.SearchStrategy[dict[str, Any]]]] = {
  "top_k": top_k_cases,
  "arg_reduce": arg_reduce_cases,
  "reduce": reduce_cases,
  "gather_nd": gather_nd_cases,
  "one_hot": one_hot_cases,
}


# Twice the profile's examples, for the property tests (tests/test_properties*.py): the operators' results, not
# their errors, are the point there. Made when a test module imports this one, after conftest loads the profile.
TWICE = settings(max_examples=2 * settings.default.max_examples)


def both_paths(case: dict[str, Any]) -> list[Any]:
  """The functional result, and the descriptor-path result where the case has a descriptor."""
  results = [call_functional(case)]
  if case["desc"] is not None:
    results.append(dml.execute(case["desc"], *case["inputs"]))
  return results


def call_functional(case: dict[str, Any]) -> Any:
  """The functional-path call a case describes, giving DirectML's layout and rules (the reference's).

  argmin/argmax/reduce keep the reduced axes (``keepdims=True``); reduce keeps integer results in the input's
  type (``promote_integers=False``); one_hot takes the indices without the size-1 axis, inserts ``depth`` where
  DirectML's output has it and counts negative indices from the end (``negative_indices="from_end"``), so all
  compare with the reference as they are (JAX's defaults: tests/test_jax_conventions.py).
  """
  op = case["op"]
  if op == "top_k":
    return dml.top_k(
      case["x"], case["k"], axis=case["functional_axis"], direction=case["direction"], index_dtype=case["index_dtype"]
    )
  if op == "arg_reduce":
    f = dml.argmin if case["kind"] == "min" else dml.argmax
    options = {"ties": ties(case["direction"]), "keepdims": True, "index_dtype": case["index_dtype"]}
    return f(case["x"], case["functional_axes"], **options)
  if op == "reduce":
    options = {"keepdims": True, "index_dtype": case["index_dtype"], "promote_integers": False}
    return dml.reduce(case["x"], case["function"], case["functional_axes"], **options)
  if op == "gather_nd":
    return dml.gather_nd(
      case["x"], case["indices"], batch_dims=case["batch_dims"], deterministic=case.get("deterministic", False)
    )
  if op == "one_hot":
    return dml.one_hot(
      case["functional_indices"],
      case["depth"],
      axis=case["functional_axis"],
      on_value=case["on_value"],
      off_value=case["off_value"],
      negative_indices="from_end",
    )
  raise AssertionError(op)


# --------------------------------------------------------------------------- comparisons


def flush_subnormals(x: np.ndarray) -> np.ndarray:
  """Subnormal floats replaced by a zero of the same sign (SPEC §1 lets a device do that)."""
  x = np.asarray(x)
  if not (x.dtype.kind == "f" or x.dtype == BF16):
    return x
  info = ml_dtypes.finfo(x.dtype) if x.dtype == BF16 else np.finfo(x.dtype)
  wide = x.astype(np.float64)
  subnormal = (wide != 0) & (np.abs(wide) < float(info.tiny))
  return np.where(subnormal, np.copysign(0.0, wide), wide).astype(x.dtype)


def bits(x: np.ndarray) -> np.ndarray:
  x = np.asarray(x)
  return x.view(np.dtype(f"u{x.dtype.itemsize}")) if x.dtype.itemsize in (1, 2, 4, 8) else x


def assert_bitwise(got: Any, want: np.ndarray) -> None:
  """The same bits, except that a subnormal may come back as the zero of its sign (SPEC §1;
  XLA:CPU converts bfloat16 through float32 with subnormals flushed)."""
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype, (got.dtype, want.dtype)
  assert got.shape == want.shape, (got.shape, want.shape)
  same = bits(got) == bits(want)
  flushed = bits(got) == bits(flush_subnormals(want))
  np.testing.assert_array_equal(np.where(same | flushed, bits(want), bits(got)), bits(want))


def assert_indices(got: Any, want: np.ndarray, dtype: np.dtype) -> None:
  got = np.asarray(got)
  assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
  assert got.shape == want.shape, (got.shape, want.shape)
  np.testing.assert_array_equal(got.astype(np.int64), want)


def assert_close(got: Any, want: np.ndarray, *, rtol: float, atol: float) -> None:
  """Equal NaN positions, equal infinities, finite values within ``atol + rtol * |want|``; subnormals
  count as zero on both sides."""
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
  g = flush_subnormals(got).astype(np.float64)
  w = flush_subnormals(want).astype(np.float64)
  np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
  finite = np.isfinite(w)
  np.testing.assert_array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)])
  assert np.all(np.isfinite(g[finite])), (g, w)
  np.testing.assert_array_less(np.abs(g[finite] - w[finite]), atol + rtol * np.abs(w[finite]) + 1e-300)


def against_either(x: np.ndarray, check: Callable[[np.ndarray], None]) -> None:
  """``check(x)`` or ``check(flush_subnormals(x))`` holds: no result may depend on telling a
  subnormal from zero, and devices differ in which they do (float16 widens to float32, where its
  subnormals are normal; XLA:CPU treats float32 subnormals as zero)."""
  try:
    check(x)
  except AssertionError:
    check(flush_subnormals(x))
