"""The TPU selection's values, checked on CPU: the keys' inverses, the DMA fetch kernel (interpret mode), the strategy.

On TPUs ``tpu_kernel`` reads the ``k`` values back from the keys XLA's ``TopK`` returns wherever a key has one
input, and fetches the others (zeros, NaNs, and float32's subnormals, which its key merges) with the DMA kernel
of ``tpu_fetch``. Here: every inverse over every bit pattern of the 16-bit and 8-bit types and over each
float32 class; the kernel against NumPy at the shapes that take its edge copies and several grid steps; the
strategy end to end on the TPU branch forced on CPU (``lax.top_k`` there compares with XLA:CPU's total order,
the comparator XLA attaches to the TPU's ``TopK`` too), with NaN payloads of both signs, signed zeros,
subnormals, infinities and ties; programs split over devices by XLA, and a program exported for CPU and TPU.
The kernel's Mosaic compile for a TPU v5e is in tests/test_accelerator_structure.py.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import bits, spy_on
from dml_strategies import flush_subnormals
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from reference import ref_top_k

import dmljax as dml
from dmljax._src import platform
from dmljax._src.strategies import kernel_keys, tpu_fetch, tpu_kernel

BF16 = np.dtype(jnp.bfloat16)
FLOATS = (np.dtype(np.float32), BF16, np.dtype(np.float16))
DIRECTIONS = ("decreasing", "increasing")


def _unsigned(dtype: np.dtype) -> np.dtype:
  return np.dtype(f"uint{np.dtype(dtype).itemsize * 8}")


def _every_pattern(dtype: np.dtype) -> np.ndarray:
  dtype = np.dtype(dtype)
  return np.arange(1 << (dtype.itemsize * 8), dtype=np.uint32).astype(_unsigned(dtype)).view(dtype)


def _classes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Zeros (both signs), NaNs and subnormals of a float array, from its bits (no float arithmetic)."""
  unsigned = _unsigned(x.dtype)
  width = x.dtype.itemsize * 8
  magnitude = x.view(unsigned) & np.array((1 << (width - 1)) - 1, unsigned)
  inf = np.array(np.inf, x.dtype).view(unsigned)
  smallest_normal = np.array(jnp.finfo(x.dtype).smallest_normal, x.dtype).view(unsigned)
  return magnitude == 0, magnitude > inf, (magnitude != 0) & (magnitude < smallest_normal)


@functools.partial(jax.jit, static_argnums=(1,))
def _ordinal_round_trip(x: jax.Array, largest_first: bool) -> tuple[jax.Array, jax.Array]:
  return kernel_keys.ordinal_inverse(kernel_keys.ordinal(x, largest_first), np.dtype(x.dtype), largest_first)


@pytest.mark.sample(0)
@pytest.mark.parametrize("dtype", [np.float16, BF16, np.int16, np.uint16, np.int8, np.uint8], ids=str)
@pytest.mark.parametrize("largest_first", [True, False])
def test_ordinal_inverse_gives_back_every_input_but_zeros_and_nans(dtype: Any, largest_first: bool) -> None:
  x = _every_pattern(np.dtype(dtype))
  values, exact = _ordinal_round_trip(jnp.asarray(x), largest_first)
  values, exact = np.asarray(values), np.asarray(exact)
  if jnp.issubdtype(x.dtype, jnp.floating):
    zero, nan, _ = _classes(x)
    np.testing.assert_array_equal(exact, ~(zero | nan))
  else:
    assert exact.all()
  np.testing.assert_array_equal(bits(values)[exact], bits(x)[exact])


def _float32_patterns(seed: int) -> np.ndarray:
  """Every exponent with the extreme and random mantissas, both signs, and random patterns."""
  rng = np.random.default_rng(seed)
  exponent = np.arange(256, dtype=np.uint32) << 23
  mantissa = np.concatenate([[0, 1, 2, (1 << 22) | 1, (1 << 23) - 1], rng.integers(0, 1 << 23, 11)]).astype(np.uint32)
  grid = (exponent[:, None] | mantissa[None, :]).reshape(-1)
  random = rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32)
  return np.concatenate([grid, grid | np.uint32(1 << 31), random]).view(np.float32)


@functools.partial(jax.jit, static_argnums=(1,))
def _one_step_round_trip(x: jax.Array, largest_first: bool) -> tuple[jax.Array, jax.Array]:
  return kernel_keys.one_step_below_inverse(kernel_keys.one_step_below(x, largest_first), largest_first)


@pytest.mark.parametrize("largest_first", [True, False])
def test_one_step_below_inverse_gives_back_every_normal_and_infinity(largest_first: bool) -> None:
  x = _float32_patterns(seed=170)
  values, exact = _one_step_round_trip(jnp.asarray(x), largest_first)
  values, exact = np.asarray(values), np.asarray(exact)
  zero, nan, subnormal = _classes(x)
  np.testing.assert_array_equal(exact, ~(zero | nan | subnormal))
  np.testing.assert_array_equal(bits(values)[exact], bits(x)[exact])


