"""The speed matrix's rows: every operator, type, axis and size, each against the native JAX call a user would write.

A row is one :class:`~benchmarks.harness.workload.Workload` (timed forward, and forward+backward where the output is
differentiable) with what the matrix's tables group it by. The rows:

* ``reduce``, each of its twelve functions, ``top_k`` (k=50), ``argmin``/``argmax``, ``gather_nd`` and ``one_hot`` on
  a large input (4 MiB: 1024 rows, as many columns as the type fits) of float32, bfloat16, float16 and int32, over
  the last axis, the first axis and all axes (gather_nd: rows, elements along the last axis with ``batch_dims=1``,
  and elements by full index tuples); int8 and float64 where a user would hold them (integer max/min and
  top-k, quantized embedding rows; float64 sums, maxima, log-sum-exp and top-k, under ``jax.enable_x64``);
* the small sizes where fixed costs show: a decoding step (8, 1000) (top_k k=40), MoE routing (256, 8) (top_k
  k=2) and per-example code under ``jax.vmap`` (64 rows of 100, top_k k=5), for every operator and REDUCE
  function;
* ``sampling``: ``dmljax.sampling.sample`` against the static-k recipe of :mod:`benchmarks.sampling.bench`, and
  ``top_p_mask`` against its sort recipe;
* JAX's input kinds the functional path takes as ``jnp`` does: int8 and bool sums (widened to int32, as
  ``jnp.sum``), an int32 mean (float32), bool MAX and argmax, complex SUM, MAX and LOG_SUM_EXP, rank-0 and size-0
  inputs, each against the ``jnp`` call it replaces;
* ``A/A`` controls: a native call timed against itself (a second, separately compiled copy), large and small, to
  show what the noise of the machine makes of two identical programs.

``--short`` sizes are tiny (a smoke run); :data:`SHORT` picks its few rows.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

import dmljax as dml
from benchmarks.harness.workload import FLOAT_TOP_K, Fn, Workload, integers, normal
from benchmarks.sampling import bench as sampling

DTYPES: dict[str, Any] = {
  "f32": np.float32,
  "bf16": ml_dtypes.bfloat16,
  "f16": np.float16,
  "int32": np.int32,
  "int8": np.int8,
  "f64": np.float64,
  "bool": np.bool_,
  "c64": np.complex64,
}
FLOATS = ("f32", "bf16", "f16")
LARGE_BYTES = 4 << 20
AXES: dict[str, int | None] = {"last": -1, "first": 0, "all": None}
REDUCE_FUNCTIONS = (
  "ARGMAX",
  "ARGMIN",
  "AVERAGE",
  "L1",
  "L2",
  "LOG_SUM",
  "LOG_SUM_EXP",
  "MAX",
  "MIN",
  "MULTIPLY",
  "SUM",
  "SUM_SQUARE",
)
FLOAT_ONLY = ("AVERAGE", "L2", "LOG_SUM", "LOG_SUM_EXP")
# The native call a user would write for each REDUCE function over ``axis`` (an int or None).
REDUCE_NATIVE: dict[str, tuple[str, Callable[[jax.Array, int | None], jax.Array]]] = {
  "ARGMAX": ("jnp.argmax", lambda x, a: jnp.argmax(x, axis=a)),
  "ARGMIN": ("jnp.argmin", lambda x, a: jnp.argmin(x, axis=a)),
  "AVERAGE": ("jnp.mean", lambda x, a: jnp.mean(x, axis=a)),
  "L1": ("jnp.sum(jnp.abs(x))", lambda x, a: jnp.sum(jnp.abs(x), axis=a)),
  "L2": ("jnp.linalg.norm", lambda x, a: jnp.linalg.norm(x, axis=a)),
  "LOG_SUM": ("jnp.log(jnp.sum(x))", lambda x, a: jnp.log(jnp.sum(x, axis=a))),
  "LOG_SUM_EXP": ("jax.nn.logsumexp", lambda x, a: jax.nn.logsumexp(x, axis=a)),
  "MAX": ("jnp.max", lambda x, a: jnp.max(x, axis=a)),
  "MIN": ("jnp.min", lambda x, a: jnp.min(x, axis=a)),
  "MULTIPLY": ("jnp.prod", lambda x, a: jnp.prod(x, axis=a)),
  "SUM": ("jnp.sum", lambda x, a: jnp.sum(x, axis=a)),
  "SUM_SQUARE": ("jnp.sum(jnp.square(x))", lambda x, a: jnp.sum(jnp.square(x), axis=a)),
}
# Small sizes: (label, shape, k of top_k); "per-row" rows are vmapped over the first axis.
SMALL = (("decode", (8, 1000), 40), ("MoE", (256, 8), 2), ("per-row", (64, 100), 5))
SAMPLING_T, SAMPLING_K, SAMPLING_P = 0.7, 50, 0.95
# The rows of ``--short``: one of each kind (patterns on the names of the tiny rows).
SHORT = (
  r"^A/A ",
  r"^reduce MAX f32 \S+ axis=-1$",
  r"^reduce SUM bf16 \S+ axis=0$",
  r"^reduce LOG_SUM_EXP f32 \S+ per-row",
  r"^top_k f32 \S+ k=2 \(MoE\)",
  r"^argmax int32 \S+ all axes$",
  r"^gather_nd f32 \S+ rows$",
  r"^one_hot bf16 .* axis=-1$",
  r"^reduce SUM int8 \S+ axis=-1 \(jnp's types\)$",
  r"^argmax f32 2x0 axis=0 \(size 0\)$",
  r"^sampling sample ",
)


@dataclasses.dataclass(frozen=True)
class Row:
  """One workload of the matrix and what its tables group it by (``axis``: last, first, all or per-row)."""

  workload: Workload
  operator: str
  function: str | None
  dtype: str
  axis: str
  size: str
  native: str
  x64: bool = False

  @property
  def name(self) -> str:
    return self.workload.name


def _shape_text(shape: tuple[int, ...]) -> str:
  return "x".join(map(str, shape))


def large_shape(dtype: str, short: bool) -> tuple[int, int]:
  """1024 rows of as many columns as 4 MiB holds (``--short``: 16 x 64)."""
  if short:
    return (16, 64)
  return (1024, LARGE_BYTES // (1024 * np.dtype(DTYPES[dtype]).itemsize))


def values(shape: tuple[int, ...], dtype: str, kind: str = "normal") -> Callable[[np.random.Generator], Any]:
  """Seeded inputs of ``dtype``: normal floats (``positive``: above 0.5; ``near_one``: products stay finite) or
  integers over their type's whole range."""
  np_dtype = np.dtype(DTYPES[dtype])
  if np_dtype.kind in "iu":
    if np_dtype == np.int32:
      return integers(shape)
    info = np.iinfo(np_dtype)
    return lambda rng: (rng.integers(info.min, info.max, shape, dtype=np_dtype, endpoint=True),)
  if kind == "normal":
    return normal(shape, np_dtype)

  def make(rng: np.random.Generator) -> tuple[np.ndarray]:
    z = rng.standard_normal(shape, dtype=np.float32)
    x = np.abs(z) + 0.5 if kind == "positive" else 1.0 + 0.002 * z
    return (np.asarray(x).astype(np_dtype),)

  return make


