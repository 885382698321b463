"""The compiled CPU top-k kernel (csrc/cpu_top_k.cc, strategies/cpu_kernel.py).

Where the package was built without a C++ compiler the kernel tests skip, unless
``DMLJAX_REQUIRE_CPU_KERNEL=1`` (CI, where the build has a compiler) makes a missing kernel a failure.
The kernel's order is checked against the library's order key (rank_keys.ascending_key) on every bit
pattern of the 8- and 16-bit types and on special and random patterns of the 32- and 64-bit ones; its
selections against ``ref_top_k`` on every type it handles, both directions, ``k`` from 1 to the row
length, on rows long enough to be split into chunks over threads and short enough to run inline; under
vmap, grad and inside a sharded program; and ``jax.export``, which keeps the XLA selection.
The transformation matrix (tests/test_matrix.py) has the kernel's rows too.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_bitwise_equal, bits, x64
from reference import ref_arg_reduce, ref_extreme, ref_top_k

import dmljax as dml
from dmljax._src import cpu_kernel_library, platform, rank_keys
from dmljax._src.strategies import cpu_kernel, dispatch
from dmljax._src.strategies.case import Case

REQUIRED = os.environ.get("DMLJAX_REQUIRE_CPU_KERNEL") == "1"
needs_kernel = pytest.mark.skipif(
  not cpu_kernel_library.available() and not REQUIRED, reason=cpu_kernel_library.status()
)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
NARROW = tuple(np.dtype(t) for t in (np.float32, np.float16, BFLOAT16, np.int8, np.int16, np.int32))
NARROW += tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32))
WIDE = tuple(np.dtype(t) for t in (np.float64, np.int64, np.uint64))
DIRECTIONS = ("decreasing", "increasing")


def test_kernel_is_available_where_required() -> None:
  """CI builds the kernel: there a missing one fails instead of skipping every test below."""
  if REQUIRED:
    assert cpu_kernel_library.available(), cpu_kernel_library.status()
  assert dml.cpu_kernel_available() == cpu_kernel_library.available()


def _kernel_top_k(x: Any, k: int, direction: str) -> tuple[jax.Array, jax.Array]:
  """``dml.top_k`` on the last axis with the kernel forced (its program holds the FFI call)."""
  with platform.choosing(top_k=cpu_kernel.NAME):
    fn = jax.jit(lambda x: dml.top_k(x, k, direction=direction, index_dtype=jnp.int32))
    assert cpu_kernel_library.TARGET in fn.lower(x).as_text()
    return fn(x)


def _unsigned(dtype: np.dtype) -> np.dtype:
  return np.dtype(f"uint{dtype.itemsize * 8}")


def _specials(dtype: np.dtype) -> np.ndarray:
  """NaNs (payloads, both signs, signalling), infinities, signed zeros, subnormals, extremes; integer extremes."""
  if not jnp.issubdtype(dtype, jnp.floating):
    info = np.iinfo(dtype)
    values = [info.min, info.min + 1, info.min // 2, 0, 1, info.max // 2 + 1, info.max - 1, info.max]
    return np.array(values, np.int64 if info.max < 2**63 else np.uint64).astype(dtype)
  info = ml_dtypes.finfo(dtype)
  width = dtype.itemsize * 8
  quiet = int(np.array(np.nan, dtype).view(_unsigned(dtype)))
  sign = 1 << (width - 1)
  exponent = int(np.array(np.inf, dtype).view(_unsigned(dtype)))
  subnormal = int(np.array(info.smallest_subnormal, dtype).view(_unsigned(dtype)))
  patterns = [quiet, quiet | 1, quiet | 3 | sign, exponent | 1, exponent | 1 | sign, subnormal, subnormal | sign]
  values = np.array([np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, info.max, -info.max], np.float64).astype(dtype)
  return np.concatenate([values, np.array(patterns, _unsigned(dtype)).view(dtype)])


def _patterns(dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
  """Every bit pattern of an 8- or 16-bit type; specials and 20000 random patterns of wider ones (shuffled)."""
  unsigned = _unsigned(dtype)
  if dtype.itemsize <= 2:
    every = np.arange(1 << (8 * dtype.itemsize), dtype=np.int64).astype(unsigned).view(dtype)
    return rng.permutation(every)
  random = rng.integers(0, np.iinfo(unsigned).max, 20000, dtype=unsigned, endpoint=True).view(dtype)
  specials = _specials(dtype)
  return rng.permutation(np.concatenate([random, specials, specials]))


def _key_order(x: np.ndarray, direction: str) -> np.ndarray:
  """The order rank_keys.ascending_key gives (the library's one order key), ties by the lower index."""
  key = np.asarray(jax.jit(rank_keys.ascending_key)(x)).astype(np.int64)
  first = ~key if direction == "decreasing" else key  # ~ reverses a two's-complement order exactly
  return np.lexsort((np.arange(x.size), first))


def _check_order(dtype: np.dtype, direction: str, seed: int) -> None:
  x = _patterns(dtype, np.random.default_rng(seed))
  values, indices = _kernel_top_k(x[None], x.size, direction)
  order = _key_order(x, direction)
  assert_bitwise_equal(np.asarray(indices)[0], order.astype(np.int32), f"{dtype} {direction} order")
  assert_bitwise_equal(np.asarray(values)[0], x[order], f"{dtype} {direction} values")


@needs_kernel
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_order_is_the_rank_key_order(dtype: np.dtype, direction: str) -> None:
  _check_order(dtype, direction, 1 + NARROW.index(dtype))


@needs_kernel
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("dtype", WIDE, ids=str)
def test_order_is_the_rank_key_order_of_64_bit_types(dtype: np.dtype, direction: str) -> None:
  with x64():
    _check_order(dtype, direction, 20 + WIDE.index(dtype))


def _sample(dtype: np.dtype, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
  """Random bit patterns with special values; every other row of heavy ties (a few distinct values)."""
  unsigned = _unsigned(dtype)
  x = rng.integers(0, np.iinfo(unsigned).max, shape, dtype=unsigned, endpoint=True).view(dtype)
  specials = _specials(dtype)
  x[:, rng.integers(0, shape[1], 2 * specials.size)] = np.resize(specials, 2 * specials.size)
  pool = np.concatenate([specials, x[0, :3]])
  x[::2] = rng.choice(pool, (x[::2].shape[0], shape[1]))
  return x


def _reference(x: np.ndarray, k: int, direction: str) -> tuple[np.ndarray, np.ndarray]:
  with np.errstate(invalid="ignore"):  # NumPy warns when it widens a signalling NaN
    values, indices = ref_top_k(x, k, 1, direction)
  return values, indices.astype(np.int32)


# Shapes and ks: short rows that run inline, many rows over the threads, long rows cut into chunks merged exactly
# (k up to the row length, and past the sorted insertion's limit of 32).
_SHAPES = {(5, 37): (1, 3, 37), (300, 600): (1, 40, 600), (3, 50000): (3, 40)}


def _check_selection(dtype: np.dtype, direction: str, seed: int) -> None:
  rng = np.random.default_rng(seed)
  for shape, ks in _SHAPES.items():
    x = _sample(dtype, shape, rng)
    for k in ks:
      values, indices = _kernel_top_k(x, k, direction)
      want_values, want_indices = _reference(x, k, direction)
      assert_bitwise_equal(indices, want_indices, f"{dtype} {shape} k={k} {direction} indices")
      assert_bitwise_equal(values, want_values, f"{dtype} {shape} k={k} {direction} values")


@pytest.mark.sample(0)  # every value of each parameter once by default; the whole product with -m long
@needs_kernel
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("dtype", NARROW, ids=str)
def test_selection_matches_the_reference(dtype: np.dtype, direction: str) -> None:
  _check_selection(dtype, direction, 40 + NARROW.index(dtype))


@needs_kernel
@pytest.mark.parametrize("dtype", WIDE, ids=str)
def test_selection_of_64_bit_types_matches_the_reference(dtype: np.dtype) -> None:
  with x64():
    for direction in DIRECTIONS:
      _check_selection(dtype, direction, 60 + WIDE.index(dtype))


@needs_kernel
def test_ascending_and_descending_rows_and_every_k() -> None:
  """Rows whose largest elements come last (the threshold rises at every element) or first, every k."""
  x = np.stack([np.arange(3000, dtype=np.int32), np.arange(3000, dtype=np.int32)[::-1], np.zeros(3000, np.int32)])
  for k in (1, 31, 32, 33, 64, 65, 1000, 3000):
    for direction in DIRECTIONS:
      values, indices = _kernel_top_k(x, k, direction)
      want_values, want_indices = _reference(x, k, direction)
      assert_bitwise_equal(indices, want_indices, f"k={k} {direction}")
      assert_bitwise_equal(values, want_values, f"k={k} {direction}")


@needs_kernel
def test_table_picks_the_kernel_for_the_types_it_handles() -> None:
  for dtype in NARROW + WIDE:
    assert dispatch.strategy("cpu", Case(dtype, (16, 4096), 3, True)).name == cpu_kernel.NAME
    # Small inputs keep the XLA rows, cheaper than a call to the kernel.
    assert dispatch.strategy("cpu", Case(dtype, (4, 100), 3, True)).name != cpu_kernel.NAME
  for dtype in (ml_dtypes.float8_e4m3fn, ml_dtypes.int4, ml_dtypes.float4_e2m1fn):
    assert dispatch.strategy("cpu", Case(np.dtype(dtype), (16, 4096), 3, True)).name != cpu_kernel.NAME
  with platform.choosing(cpu_kernel=False):
    assert dispatch.strategy("cpu", Case(np.dtype(np.float32), (16, 4096), 3, True)).name != cpu_kernel.NAME


@needs_kernel
def test_vmap_grad_and_jvp_through_the_kernel() -> None:
  rng = np.random.default_rng(7)
  x = jnp.asarray(rng.permutation(2 * 3 * 500).reshape(2, 3, 500).astype(np.float32))
  with platform.choosing(top_k=cpu_kernel.NAME):
    mapped = jax.jit(jax.vmap(lambda r: dml.top_k(r, 4, index_dtype=jnp.int32)))(x)
    direct = jax.jit(lambda r: dml.top_k(r, 4, index_dtype=jnp.int32))(x)
    grad = jax.jit(jax.grad(lambda y: jnp.sum(dml.top_k(y, 2)[0] * 3.0)))(x)
    _, tangent = jax.jvp(lambda y: dml.top_k(y, 4)[0], (x,), (x * 2.0,))
  for got, want in zip(mapped, direct, strict=True):
    assert_bitwise_equal(got, want, "vmap")
  want_grad = np.zeros(x.shape, np.float32)
  np.put_along_axis(want_grad, np.asarray(direct[1])[..., :2], 3.0, axis=-1)
  assert_bitwise_equal(grad, want_grad, "grad")
  assert_bitwise_equal(tangent, np.asarray(direct[0]) * 2.0, "jvp")


@needs_kernel
@pytest.mark.parametrize("explicit", [False, True])
def test_each_device_runs_the_kernel_on_its_shard(explicit: bool) -> None:
  axis_type = jax.sharding.AxisType.Explicit if explicit else jax.sharding.AxisType.Auto
  mesh = jax.make_mesh((4,), ("d",), axis_types=(axis_type,), devices=jax.devices()[:4])
  x = np.random.default_rng(8).integers(-5, 5, (8, 8192)).astype(np.float32)  # 64 KiB a device: the kernel
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(None, "d"))
  fn = jax.jit(lambda x: dml.top_k(x, 7, index_dtype=jnp.int32))
  compiled = (fn if explicit else jax.jit(fn, in_shardings=sharding)).lower(jax.device_put(x, sharding)).compile()
  assert cpu_kernel_library.TARGET in compiled.as_text()
  values, indices = compiled(jax.device_put(x, sharding))
  want_values, want_indices = _reference(x, 7, "decreasing")
  assert_bitwise_equal(indices, want_indices, "sharded indices")
  assert_bitwise_equal(values, want_values, "sharded values")


def test_export_holds_the_xla_selection() -> None:
  """An exported program has no FFI call (not a stable custom call) and gives the same bits."""
  x = np.random.default_rng(9).integers(-3, 4, (16, 700)).astype(np.float32)
  x[3, 5] = np.nan
  fn = jax.jit(lambda x: dml.top_k(x, 9, direction="increasing", index_dtype=jnp.int32))
  exported = jax.export.export(fn)(jax.ShapeDtypeStruct(x.shape, x.dtype))
  assert cpu_kernel_library.TARGET not in exported.mlir_module()
  restored = jax.export.deserialize(exported.serialize())
  for got, want in zip(restored.call(x), fn(x), strict=True):
    assert_bitwise_equal(got, want, "export")


def test_status_names_the_kernel() -> None:
  assert cpu_kernel_library.status().startswith("CPU top-k kernel: ")
  assert dml.cpu_kernel_status() == cpu_kernel_library.status()
  in_use = "in use (loaded from " in dml.cpu_kernel_status()
  assert in_use == dml.cpu_kernel_available()
  assert bits(np.zeros(1, np.float32)).dtype == np.uint32


def test_the_build_record_says_why_the_kernel_was_not_built(tmp_path: pathlib.Path) -> None:
  """pip hides the build's output: the reason the build recorded in the package is what the status says."""
  record = {"built": False, "reason": "no working C++17 compiler (CompileError: ...)", "jaxlib": "0.10.2"}
  (tmp_path / cpu_kernel_library.BUILD_INFO).write_text(json.dumps(record))
  info = cpu_kernel_library.build_info(tmp_path / cpu_kernel_library.LIBRARY)
  assert info == record
  assert cpu_kernel_library._not_built(info) == (
    "not built when dmljax was installed: no working C++17 compiler (CompileError: ...)"
  )
  assert "python setup.py build_ext --inplace" in cpu_kernel_library._not_built(None)
  assert cpu_kernel_library.build_info(tmp_path / "elsewhere" / cpu_kernel_library.LIBRARY) is None


def test_a_library_built_against_a_newer_ffi_api_is_refused() -> None:
  """XLA runs handlers of older FFI API versions of its major version, not newer ones (jaxlib 0.8.3 and 0.9.0
  speak 0.2, 0.9.2 and 0.10.2 speak 0.3): a newer one would fail the whole CPU backend, so dmljax does not
  register it."""
  assert cpu_kernel_library.ffi_mismatch((0, 2), (0, 3)) is None
  assert cpu_kernel_library.ffi_mismatch((0, 3), (0, 3)) is None
  assert cpu_kernel_library.ffi_mismatch((0, 3), None) is None  # a jaxlib without headers: XLA checks it
  assert cpu_kernel_library.ffi_mismatch((0, 3), (0, 2)) == (
    "it was built against XLA FFI API 0.3, newer than this jaxlib's 0.2"
  )
  assert cpu_kernel_library.ffi_mismatch((1, 0), (0, 9)) is not None


@needs_kernel
def test_the_library_reports_the_ffi_api_it_was_built_against() -> None:
  library, _ = cpu_kernel_library.load()
  assert library is not None
  encoded = library.DmljaxCpuTopKFfiApiVersion()
  assert (
    cpu_kernel_library.ffi_mismatch((encoded // 1000, encoded % 1000), cpu_kernel_library.running_ffi_api()) is None
  )
  info = cpu_kernel_library.build_info(pathlib.Path(library._name))
  if info is not None:  # a library built by this version of setup.py
    assert info["built"] is True and info["ffi_api"] == f"{encoded // 1000}.{encoded % 1000}"


# REDUCE MAX/MIN (csrc/cpu_reduce_extreme.cc, reduce_extreme._by_kernel) -------------------------------------------

REDUCE_TYPES = tuple(np.dtype(t) for t in (np.float32, np.float16, np.int8, np.int16, np.int32, np.uint8, np.uint32))
REDUCE_TYPES += (BFLOAT16,)
# (shape, axes): rows inline and over threads, few long rows split into chunks, columns (the tiles of a leading
# axis), middle axes, every axis, short rows of a small input.
REDUCE_LAYOUTS = [
  ((6, 4096), (1,)),
  ((64, 8192), (1,)),
  ((2, 300000), (1,)),
  ((1000, 300), (0,)),
  ((3, 200, 1500), (1,)),
  ((4, 64, 65), (0, 1)),
  ((48, 1024), (0, 1)),
  ((256, 8), (1,)),
]


def _extreme_sample(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
  """Random bits with every class mixed in: NaNs of both signs, both zeros, infinities, subnormals."""
  unsigned = _unsigned(dtype)
  raw = rng.integers(0, np.iinfo(unsigned).max, size=shape, dtype=np.uint64, endpoint=True).astype(unsigned)
  x = raw.view(dtype)
  if dtype.kind == "f":
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan], np.float64).astype(dtype)
    mask = rng.random(shape) < 0.02
    x[mask] = rng.choice(specials, int(mask.sum()))
  return x


def _kernel_extreme(x: Any, kind: str, axes: tuple[int, ...]) -> jax.Array:
  fn = jax.jit(lambda v: dml.reduce(v, kind, axes, keepdims=True, promote_integers=False))
  assert cpu_kernel_library.REDUCE_EXTREME_TARGET in fn.lower(x).as_text()  # the kernel runs, not the composition
  return fn(x)


@needs_kernel
@pytest.mark.parametrize(("shape", "axes"), REDUCE_LAYOUTS, ids=str)
@pytest.mark.parametrize("dtype", REDUCE_TYPES, ids=str)
def test_reduce_kernel_matches_the_reference(dtype: np.dtype, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
  x = _extreme_sample(np.random.default_rng([dtype.num, *shape]), dtype, shape)
  for kind in ("max", "min"):
    assert_bitwise_equal(_kernel_extreme(x, kind, axes), ref_extreme(x, kind, axes), f"{dtype.name} {kind} {shape}")


@needs_kernel
@pytest.mark.parametrize("dtype", [np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.uint64)], ids=str)
def test_reduce_kernel_of_64_bit_types(dtype: np.dtype) -> None:
  with x64():
    for shape, axes in REDUCE_LAYOUTS[:4]:
      x = _extreme_sample(np.random.default_rng([dtype.num, *shape]), dtype, shape)
      for kind in ("max", "min"):
        assert_bitwise_equal(_kernel_extreme(x, kind, axes), ref_extreme(x, kind, axes), f"{kind} {shape}")


@needs_kernel
def test_reduce_kernel_under_vmap_grad_and_jvp() -> None:
  x = _extreme_sample(np.random.default_rng(5), np.dtype(np.float32), (3, 8, 512))
  want = ref_extreme(x, "max", (2,))[..., 0]
  vmapped = jax.jit(jax.vmap(lambda v: dml.reduce(v, "max", 1)))
  assert cpu_kernel_library.REDUCE_EXTREME_TARGET in vmapped.lower(x).as_text()
  assert_bitwise_equal(vmapped(x), want, "vmap")
  finite = np.random.default_rng(6).normal(size=(4, 512)).astype(np.float32)
  g = jax.jit(jax.grad(lambda v: dml.reduce(v, "max", 1).sum()))(finite)
  assert np.array_equal(np.asarray(g), (finite == finite.max(1, keepdims=True)).astype(np.float32))
  _, tangent = jax.jvp(lambda v: dml.reduce(v, "min", 1), (finite,), (np.ones_like(finite),))
  np.testing.assert_array_equal(np.asarray(tangent), np.ones(4, np.float32))


@needs_kernel
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BFLOAT16, np.dtype(np.float16)], ids=str)
@pytest.mark.parametrize(("shape", "axes"), [((6, 512), (1,)), ((512, 6), (0,)), ((3, 64, 5), (1,))], ids=str)
def test_reduce_kernel_gradient_shares_the_cotangent_among_ties(
  dtype: np.dtype, shape: tuple[int, ...], axes: tuple[int, ...]
) -> None:
  """The MAX/MIN gradient of a program whose value is the kernel's: rows of few distinct values (each row's
  extreme held many times, a different count in each row), both zeros tied, a row of one value; the cotangent
  (a random one, so that a share sent to the wrong element shows) goes to the tied extremes in equal parts,
  exactly: NumPy's count of the ties in the row, and the cotangent divided by it in float32, rounded once."""
  rng = np.random.default_rng([dtype.itemsize, *shape])
  x = rng.integers(-3, 4, shape).astype(np.float32)
  x[(0,) * len(shape)] = 0.0  # with -0.0: zeros tie
  x.reshape(-1)[1] = -0.0
  np.moveaxis(x, axes[0], -1)[-1, ...] = 2.0  # a block of one value: every element tied
  x = x.astype(dtype)
  cotangent = rng.normal(size=ref_extreme(x, "max", axes).shape).astype(dtype)
  for kind in ("max", "min"):
    program = jax.jit(lambda v, c, kind=kind: jax.vjp(lambda w: dml.reduce(w, kind, axes, keepdims=True), v)[1](c))
    assert cpu_kernel_library.REDUCE_EXTREME_TARGET in program.lower(x, cotangent).as_text()  # the kernel's value
    (got,) = program(x, cotangent)
    extreme = ref_extreme(x, kind, axes).astype(np.float32)
    hit = x.astype(np.float32) == extreme  # -0.0 == +0.0: both zeros share
    count = hit.sum(axes, keepdims=True).astype(np.float32)
    want = np.where(hit, cotangent.astype(np.float32) / count, np.float32(0)).astype(dtype)
    assert (count > 1).all(), count.ravel()  # every block's extreme is tied
    assert_bitwise_equal(got, want, f"{dtype} {kind} {shape} {axes}")


