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
from reference import ref_extreme, ref_top_k

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