def _workload(name: str, make: Any, mine: Fn, native: str, form: Fn, *, grad: bool, **extra: Any) -> Workload:
  group = name.split(" ")[0]
  return Workload(name=name, group=group, make=make, dmljax=mine, jax={native: form}, grad=grad, **extra)


def _per_row(fn: Fn) -> Fn:
  return jax.vmap(fn)


def reduce_rows(short: bool) -> list[Row]:
  out = []
  for dtype in (*FLOATS, "int32", "int8", "f64"):
    shape = large_shape(dtype, short)
    functions: tuple[str, ...] = REDUCE_FUNCTIONS
    axes: tuple[str, ...] = tuple(AXES)
    if dtype == "int32":
      functions = tuple(f for f in REDUCE_FUNCTIONS if f not in FLOAT_ONLY)
    elif dtype == "int8":
      functions, axes = ("MAX", "MIN"), ("last",)
    elif dtype == "f64":
      functions, axes = ("SUM", "MAX", "LOG_SUM_EXP"), ("last",)
    for function in functions:
      native, form = REDUCE_NATIVE[function]
      kind = {"LOG_SUM": "positive", "MULTIPLY": "near_one"}.get(function, "normal")
      for axis in axes:
        a = AXES[axis]
        where = "all axes" if a is None else f"axis={a}"
        out.append(
          Row(
            _workload(
              f"reduce {function} {dtype} {_shape_text(shape)} {where}",
              values(shape, dtype, kind),
              lambda x, f=function, a=a: dml.reduce(x, f.lower(), a),
              native,
              lambda x, form=form, a=a: form(x, a),
              grad=dtype not in ("int32", "int8") and not function.startswith("ARG"),
            ),
            "reduce",
            function,
            dtype,
            axis,
            "large",
            native,
            x64=dtype == "f64",
          )
        )
  for label, shape, _ in SMALL:
    per_row = label == "per-row"
    for function in REDUCE_FUNCTIONS:
      native, form = REDUCE_NATIVE[function]
      kind = {"LOG_SUM": "positive", "MULTIPLY": "near_one"}.get(function, "normal")
      a = None if per_row else -1
      mine: Fn = lambda x, f=function, a=a: dml.reduce(x, f.lower(), a)  # noqa: E731
      theirs: Fn = lambda x, form=form, a=a: form(x, a)  # noqa: E731
      if per_row:
        mine, theirs = _per_row(mine), _per_row(theirs)
      name = f"reduce {function} f32 {_shape_text(shape)} " + ("per-row (vmap)" if per_row else f"axis=-1 ({label})")
      grad = not function.startswith("ARG")
      out.append(
        Row(
          _workload(name, values(shape, "f32", kind), mine, native, theirs, grad=grad),
          "reduce",
          function,
          "f32",
          "per-row" if per_row else "last",
          "small",
          native,
        )
      )
  return out