@needs_kernel
def test_reduce_kernel_stays_out_of_exports_programs_of_several_devices_and_a_choice_without_it() -> None:
  x = np.random.default_rng(7).normal(size=(8, 1024)).astype(np.float32)
  want = ref_extreme(x, "max", (1,))[:, 0]
  exported = jax.export.export(jax.jit(lambda v: dml.reduce(v, "max", 1)))(x)
  assert cpu_kernel_library.REDUCE_EXTREME_TARGET not in exported.mlir_module()
  assert_bitwise_equal(exported.call(x), want, "export")
  mesh = jax.make_mesh((len(jax.devices()),), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
  sharded = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d")))
  lowered = jax.jit(lambda v: dml.reduce(v, "max", 1)).lower(sharded)
  assert cpu_kernel_library.REDUCE_EXTREME_TARGET not in lowered.as_text()
  assert_bitwise_equal(lowered.compile()(sharded), want, "sharded")
  with platform.choosing(cpu_kernel=False):
    assert cpu_kernel_library.REDUCE_EXTREME_TARGET not in jax.jit(lambda v: dml.reduce(v, "min", 1)).lower(x).as_text()


# argmin/argmax (csrc/cpu_arg_extreme.cc, reduction_kernels.arg_extreme) ----------------------------------------

ARG_TYPES = tuple(np.dtype(t) for t in (np.float32, np.float16, np.int8, np.int16, np.int32, np.uint8, np.uint16))
ARG_TYPES += (np.dtype(np.uint32), BFLOAT16)
ARG_WIDE = (np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.uint64))
TIES = ("first", "last")
# (shape, axes): rows inline (short, and past the kernel's 1 KiB blocks) and over threads, few long rows cut into
# chunks (their answers combined), a leading axis (columns), middle axes, every axis, columns of few rows cut into
# chunks (one row group, a few columns), rows of two elements (the tail loop alone).
ARG_LAYOUTS = [
  ((6, 4096), (1,)),
  ((5, 37), (1,)),
  ((64, 8192), (1,)),
  ((4, 150000), (1,)),
  ((1000, 300), (0,)),
  ((3, 200, 1500), (1,)),
  ((4, 64, 65), (0, 1)),
  ((48, 1024), (0, 1)),
  ((1, 200000, 3), (1,)),
  ((3000, 2), (1,)),
]


