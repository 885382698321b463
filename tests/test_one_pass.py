"""The one-pass Pallas top-k (strategies/one_pass.py), checked on CPU with the kernels in Pallas interpret mode.

No GPU runs here. The kernel's key is checked against the reference order on every bit pattern of the 8- and
16-bit types and on the special and random patterns of the 32-bit ones; the kernels (segments and merge, or one
segment a row) against ``ref_top_k`` for every type of up to 32 bits, both directions and ``k`` from 1 to 16, on
small blocks so that short rows cross several blocks and segments and end inside one; ``dml.top_k`` with the
CUDA branch forced, through jit, vmap, grad, x64 and ``jax.export`` (which holds no Pallas call); lowered for
CUDA, the Pallas call of the backend this jax compiles the kernels through (Mosaic GPU from jax 0.11, whose Triton
backend is deprecated, Triton before), with no deprecation warning. The compile for an H100 is in
tests/test_accelerator_structure.py; the transformations in tests/test_matrix.py.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _helpers import bits, x64
from jax import export
from reference import ref_top_k

import dmljax as dml
from dmljax._src import platform
from dmljax._src.strategies import dispatch, one_pass
from dmljax._src.strategies.case import Case

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = tuple(
  np.dtype(t) for t in (np.float32, np.float16, BFLOAT16, np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32)
)
DIRECTIONS = ("decreasing", "increasing")
# What a Pallas call of each backend lowers to (the StableHLO custom call's target).
PALLAS_CALLS = {"mosaic_gpu": "mosaic_gpu_v2", "triton": "__gpu$xla.gpu.triton"}


def _unsigned(dtype: np.dtype) -> np.dtype:
  return np.dtype(f"uint{dtype.itemsize * 8}")


def _specials(dtype: np.dtype) -> np.ndarray:
  """NaNs (payloads, both signs), infinities, signed zeros, subnormals, the extremes; integer extremes."""
  if not jnp.issubdtype(dtype, jnp.floating):
    info = np.iinfo(dtype)
    return np.array([info.min, info.min + 1, -1, 0, 1, info.max - 1, info.max], np.int64).clip(info.min).astype(dtype)
  info = ml_dtypes.finfo(dtype)
  unsigned = _unsigned(dtype)
  width = dtype.itemsize * 8
  quiet = int(np.array(np.nan, dtype).view(unsigned))
  sign = 1 << (width - 1)
  smallest_subnormal = int(np.array(info.smallest_subnormal, dtype).view(unsigned))
  patterns = [quiet, quiet | 1, quiet | 3 | sign, smallest_subnormal, smallest_subnormal | sign]
  patterns += [smallest_subnormal + 5, int(np.array(info.smallest_normal, dtype).view(unsigned)) - 1]
  values = np.array([np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, info.max, -info.max], np.float64).astype(dtype)
  return np.concatenate([values, np.array(patterns, unsigned).view(dtype)])


def _sample(dtype: np.dtype, shape: tuple[int, int], seed: int) -> np.ndarray:
  """Rows of random bit patterns mixed with special values and of heavy ties; of more rows, also one of a single
  value, and an ascending and a descending one.

  Ascending rows put every block's elements into the top k so far (each block merges); NaNs are made quiet
  (NumPy's reference warns on signalling ones).
  """
  rng = np.random.default_rng(seed)
  width = dtype.itemsize * 8
  unsigned = _unsigned(dtype)
  raw = rng.integers(0, 1 << width, shape, dtype=np.uint64).astype(unsigned)
  if jnp.issubdtype(dtype, jnp.floating):
    quiet = np.array(np.nan, dtype).view(unsigned)
    magnitude = raw & ~np.array(1 << (width - 1), unsigned)
    raw = np.where(magnitude > np.array(np.inf, dtype).view(unsigned), raw | quiet, raw)
  specials = _specials(dtype)
  mixed = np.where(rng.random(shape) < 0.3, rng.choice(specials, shape), raw.view(dtype))
  ties = rng.integers(-2, 3, shape).clip(0 if dtype.kind == "u" else -2).astype(dtype)
  out = np.where((np.arange(shape[0]) % 2 == 0)[:, None], mixed, ties)
  if shape[0] > 1:
    out[0] = specials[rng.integers(len(specials))]  # a row of one value: all ties
  if shape[0] > 3:
    ascending = ref_top_k(mixed[-1], shape[1], 0, "increasing")[0]
    out[1], out[-1] = ascending, ascending[::-1]
  return out


def _check(x: np.ndarray, k: int, direction: str, got: Any, what: str) -> None:
  values, indices = got
  want_values, want_indices = ref_top_k(x, k, -1, direction)
  np.testing.assert_array_equal(np.asarray(indices), want_indices, err_msg=what)
  assert np.asarray(values).dtype == x.dtype, what
  np.testing.assert_array_equal(bits(values), bits(want_values), err_msg=what)


# The key --------------------------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=1)
def _kernel_key(x: jax.Array, largest_first: bool) -> jax.Array:
  return one_pass.kernel_key(x, largest_first)


def _patterns(dtype: np.dtype) -> np.ndarray:
  """Every bit pattern of 8- and 16-bit types; the specials and 4096 random patterns of 32-bit ones."""
  unsigned = _unsigned(dtype)
  if dtype.itemsize <= 2:
    every = np.arange(1 << (dtype.itemsize * 8), dtype=np.uint64).astype(unsigned).view(dtype)
  else:
    every = np.random.default_rng(7).integers(0, 1 << 32, 4096, dtype=np.uint64).astype(unsigned).view(dtype)
  if jnp.issubdtype(dtype, jnp.floating):  # quiet NaNs only (the reference warns on signalling ones)
    quiet = np.array(np.nan, dtype).view(unsigned)
    magnitude = every.view(unsigned) & ~np.array(1 << (dtype.itemsize * 8 - 1), unsigned)
    nan = magnitude > np.array(np.inf, dtype).view(unsigned)
    every = np.where(nan, every.view(unsigned) | quiet, every.view(unsigned)).view(dtype)
  return np.concatenate([_specials(dtype), every])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kernel_key_orders_as_dmljax_orders(dtype: np.dtype) -> None:
  """In the reference's order (ties in index order), the key never rises, and it stays equal exactly on ties."""
  x = _patterns(dtype)
  for direction in DIRECTIONS:
    key = np.asarray(_kernel_key(x, direction == "decreasing")).astype(np.int64)
    assert key.dtype == np.int64
    _, order = ref_top_k(x, x.size, 0, direction)
    ranked, values = key[order], x[order]
    assert (np.diff(ranked) <= 0).all(), f"{dtype} {direction}: the key rises"
    tie = values[1:] == values[:-1]
    if jnp.issubdtype(dtype, jnp.floating):
      wide = values.astype(np.float32)
      tie = tie | (np.isnan(wide[1:]) & np.isnan(wide[:-1]))
    np.testing.assert_array_equal(ranked[1:] == ranked[:-1], tie, err_msg=f"{dtype} {direction}")


# The kernels ----------------------------------------------------------------------------------------------------

# (rows, row length, block): several segments, each several blocks, the last ending inside a block; one segment a
# row (one kernel writes the outputs); many segments of a few blocks.
LAYOUTS = ((5, 203, 16), (1, 61, 8), (3, 301, 8))


def _cases() -> list[tuple[np.dtype, tuple[int, int], tuple[int, int, int]]]:
  """Every type with a k for each direction drawn from 1..16 (1 and 16 among them), and one of the layouts."""
  rng = np.random.default_rng(20260517)
  cases = []
  for n, dtype in enumerate(DTYPES):
    ks = (1, 16) if n == 0 else (16, 1) if n == 1 else tuple(int(k) for k in rng.integers(1, 17, 2))
    cases.append((dtype, ks, LAYOUTS[n % len(LAYOUTS)]))
  return cases


def test_layouts_cover_what_the_cases_mean_to_cover() -> None:
  shapes = {(rows, n): one_pass.layout(rows, n, block) for rows, n, block in LAYOUTS}
  assert shapes[(5, 203)] == one_pass.Layout(16, 7, 2)
  assert shapes[(1, 61)] == one_pass.Layout(8, 8, 1)
  assert shapes[(3, 301)] == one_pass.Layout(8, 5, 8)
  assert {k for _, ks, _ in _cases() for k in ks} >= {1, 16}


@pytest.mark.parametrize(
  ("dtype", "ks", "layout"),
  [c if i % 2 == 0 else pytest.param(*c, marks=pytest.mark.long) for i, c in enumerate(_cases())],
  ids=[f"{d}-k{a}-k{b}" for d, (a, b), _ in _cases()],
)
def test_kernels_are_exact(dtype: np.dtype, ks: tuple[int, int], layout: tuple[int, int, int]) -> None:
  """Both directions of one type in one program (one compile), largest first with ``ks[0]``, smallest with ``ks[1]``,
  in the interpreter of the backend this jax compiles the kernels through: Mosaic GPU's own (its kernel launches,
  grid and memories simulated), Pallas interpret mode where the backend is Triton."""
  rows, n, block = layout
  x = _sample(dtype, (rows, n), seed=n * 31 + ks[0])

  def both(x: jax.Array) -> Any:
    pairs = zip(ks, DIRECTIONS, strict=True)
    return [one_pass.kernel_top_k(x, k, d == "decreasing", interpret="gpu", block=block) for k, d in pairs]

  program = str(jax.make_jaxpr(both)(x))
  assert ("InterpretGPUParams" in program) == (one_pass.cuda_backend() == "mosaic_gpu"), "not the backend's interpreter"
  for k, direction, got in zip(ks, DIRECTIONS, jax.jit(both)(x), strict=True):
    _check(x, k, direction, got, f"{dtype} {direction} k={k} {one_pass.layout(rows, n, block)}")


def test_layout_gives_enough_programs_and_covers_every_row() -> None:
  for rows, n in ((64, 131072), (1, 32000), (16, 32000), (4, 128256), (1024, 4096), (3, 1024), (1, 1 << 22)):
    lay = one_pass.layout(rows, n, one_pass.block_for(np.dtype(np.float32)))
    span = lay.blocks * lay.block  # one segment's
    assert lay.segments & (lay.segments - 1) == 0, lay
    assert (lay.segments - 1) * span < n <= lay.segments * span, lay  # every segment starts inside the row
    assert lay.segments == 1 or lay.blocks >= one_pass.MIN_SEGMENT_BLOCKS, lay
    # Enough programs, unless twice the segments would leave them too few blocks.
    doubled_too_short = 2 * lay.segments * one_pass.MIN_SEGMENT_BLOCKS * lay.block > n
    assert rows * lay.segments >= one_pass.MIN_PROGRAMS or doubled_too_short, lay


# dml.top_k with the CUDA branch forced -------------------------------------------------------------------------


def _forced(**changes: Any) -> Any:
  return platform.choosing(branch="cuda", interpret=True, **changes)


def test_cuda_table_picks_the_kernel_for_small_k_on_long_rows() -> None:
  picks = {
    (dtype, k, n): dispatch.strategy("cuda", Case(np.dtype(dtype), (8, n), k, True)).name
    for dtype in (np.float32, BFLOAT16, np.int8, np.uint32, np.float64)
    for k, n in ((1, 4096), (2, 1024), (16, 4096), (17, 4096), (8, 1000))
  }
  for (dtype, k, n), name in picks.items():
    kernel = np.dtype(dtype).itemsize <= 4 and 2 <= k <= 16 and n >= 1024
    assert (name == one_pass.NAME) == kernel, (dtype, k, n, name)


def test_top_k_runs_the_kernel_with_the_default_layout() -> None:
  """Rows of 4100: two segments of blocks of 512 (the segments' kernel, then the merge)."""
  x = _sample(np.dtype(np.float32), (2, 4100), seed=16)
  assert one_pass.layout(*x.shape, one_pass.block_for(x.dtype)) == one_pass.Layout(512, 5, 2)
  with _forced():
    _check(x, 9, "decreasing", dml.top_k(x, 9), "default layout")


def test_vmap_of_the_primitive_and_the_gradient_through_top_k() -> None:
  x = _sample(np.dtype(np.float32), (4, 1030), seed=11)
  case = Case(np.dtype(np.float32), (1030,), 6, True)
  with _forced():
    # vmap straight on the strategy: the primitive's batching rule (dml.top_k batches before it).
    values, indices = jax.jit(jax.vmap(lambda row: dispatch.BY_NAME["one_pass"].select(row, case)))(x)
    _check(x, 6, "decreasing", (values, indices), "vmap")
    distinct = (np.random.default_rng(12).permutation(x.size).reshape(x.shape) * 0.5).astype(np.float32)
    want = ref_top_k(distinct, 6, -1, "decreasing")[1]
    grad = jax.grad(lambda x: jnp.sum(dml.top_k(x, 6)[0] * jnp.arange(1.0, 7.0, dtype=jnp.float32)[None]))(distinct)
    expected = np.zeros_like(distinct)
    np.put_along_axis(expected, want, np.arange(1.0, 7.0, dtype=np.float32)[None], axis=-1)
    np.testing.assert_array_equal(np.asarray(grad), expected)


def test_under_x64_the_kernel_keeps_its_int32_carries() -> None:
  x = _sample(np.dtype(np.int16), (2, 1500), seed=14)
  with x64(), _forced():
    _check(x, 7, "increasing", jax.jit(lambda x: dml.top_k(x, 7, direction="increasing"))(x), "x64")


def test_64_bit_types_and_large_k_are_refused_by_name() -> None:
  with x64(), _forced(top_k=one_pass.NAME), pytest.raises(ValueError, match="does not handle"):
    dml.top_k(np.arange(2048, dtype=np.float64).reshape(2, 1024), 3)
  with _forced(top_k=one_pass.NAME), pytest.raises(ValueError, match="does not handle"):
    dml.top_k(np.arange(2048, dtype=np.float32).reshape(2, 1024), one_pass.MAX_K + 1)


def test_jit_for_cuda_holds_the_kernel_and_export_does_not() -> None:
  """Lowered for CUDA under jit the program calls the Pallas kernels, through the backend of this jax and with no
  deprecation warning; exported for CPU and CUDA it holds XLA's operations only (an exported program may run on
  any GPU), and runs on CPU."""
  x = _sample(np.dtype(np.float32), (4, 2000), seed=15)
  fn = jax.jit(lambda x: dml.top_k(x, 5))
  spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
  expected = "mosaic_gpu" if jax.__version_info__[:2] >= (0, 11) else "triton"
  assert one_pass.cuda_backend() == expected
  with warnings.catch_warnings():
    warnings.simplefilter("error", DeprecationWarning)
    for_cuda = fn.trace(spec).lower(lowering_platforms=("cuda",)).as_text()
  assert PALLAS_CALLS[expected] in for_cuda and one_pass.KERNEL_NAME in for_cuda, expected
  assert not any(call in for_cuda for backend, call in PALLAS_CALLS.items() if backend != expected)
  exported = export.export(fn, platforms=("cpu", "cuda"))(spec)
  assert not any(call in exported.mlir_module() for call in PALLAS_CALLS.values())
  assert one_pass.KERNEL_NAME not in exported.mlir_module()
  _check(x, 5, "decreasing", export.deserialize(exported.serialize()).call(x), "exported")


def test_rows_shorter_than_a_warpgroup_take_the_next_row_when_compiled() -> None:
  """Chosen by name for CUDA, a row of fewer than 128 elements (a warpgroup's threads) is selected by the table's
  next row, not compiled into a kernel; 128 elements are; in interpret mode both run the kernel."""
  assert one_pass.MIN_COMPILED_ROW == 128
  fn = jax.jit(lambda x: dml.top_k(x, 3))

  def for_cuda(n: int) -> str:
    with platform.choosing(top_k=one_pass.NAME):
      return fn.trace(jax.ShapeDtypeStruct((4, n), np.float32)).lower(lowering_platforms=("cuda",)).as_text()

  call = PALLAS_CALLS[one_pass.cuda_backend()]
  assert call not in for_cuda(127) and call in for_cuda(128)
  x = _sample(np.dtype(np.float32), (4, 127), seed=17)
  with _forced(top_k=one_pass.NAME):
    assert "dmljax_one_pass_top_k" in str(jax.make_jaxpr(fn)(x))
    _check(x, 3, "decreasing", fn(x), "interpret, short row")