def top_k_rows(short: bool) -> list[Row]:
  out = []
  k = 5 if short else 50
  for dtype in (*FLOATS, "int32", "int8", "f64"):
    shape = large_shape(dtype, short)
    axes = ("last", "first") if dtype in (*FLOATS, "int32") else ("last",)
    for axis in axes:
      a = AXES[axis]
      assert a is not None
      floating = dtype not in ("int32", "int8")
      w = _workload(
        f"top_k {dtype} {_shape_text(shape)} k={k} axis={a}",
        values(shape, dtype),
        lambda x, a=a: dml.top_k(x, k, axis=a),
        "jax.lax.top_k",
        lambda x, a=a: lax.top_k(x, k, axis=a),
        grad=floating,
        value_output=0,
        approx_reasons={"jax.lax.top_k": FLOAT_TOP_K} if floating else {},
      )
      out.append(Row(w, "top_k", None, dtype, axis, "large", "jax.lax.top_k", x64=dtype == "f64"))
  for dtype in ("f32", "bf16"):
    for label, shape, small_k in SMALL:
      per_row = label == "per-row"
      mine: Fn = lambda x, k=small_k: dml.top_k(x, k)  # noqa: E731
      theirs: Fn = lambda x, k=small_k: lax.top_k(x, k)  # noqa: E731
      native = "jax.lax.top_k"
      if per_row:
        mine, theirs, native = _per_row(mine), _per_row(theirs), "vmap(jax.lax.top_k)"
      where = "per-row (vmap)" if per_row else f"({label})"
      w = _workload(
        f"top_k {dtype} {_shape_text(shape)} k={small_k} {where}",
        values(shape, dtype),
        mine,
        native,
        theirs,
        grad=True,
        value_output=0,
        approx_reasons={native: FLOAT_TOP_K},
      )
      out.append(Row(w, "top_k", None, dtype, "per-row" if per_row else "last", "small", native))
  return out