def _rows3(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, int, int]:
  """(outer, n, inner): the layout the kernel reads, written here from the shape."""
  return (
    int(np.prod(shape[: axes[0]])),
    int(np.prod(shape[axes[0] : axes[-1] + 1])),
    int(np.prod(shape[axes[-1] + 1 :])),
  )


def _arg_sample(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
  """Random bits with every class mixed in (``_extreme_sample``), and three blocks in four of heavy ties: a pool of
  both zeros and 1 (MIN ties on the zeros), of both zeros and -1 (MAX ties on them), or of the specials (NaNs of
  several payloads and both signs, infinities, the extremes), so that first and last differ in almost every block."""
  x = _extreme_sample(rng, dtype, shape)
  outer, n, inner = _rows3(shape, axes)
  view = x.reshape(outer, n, inner)  # the same memory: blocks along the reduced axes
  specials = _specials(dtype)
  if dtype.kind == "f":
    low = np.array([0.0, -0.0, 1.0], np.float64).astype(dtype)
    high = np.array([0.0, -0.0, -1.0], np.float64).astype(dtype)
  else:
    low, high = specials[3:5], specials[2:4]  # two values, the smaller (larger) one tied
  for o in range(outer):
    for i in range(inner):
      pool = (None, low, high, specials)[(o * inner + i) % 4]
      if pool is not None:
        view[o, :, i] = rng.choice(pool, n)
  return x


def _kernel_arg(x: Any, find_max: bool, axes: tuple[int, ...], ties: str) -> jax.Array:
  op = dml.argmax if find_max else dml.argmin
  fn = jax.jit(lambda v: op(v, axes, ties=ties, keepdims=True, index_dtype=jnp.int32))
  assert cpu_kernel_library.ARG_EXTREME_TARGET in fn.lower(x).as_text()  # the kernel runs, not the composition
  return fn(x)


def _reference_arg(x: np.ndarray, find_max: bool, axes: tuple[int, ...], ties: str) -> np.ndarray:
  direction = "decreasing" if ties == "last" else "increasing"
  with np.errstate(invalid="ignore"):  # NumPy warns when it widens a signalling NaN
    return ref_arg_reduce(x, axes, "max" if find_max else "min", direction).astype(np.int32)


def _check_arg(x: np.ndarray, axes: tuple[int, ...], what: str) -> None:
  for find_max in (True, False):
    for ties in TIES:
      got = _kernel_arg(x, find_max, axes, ties)
      want = _reference_arg(x, find_max, axes, ties)
      assert_bitwise_equal(got, want, f"{what} {'argmax' if find_max else 'argmin'} ties={ties}")


@needs_kernel
@pytest.mark.parametrize(("shape", "axes"), ARG_LAYOUTS, ids=str)
@pytest.mark.parametrize("dtype", ARG_TYPES, ids=str)
def test_arg_kernel_matches_the_reference(dtype: np.dtype, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
  x = _arg_sample(np.random.default_rng([dtype.num, *shape]), dtype, shape, axes)
  _check_arg(x, axes, f"{dtype.name} {shape} {axes}")


@needs_kernel
@pytest.mark.parametrize("dtype", ARG_WIDE, ids=str)
def test_arg_kernel_of_64_bit_types(dtype: np.dtype) -> None:
  with x64():
    for shape, axes in ARG_LAYOUTS[:5] + ARG_LAYOUTS[-2:]:
      x = _arg_sample(np.random.default_rng([dtype.num, *shape]), dtype, shape, axes)
      _check_arg(x, axes, f"{dtype.name} {shape} {axes}")


def _pairs(dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
  """(pairs, 2): every bit pattern of an 8- or 16-bit type (specials and random ones of wider types) against each
  of a few probes (the specials and some random patterns), in both orders: argmax of a pair says how the order key
  ranks its two elements (first: the second is larger; last: it is larger or equal)."""
  every = _patterns(dtype, rng)
  probes = np.concatenate([_specials(dtype), every[:4]])
  first, second = np.repeat(every, probes.size), np.tile(probes, every.size)
  return np.stack([np.concatenate([first, second]), np.concatenate([second, first])], axis=1)


@needs_kernel
@pytest.mark.parametrize("dtype", ARG_TYPES + ARG_WIDE, ids=str)
def test_arg_kernel_ranks_every_pattern_as_the_order_key(dtype: np.dtype) -> None:
  """Every bit pattern of the 8- and 16-bit types (special and random ones of the wider types) compared with
  specials and random patterns in pairs, in rows (the kernel's row scan) and in columns (its column tiles), and
  read in rows of 4096 (its blocks)."""
  with x64() if dtype in ARG_WIDE else contextlib.nullcontext():
    rng = np.random.default_rng([30, dtype.num])
    pairs = _pairs(dtype, rng)
    _check_arg(pairs, (1,), f"{dtype.name} pairs in rows")
    _check_arg(np.ascontiguousarray(pairs.T), (0,), f"{dtype.name} pairs in columns")
    every = _patterns(dtype, rng)
    stream = np.concatenate([rng.permutation(every) for _ in range(max(1, 16384 // every.size))])  # 8-bit: repeats
    rows = stream[: stream.size // 4096 * 4096].reshape(-1, 4096)
    _check_arg(rows, (1,), f"{dtype.name} every pattern in rows of 4096")


@needs_kernel
def test_arg_kernel_on_ascending_descending_and_constant_rows() -> None:
  """Rows whose peak rises at every element (every block read again for its position) or sits first, and rows of
  one value (every element tied), in rows that run inline, over threads, and cut into chunks."""
  for n in (3000, 70000, 600000):
    ascending = np.arange(n, dtype=np.int32)
    for x in (np.stack([ascending, ascending[::-1], np.zeros(n, np.int32)]), ascending[None]):
      _check_arg(x, (1,), f"int32 n={n} rows {x.shape[0]}")
      _check_arg(x.astype(np.float32), (1,), f"float32 n={n} rows {x.shape[0]}")
      _check_arg(np.ascontiguousarray(x.T), (0,), f"int32 n={n} columns {x.shape[0]}")


@needs_kernel
def test_arg_kernel_runs_every_entry_point() -> None:
  """dml.argmax/argmin, REDUCE's ARGMAX/ARGMIN and the descriptor path run the one program, so the kernel too."""
  x = _arg_sample(np.random.default_rng(12), np.dtype(np.float32), (8, 512), (1,))
  desc = dml.ArgMaxDesc.from_inputs(dml.TensorDesc(dml.DataType.FLOAT32, x.shape), axes=(1,))
  calls = {
    "argmax": (lambda v: dml.argmax(v, 1, keepdims=True, index_dtype=jnp.uint32), True),
    "argmin": (lambda v: dml.argmin(v, 1, keepdims=True, index_dtype=jnp.uint32), False),
    "REDUCE ARGMAX": (lambda v: dml.reduce(v, "argmax", 1, keepdims=True, index_dtype=jnp.uint32), True),
    "REDUCE ARGMIN": (lambda v: dml.reduce(v, "argmin", 1, keepdims=True, index_dtype=jnp.uint32), False),
    "ARGMAX descriptor": (lambda v: dml.execute(desc, v), True),
  }
  for name, (call, find_max) in calls.items():
    fn = jax.jit(call)
    assert cpu_kernel_library.ARG_EXTREME_TARGET in fn.lower(x).as_text(), name
    assert_bitwise_equal(fn(x), _reference_arg(x, find_max, (1,), "first").astype(np.uint32), name)


@needs_kernel
def test_arg_kernel_under_vmap_grad_and_jvp() -> None:
  """A batch is more rows; the index has a zero (float0) tangent and passes a zero cotangent back, and a value picked
  by it gets the whole cotangent: each program holds the kernel."""
  rng = np.random.default_rng(13)
  x = _arg_sample(rng, np.dtype(np.float32), (3, 8, 512), (2,))
  vmapped = jax.jit(jax.vmap(lambda v: dml.argmin(v, 1, ties="last", index_dtype=jnp.int32)))
  assert cpu_kernel_library.ARG_EXTREME_TARGET in vmapped.lower(x).as_text()
  assert_bitwise_equal(vmapped(x), _reference_arg(x, False, (2,), "last")[..., 0], "vmap")
  columns = jax.jit(jax.vmap(lambda v: dml.argmax(v, 0, index_dtype=jnp.int32), in_axes=2, out_axes=1))
  assert cpu_kernel_library.ARG_EXTREME_TARGET in columns.lower(x).as_text()
  assert_bitwise_equal(columns(x), _reference_arg(x, True, (0,), "first")[0], "vmap over the last axis")

  finite = rng.normal(size=(4, 512)).astype(np.float32)
  as_float = jax.jit(jax.grad(lambda v: dml.argmax(v, 1).astype(jnp.float32).sum()))  # the index is dead code there
  assert_bitwise_equal(as_float(finite), np.zeros_like(finite), "zero cotangent")
  (back,) = jax.vjp(lambda v: dml.argmax(v, 1), finite)[1](np.zeros((4,), jax.dtypes.float0))
  assert_bitwise_equal(back, np.zeros_like(finite), "vjp of the index")
  _, tangent = jax.jvp(lambda v: dml.argmin(v, 1), (finite,), (np.ones_like(finite),))
  assert tangent.dtype == jax.dtypes.float0 and tangent.shape == (4,)

  def picked(v: jax.Array) -> jax.Array:
    return jnp.take_along_axis(v, dml.argmax(v, 1, keepdims=True), axis=1).sum()

  grad = jax.jit(jax.grad(picked))
  assert cpu_kernel_library.ARG_EXTREME_TARGET in grad.lower(finite).as_text()
  want = np.zeros_like(finite)
  np.put_along_axis(want, finite.argmax(1)[:, None], np.float32(1), axis=1)
  assert_bitwise_equal(grad(finite), want, "gradient through the picked value")


@needs_kernel
def test_arg_kernel_stays_out_of_exports_programs_of_several_devices_and_a_choice_without_it() -> None:
  """The composition runs there, with the same bits; axes apart keep it too (the variadic reduction)."""
  x = _arg_sample(np.random.default_rng(14), np.dtype(np.float32), (8, 1024), (1,))
  want = _reference_arg(x, True, (1,), "last")[:, 0]

  def call(v: jax.Array) -> jax.Array:
    return dml.argmax(v, 1, ties="last", index_dtype=jnp.int32)

  exported = jax.export.export(jax.jit(call))(x)
  assert f"@{cpu_kernel_library.ARG_EXTREME_TARGET}" not in exported.mlir_module()  # no custom call (its locations
  # still name the primitive)
  assert_bitwise_equal(jax.export.deserialize(exported.serialize()).call(x), want, "export")
  mesh = jax.make_mesh((len(jax.devices()),), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
  sharded = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d")))
  lowered = jax.jit(call).lower(sharded)
  assert cpu_kernel_library.ARG_EXTREME_TARGET not in lowered.as_text()
  assert_bitwise_equal(lowered.compile()(sharded), want, "sharded")
  with platform.choosing(cpu_kernel=False):
    program = jax.jit(lambda v: dml.argmin(v, 1, index_dtype=jnp.int32))
    assert cpu_kernel_library.ARG_EXTREME_TARGET not in program.lower(x).as_text()
    assert_bitwise_equal(program(x), _reference_arg(x, False, (1,), "first")[:, 0], "without the kernel")
  apart = _arg_sample(np.random.default_rng(15), np.dtype(np.float32), (6, 5, 7), (0,))
  program = jax.jit(lambda v: dml.argmin(v, (0, 2), keepdims=True, index_dtype=jnp.int32))
  assert cpu_kernel_library.ARG_EXTREME_TARGET not in program.lower(apart).as_text()
  assert_bitwise_equal(program(apart), _reference_arg(apart, False, (0, 2), "first"), "axes apart")