@pytest.mark.parametrize("dtype", [np.int32, np.uint32], ids=str)
@pytest.mark.parametrize("largest_first", [True, False])
def test_the_total_order_view_of_32_bit_integers_is_inverted(dtype: Any, largest_first: bool) -> None:
  info = np.iinfo(dtype)
  rng = np.random.default_rng(171)
  edges = np.array([info.min, info.min + 1, -1 if info.min else 1, 0, 1, info.max - 1, info.max], np.int64)
  x = np.concatenate([edges, rng.integers(info.min, info.max, 5000, endpoint=True)]).astype(dtype)
  values, exact = jax.jit(lambda x: tpu_kernel.value(tpu_kernel.key(x, largest_first), np.dtype(dtype), largest_first))(
    jnp.asarray(x)
  )
  assert np.asarray(exact).all()
  np.testing.assert_array_equal(np.asarray(values), x)


def _random_bits(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
  width = np.dtype(dtype).itemsize * 8
  return rng.integers(0, 1 << width, shape, dtype=np.uint64).astype(_unsigned(dtype)).view(dtype)


@functools.partial(jax.jit, static_argnums=(3,))
def _fetch(x: jax.Array, columns: jax.Array, wanted: jax.Array, interpret: bool) -> jax.Array:
  return tpu_fetch.fetch(tpu_fetch.operand(x), columns, wanted, interpret=interpret)


# (type, matrix, k): a partial last column tile; two grid steps; fewer than 16 rows of a 16-bit type (every row
# copied); a partial last row tile of one with a partial column tile and two steps; a partial row tile alone;
# rows shorter than a tile (every column in the column tile's copy).
FETCH_CASES = [
  (np.float32, (3, 300), 17),
  (np.float32, (40, 256), 30),
  (BF16, (9, 384), 12),
  (BF16, (20, 700), 64),
  (np.float16, (17, 256), 5),
  (BF16, (20, 100), 9),
  (np.float32, (3, 40), 40),
]


@pytest.mark.parametrize(("dtype", "shape", "k"), FETCH_CASES, ids=lambda c: str(c))
def test_fetch_copies_the_wanted_elements_bit_for_bit(dtype: Any, shape: tuple[int, int], k: int) -> None:
  """Random bit patterns (NaN payloads, signalling ones too): each wanted slot holds its element's bits."""
  _check_fetch(np.dtype(dtype), shape, k, interpret=True)


def test_fetch_off_tpus_is_the_kernel_in_interpret_mode() -> None:
  """Not asked to interpret, the kernel's primitive lowers to interpret mode for CPUs (Mosaic for TPUs)."""
  _check_fetch(BF16, (20, 700), 64, interpret=False)


def _check_fetch(dtype: np.dtype, shape: tuple[int, int], k: int, interpret: bool) -> None:
  rng = np.random.default_rng(172)
  x = _random_bits(rng, np.dtype(dtype), shape)
  columns = rng.integers(0, shape[1], (shape[0], k)).astype(np.int32)
  columns[:, 0] = shape[1] - 1  # the last column: in the partial tile where there is one
  wanted = rng.random((shape[0], k)) < 0.7
  got = np.asarray(_fetch(jnp.asarray(x), jnp.asarray(columns), jnp.asarray(wanted), interpret))
  want = np.take_along_axis(bits(x), columns, axis=1)
  np.testing.assert_array_equal(got.view(np.uint32).astype(want.dtype)[wanted], want[wanted])


def _selection_input(dtype: np.dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
  """Ties, with quiet NaNs carrying payloads (both signs), signed zeros, subnormals and infinities mixed in."""
  rng = np.random.default_rng(seed)
  x = rng.integers(-3, 4, shape).astype(dtype)
  if not jnp.issubdtype(dtype, jnp.floating):
    info = np.iinfo(dtype)
    return np.where(rng.random(shape) < 0.1, np.array(info.min, dtype), np.where(rng.random(shape) < 0.1, info.max, x))
  unsigned = _unsigned(dtype)
  width = dtype.itemsize * 8
  sign = np.array(1 << (width - 1), unsigned)
  quiet = np.array(np.nan, dtype).view(unsigned)
  smallest_normal = int(np.array(jnp.finfo(dtype).smallest_normal, dtype).view(unsigned))
  payload = rng.integers(0, smallest_normal >> 1, shape).astype(unsigned)  # below the quiet bit
  special = np.stack(
    [
      quiet | payload,  # NaN
      np.zeros(shape, unsigned),  # zero
      rng.integers(1, smallest_normal, shape).astype(unsigned),  # subnormal
      np.full(shape, np.array(np.inf, dtype).view(unsigned)),  # infinity
    ]
  )[rng.integers(0, 4, shape), *np.indices(shape)]
  special = special | np.where(rng.random(shape) < 0.5, sign, np.array(0, unsigned))
  return np.where(rng.random(shape) < 0.3, special.view(dtype), x)


# (shape, k): rank 2 with a partial column tile; rank 3 (selected as a matrix) with k past one lane tile; rank 1;
# rows shorter than a tile, k == n (the strategy forced: the table sorts rows that short).
SELECTION_CASES = [((5, 300), 9), ((2, 3, 256), 130), ((384,), 7), ((20, 60), 60)]
SELECTION_TYPES = (*FLOATS, np.dtype(np.int32), np.dtype(np.uint32), np.dtype(np.int16), np.dtype(np.uint8))


def _check_selection(x: np.ndarray, k: int, direction: str, values: Any, indices: Any) -> None:
  """Indices in dmljax's order (float32's key ties subnormals with zero, as SPEC §1 allows), values bit for bit."""
  values, indices = np.asarray(values), np.asarray(indices)
  order = flush_subnormals(x) if x.dtype == np.float32 else x
  want_values, want_indices = ref_top_k(order, k, -1, direction)
  np.testing.assert_array_equal(indices, want_indices.astype(np.int32), err_msg=direction)
  np.testing.assert_array_equal(bits(values), bits(np.take_along_axis(x, indices, axis=-1)), err_msg=direction)
  if x.dtype != np.float32:
    np.testing.assert_array_equal(bits(values), bits(want_values), err_msg=direction)


@pytest.mark.sample(0)  # every value of each parameter once by default; the whole product with -m long
@pytest.mark.parametrize("dtype", SELECTION_TYPES, ids=str)
@pytest.mark.parametrize(("shape", "k"), SELECTION_CASES, ids=lambda c: str(c))
def test_the_tpu_strategy_is_exact(dtype: np.dtype, shape: tuple[int, ...], k: int) -> None:
  x = _selection_input(dtype, shape, seed=173)
  with platform.choosing(branch="tpu", top_k="tpu_kernel"):
    for direction in DIRECTIONS:
      values, indices = dml.top_k(x, k, direction=direction, index_dtype=jnp.int32)
      _check_selection(x, k, direction, values, indices)


@pytest.mark.parametrize("spec", [P("d"), P(None, "d")], ids=["rows split", "sequence split"])
def test_a_program_split_by_xla_selects_without_the_kernel(monkeypatch: pytest.MonkeyPatch, spec: P) -> None:
  """Mosaic kernels cannot be partitioned by XLA: on automatic mesh axes a matrix's keys go whole to XLA's TopK,
  which XLA partitions, and the values the keys cannot give back are gathered by XLA, only where selected (a
  ``lax.cond``: here zeros and NaNs are selected, and then none); a rank-3 array is selected in chunks, whose
  selections run the kernel inside a shard_map over the program's devices. Exact."""
  reached = spy_on(((tpu_kernel, "_one_device"), (tpu_kernel, "_partitioned")), monkeypatch)
  mesh = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Auto,), devices=jax.devices()[:4])
  specials = _selection_input(np.dtype(np.float32), (8, 512), seed=174)
  plain = np.random.default_rng(176).standard_normal((8, 512)).astype(np.float32) + np.float32(8)  # no zero or NaN
  with platform.choosing(branch="tpu", top_k="tpu_kernel"):
    split = jax.jit(lambda x: dml.top_k(x, 6, index_dtype=jnp.int32), in_shardings=NamedSharding(mesh, spec))
    for x in (specials, plain):
      _check_selection(x, 6, "decreasing", *split(x))
    assert set(reached) == {"_partitioned"}, reached
    reached.clear()
    cube = specials.reshape(2, 4, 512)
    three = jax.jit(
      lambda x: dml.top_k(x, 6, index_dtype=jnp.int32), in_shardings=NamedSharding(mesh, P(None, None, "d"))
    )
    values, indices = three(cube)
    _check_selection(specials, 6, "decreasing", np.asarray(values).reshape(8, 6), np.asarray(indices).reshape(8, 6))
    assert set(reached) == {"_one_device", "_partitioned"}, reached
    reached.clear()
    _check_selection(specials, 6, "decreasing", *jax.jit(lambda x: dml.top_k(x, 6, index_dtype=jnp.int32))(specials))
  assert set(reached) == {"_one_device"}, reached


def test_an_export_for_cpu_and_tpu_holds_the_mosaic_kernel() -> None:
  x = _selection_input(BF16, (4, 512), seed=175)
  exported = jax.export.export(jax.jit(lambda x: dml.top_k(x, 5, index_dtype=jnp.int32)), platforms=("cpu", "tpu"))(
    jax.ShapeDtypeStruct(x.shape, x.dtype)
  )
  assert "tpu_custom_call" in exported.mlir_module()
  restored = jax.export.deserialize(exported.serialize())
  _check_selection(x, 5, "decreasing", *restored.call(x))