def arg_rows(short: bool) -> list[Row]:
  out = []
  for op, mine_fn, native_fn in (("argmax", dml.argmax, jnp.argmax), ("argmin", dml.argmin, jnp.argmin)):
    native = f"jnp.{op}"
    for dtype in (*FLOATS, "int32", "int8", "f64"):
      if dtype in ("int8", "f64") and op == "argmin":
        continue
      shape = large_shape(dtype, short)
      for axis in tuple(AXES) if dtype in (*FLOATS, "int32") else ("last",):
        a = AXES[axis]
        where = "all axes" if a is None else f"axis={a}"
        w = _workload(
          f"{op} {dtype} {_shape_text(shape)} {where}",
          values(shape, dtype),
          lambda x, a=a, f=mine_fn: f(x, a),
          native,
          lambda x, a=a, f=native_fn: f(x, axis=a),
          grad=False,
        )
        out.append(Row(w, op, None, dtype, axis, "large", native, x64=dtype == "f64"))
    for dtype in ("f32", "bf16") if op == "argmax" else ("f32",):
      for label, shape, _ in SMALL:
        per_row = label == "per-row"
        mine: Fn = lambda x, f=mine_fn: f(x, -1)  # noqa: E731
        theirs: Fn = lambda x, f=native_fn: f(x, axis=-1)  # noqa: E731
        form = native
        if per_row:
          mine, theirs, form = _per_row(mine), _per_row(theirs), f"vmap({native})"
        where = "per-row (vmap)" if per_row else f"axis=-1 ({label})"
        w = _workload(
          f"{op} {dtype} {_shape_text(shape)} {where}", values(shape, dtype), mine, form, theirs, grad=False
        )
        out.append(Row(w, op, None, dtype, "per-row" if per_row else "last", "small", form))
  return out


