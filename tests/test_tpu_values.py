"""The TPU selection's values, checked on CPU: the inverses of the kernel keys, the DMA fetch kernel (interpret mode).

On TPUs the selection can read the ``k`` values back from the keys XLA's ``TopK`` returns wherever a key has one
input, and fetch the others with the DMA kernel of ``tpu_fetch``. Here: every inverse over every bit pattern of the
16-bit and 8-bit types and over each float32 class; the kernel against NumPy at the shapes that take its edge
copies and several grid steps. The kernel's Mosaic compile for a TPU v5e is in tests/test_accelerator_structure.py.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import bits

from dmljax._src.strategies import kernel_keys, tpu_fetch

BF16 = np.dtype(jnp.bfloat16)


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