def _gather_inputs(shape: tuple[int, int], dtype: str, kind: str, count: int) -> Callable[[np.random.Generator], Any]:
  table = values(shape, dtype)

  def make(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    (x,) = table(rng)
    if kind == "rows":
      return x, rng.integers(0, shape[0], (count, 1), dtype=np.int32)
    if kind == "batch":
      return x, rng.integers(0, shape[1], (shape[0], count, 1), dtype=np.int32)
    rows = rng.integers(0, shape[0], (count, 1), dtype=np.int32)
    return x, np.concatenate([rows, rng.integers(0, shape[1], (count, 1), dtype=np.int32)], axis=1)

  return make


def _batch_index(x: jax.Array, i: jax.Array) -> jax.Array:
  return x[jnp.arange(x.shape[0])[:, None], i[..., 0]]


def gather_rows(short: bool) -> list[Row]:
  out = []
  # (kind, axis label, native form, its function, dmljax's batch_dims): rows of the first axis, elements along the
  # last axis per row (batch_dims=1), elements addressed by full index tuples.
  kinds: tuple[tuple[str, str, str, Fn, int], ...] = (
    ("rows", "first", "x[i]", lambda x, i: x[i[:, 0]], 0),
    ("batch", "last", "x[b, i]", _batch_index, 1),
    ("elements", "all", "x[i, j]", lambda x, i: x[i[:, 0], i[:, 1]], 0),
  )
  for dtype in (*FLOATS, "int32", "int8"):
    shape = large_shape(dtype, short)
    for kind, axis, native, form, batch_dims in kinds:
      count = {"rows": shape[0], "batch": shape[1], "elements": shape[0] * shape[1] // 4}[kind]
      label = {"rows": "rows", "batch": "along axis 1 (batch_dims=1)", "elements": "elements"}[kind]
      w = _workload(
        f"gather_nd {dtype} {_shape_text(shape)} {label}",
        _gather_inputs(shape, dtype, kind, count),
        lambda x, i, b=batch_dims: dml.gather_nd(x, i, batch_dims=b),
        native,
        form,
        grad=dtype in FLOATS,
      )
      out.append(Row(w, "gather_nd", None, dtype, axis, "large", native))
  # Small: a decoding step's embedding lookup, the MoE router's chosen probabilities, a few entries per row.
  small: tuple[tuple[str, tuple[int, int], str, int, str, Fn, Fn], ...] = (
    ("decode", (1000, 64), "rows", 8, "x[i]", lambda x, i: dml.gather_nd(x, i), lambda x, i: x[i[:, 0]]),
    ("MoE", (256, 8), "batch", 2, "x[b, i]", lambda x, i: dml.gather_nd(x, i, batch_dims=1), _batch_index),
    (
      "per-row",
      (64, 100),
      "batch",
      5,
      "vmap(r[i])",
      _per_row(lambda r, i: dml.gather_nd(r, i)),
      _per_row(lambda r, i: r[i[:, 0]]),
    ),
  )
  for label, shape, kind, count, native, mine, theirs in small:
    per_row = label == "per-row"
    where = "per-row (vmap)" if per_row else f"({label})"
    w = _workload(
      f"gather_nd f32 {_shape_text(shape)} {count} indices {where}",
      _gather_inputs(shape, "f32", kind, count),
      mine,
      native,
      theirs,
      grad=True,
    )
    out.append(Row(w, "gather_nd", None, "f32", "per-row" if per_row else kind, "small", native))
  return out


def one_hot_rows(short: bool) -> list[Row]:
  out = []
  for dtype in (*FLOATS, "int32"):
    count, depth = large_shape(dtype, short)

    def make(rng: np.random.Generator, count: int = count, depth: int = depth) -> tuple[np.ndarray]:
      return (rng.integers(0, depth, (count,), dtype=np.int32),)

    for axis in ("last", "first"):
      a = AXES[axis]
      np_dtype = DTYPES[dtype]
      w = _workload(
        f"one_hot {dtype} {count} indices depth={depth} axis={a}",
        make,
        lambda i, d=depth, a=a, t=np_dtype: dml.one_hot(i, d, axis=a, dtype=t),
        "jax.nn.one_hot",
        lambda i, d=depth, a=a, t=np_dtype: jax.nn.one_hot(i, d, axis=a, dtype=t),
        grad=False,
      )
      out.append(Row(w, "one_hot", None, dtype, axis, "large", "jax.nn.one_hot"))
  # Differentiable with respect to the on/off values: against jnp.where on a boolean one-hot.
  count, depth = large_shape("f32", short)

  def with_values(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return np.array([-0.5, 2.0], np.float32), rng.integers(0, depth, (count,), dtype=np.int32)

  w = _workload(
    f"one_hot f32 {count} indices depth={depth} on/off values",
    with_values,
    lambda v, i: dml.one_hot(i, depth, on_value=v[1], off_value=v[0]),
    "jnp.where(jax.nn.one_hot(bool), on, off)",
    lambda v, i: jnp.where(jax.nn.one_hot(i, depth, dtype=bool), v[1], v[0]),
    grad=True,
  )
  out.append(Row(w, "one_hot", "on/off values", "f32", "last", "large", "jnp.where(jax.nn.one_hot(bool), on, off)"))
  small = (("decode", (8,), 1000), ("MoE", (256, 2), 8), ("per-row", (64, 5), 100))
  for label, index_shape, depth in small:
    per_row = label == "per-row"

    def hot(rng: np.random.Generator, s: tuple[int, ...] = index_shape, d: int = depth) -> tuple[np.ndarray]:
      return (rng.integers(0, d, s, dtype=np.int32),)

    mine: Fn = lambda i, d=depth: dml.one_hot(i, d, dtype=np.float32)  # noqa: E731
    theirs: Fn = lambda i, d=depth: jax.nn.one_hot(i, d, dtype=np.float32)  # noqa: E731
    native = "jax.nn.one_hot"
    if per_row:
      mine, theirs, native = _per_row(mine), _per_row(theirs), "vmap(jax.nn.one_hot)"
    where = "per-row (vmap)" if per_row else f"({label})"
    w = _workload(
      f"one_hot f32 {_shape_text(index_shape)} indices depth={depth} {where}",
      hot,
      mine,
      native,
      theirs,
      grad=False,
    )
    out.append(Row(w, "one_hot", None, "f32", "per-row" if per_row else "last", "small", native))
  return out


def sampling_rows(short: bool) -> list[Row]:
  """``sample`` against :func:`benchmarks.sampling.bench.top_k_then_top_p`, ``top_p_mask`` against the sort recipe."""
  out = []
  shape = (2, 1000) if short else (8, 128256)

  def logits_and_key(shape: tuple[int, int]) -> Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]:
    def make(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
      x = (rng.standard_normal(shape, dtype=np.float32) * 3).astype(np.float32)
      return x, np.asarray(jax.random.key_data(jax.random.key(int(rng.integers(1 << 30)))))

    return make

  def dml_sample(x: jax.Array, key: jax.Array) -> jax.Array:
    k = jax.random.wrap_key_data(key)
    return dml.sampling.sample(k, x, temperature=SAMPLING_T, top_k=SAMPLING_K, top_p=SAMPLING_P)

  def recipe(x: jax.Array, key: jax.Array) -> jax.Array:
    k = jax.random.wrap_key_data(key)
    return sampling.top_k_then_top_p(k, x, SAMPLING_T, SAMPLING_K, SAMPLING_P, sampling.RECIPE_K)

  native = f"jax.lax.top_k(x / T, {sampling.RECIPE_K}) + sort top-p + categorical"
  w = _workload(
    f"sampling sample f32 {_shape_text(shape)} (T={SAMPLING_T}, top_k={SAMPLING_K}, top_p={SAMPLING_P})",
    logits_and_key(shape),
    dml_sample,
    native,
    recipe,
    grad=False,
  )
  out.append(Row(w, "sampling", "sample", "f32", "last", "large", native))
  for batch in (8, 64):
    mask_shape = (2, 1000) if short else (batch, 32000)
    if short and batch == 64:
      continue
    w = _workload(
      f"sampling top_p_mask f32 {_shape_text(mask_shape)} (p={SAMPLING_P})",
      values(mask_shape, "f32"),
      lambda x: dml.sampling.top_p_mask(x, SAMPLING_P),
      "sort recipe (argsort + cumsum + mask)",
      lambda x: sampling.sort_top_p_mask(x, SAMPLING_P),
      grad=False,
    )
    size = "large" if mask_shape[0] * mask_shape[1] * 4 >= LARGE_BYTES else "small"
    out.append(Row(w, "sampling", "top_p_mask", "f32", "last", size, "sort recipe (argsort + cumsum + mask)"))
  return out


# JAX's input kinds the functional path takes as jnp does (issue 35): small integers and bool summed in jnp's widened
# result type, integer means in float32, bool ordered False < True, complex sums, log-sum-exps and lexicographic
# maxima, rank-0 arrays, and arrays with a size-0 dimension, each against the jnp call it replaces.
def _kinds_input(shape: tuple[int, ...], kind: str) -> Callable[[np.random.Generator], tuple[np.ndarray]]:
  def make(rng: np.random.Generator) -> tuple[np.ndarray]:
    if kind == "bool":
      return (rng.integers(0, 2, shape).astype(bool),)
    if kind == "c64":
      z = rng.standard_normal((*shape, 2), dtype=np.float32)
      return ((z[..., 0] + 1j * z[..., 1]).astype(np.complex64),)
    if kind == "int8":
      return (rng.integers(-128, 128, shape, dtype=np.int8),)
    return (rng.integers(-1000, 1000, shape, dtype=np.int32),)

  return make


def jax_kinds_rows(short: bool) -> list[Row]:
  out = []
  # (operator, function, dtype, the dmljax call, the jnp form's name, the form): 4 MiB of the type, the last axis.
  large: tuple[tuple[str, str | None, str, Fn, str, Fn], ...] = (
    ("reduce", "SUM", "int8", lambda x: dml.reduce(x, "sum", -1), "jnp.sum", lambda x: jnp.sum(x, axis=-1)),
    ("reduce", "SUM", "bool", lambda x: dml.reduce(x, "sum", -1), "jnp.sum", lambda x: jnp.sum(x, axis=-1)),
    ("reduce", "AVERAGE", "int32", lambda x: dml.reduce(x, "mean", -1), "jnp.mean", lambda x: jnp.mean(x, axis=-1)),
    ("reduce", "MAX", "bool", lambda x: dml.reduce(x, "max", -1), "jnp.max", lambda x: jnp.max(x, axis=-1)),
    ("argmax", None, "bool", lambda x: dml.argmax(x, -1), "jnp.argmax", lambda x: jnp.argmax(x, axis=-1)),
    ("reduce", "SUM", "c64", lambda x: dml.reduce(x, "sum", -1), "jnp.sum", lambda x: jnp.sum(x, axis=-1)),
    ("reduce", "MAX", "c64", lambda x: dml.reduce(x, "max", -1), "jnp.max", lambda x: jnp.max(x, axis=-1)),
    (
      "reduce",
      "LOG_SUM_EXP",
      "c64",
      lambda x: dml.reduce(x, "logsumexp", -1),
      "jax.nn.logsumexp",
      lambda x: jax.nn.logsumexp(x, axis=-1),
    ),
  )
  for operator, function, dtype, mine, native, theirs in large:
    shape = large_shape(dtype, short)
    what = f"{operator} {function}" if function else operator
    name = f"{what} {dtype} {_shape_text(shape)} axis=-1 (jnp's types)"
    w = _workload(name, _kinds_input(shape, dtype), mine, native, theirs, grad=False)
    out.append(Row(w, operator, function, dtype, "last", "large", native))
  # Small: rank 0 (a Python number's reduction in a loop body) and size-0 dimensions (an empty batch).
  small: tuple[tuple[str, str | None, str, tuple[int, ...], str, Fn, str, Fn], ...] = (
    (
      "reduce",
      "LOG_SUM_EXP",
      "rank 0",
      (),
      "all axes",
      lambda x: dml.reduce(x, "logsumexp"),
      "jax.nn.logsumexp",
      jax.nn.logsumexp,
    ),
    ("argmax", None, "rank 0", (), "all axes", dml.argmax, "jnp.argmax", jnp.argmax),
    (
      "reduce",
      "SUM",
      "size 0",
      (0, 1024),
      "axis=0",
      lambda x: dml.reduce(x, "sum", 0),
      "jnp.sum",
      lambda x: jnp.sum(x, axis=0),
    ),
    (
      "argmax",
      None,
      "size 0",
      (2, 0),
      "axis=0",
      lambda x: dml.argmax(x, 0),
      "jnp.argmax",
      lambda x: jnp.argmax(x, axis=0),
    ),
    ("top_k", None, "size 0", (0, 8), "k=3", lambda x: dml.top_k(x, 3), "jax.lax.top_k", lambda x: lax.top_k(x, 3)),
  )
  for operator, function, label, shape, where, mine, native, theirs in small:
    what = f"{operator} {function}" if function else operator
    name = f"{what} f32 {_shape_text(shape) or 'scalar'} {where} ({label})"
    grad = operator in ("reduce", "top_k")  # the values' gradient (of no elements, for size 0: still a program)
    extra = {"value_output": 0} if operator == "top_k" else {}
    w = _workload(name, values(shape, "f32"), mine, native, theirs, grad=grad, **extra)
    out.append(Row(w, operator, function, "f32", "all" if not shape else "first", "small", native))
  return out


def control_rows(short: bool) -> list[Row]:
  """A/A: a native call in the dmljax slot too (its own function, compiled separately): the ratio is pure noise."""
  shape = large_shape("f32", short)
  (small_label, small_shape, small_k) = SMALL[0]

  def copy(fn: Fn) -> Fn:
    return lambda *a: fn(*a)

  def large(x: jax.Array) -> jax.Array:
    return jnp.sum(x, axis=-1)

  def small(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    return lax.top_k(x, small_k)

  return [
    Row(
      _workload(
        f"A/A jnp.sum f32 {_shape_text(shape)} axis=-1", values(shape, "f32"), copy(large), "jnp.sum", large, grad=True
      ),
      "A/A",
      "jnp.sum",
      "f32",
      "last",
      "large",
      "jnp.sum",
    ),
    Row(
      _workload(
        f"A/A jax.lax.top_k f32 {_shape_text(small_shape)} k={small_k} ({small_label})",
        values(small_shape, "f32"),
        copy(small),
        "jax.lax.top_k",
        small,
        grad=True,
        value_output=0,
      ),
      "A/A",
      "jax.lax.top_k",
      "f32",
      "last",
      "small",
      "jax.lax.top_k",
    ),
  ]


def all_rows(short: bool) -> list[Row]:
  rows = [
    *control_rows(short),
    *reduce_rows(short),
    *top_k_rows(short),
    *arg_rows(short),
    *gather_rows(short),
    *one_hot_rows(short),
    *jax_kinds_rows(short),
    *sampling_rows(short),
  ]
  if short:
    rows = [r for r in rows if any(re.search(p, r.name) for p in SHORT)]
  names = [r.name for r in rows]
  assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)
  return rows
