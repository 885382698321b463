"""REDUCE MAX/MIN of floats, bit for bit: IEEE 754-2019 maximum/minimum zeros, the NaN with the largest bits.

Every axis layout the fused CPU path reshapes (trailing, leading, middle, several, all, apart), odd lengths,
long rows, ``vmap`` (whose rule keeps the NaN fix-up a one-branch ``lax.cond``), ``jit`` and ``grad``,
against the NumPy reference; and the compiled program's temporaries stay a fraction of the input.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_bitwise_equal
from reference import ref_extreme

import dmljax as dml
from dmljax._src import platform

FLOATS = [
  np.dtype(np.float32),
  np.dtype(np.float16),
  np.dtype(ml_dtypes.bfloat16),
  np.dtype(ml_dtypes.float8_e5m2),
  np.dtype(ml_dtypes.float8_e4m3fn),
  np.dtype(ml_dtypes.float8_e4m3fnuz),
  np.dtype(ml_dtypes.float4_e2m1fn),
]


def _width(dtype: np.dtype) -> int:
  return 4 if dtype == np.dtype(ml_dtypes.float4_e2m1fn) else dtype.itemsize * 8


def _sample(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
  """Normal values with ±0, ±inf, subnormals and NaNs of both signs and random payloads mixed in."""
  x = rng.normal(size=shape).astype(dtype)
  bits = x.view(f"u{dtype.itemsize}")
  w = _width(dtype)
  specials = np.array([0.0, -0.0, np.inf, -np.inf], np.float64).astype(dtype)
  mask = rng.random(shape) < 0.2
  x[mask] = rng.choice(specials, int(mask.sum()))
  subnormal = rng.random(shape) < 0.05
  tiny = (rng.integers(1, 4, shape) | (rng.integers(0, 2, shape) << (w - 1))).astype(bits.dtype)
  bits[subnormal] = tiny[subnormal]
  if w >= 8:
    nan = rng.random(shape) < 0.01
    random_bits = rng.integers(0, 1 << w, shape, dtype=np.uint64).astype(bits.dtype)
    bits[nan] = random_bits[nan]
  return x


def _float(bits: int, dtype: np.dtype) -> np.ndarray:
  return np.array([bits], f"u{dtype.itemsize}").view(dtype)


@pytest.mark.parametrize(
  "dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64], ids=lambda d: np.dtype(d).name
)
def test_zeros_follow_ieee_maximum_and_minimum(dtype: type) -> None:
  x = np.array([[0.0, -0.0], [-0.0, 0.0], [-0.0, -0.0], [0.0, 0.0], [-1.0, -0.0]], np.float64).astype(dtype)
  if np.dtype(dtype) == np.float64:
    x = x.astype(np.float32)  # without jax_enable_x64
  got_max = np.asarray(dml.reduce(x, "max", 1)).astype(np.float64)
  got_min = np.asarray(dml.reduce(x, "min", 1)).astype(np.float64)
  np.testing.assert_array_equal(np.signbit(got_max), [False, False, True, False, True])
  np.testing.assert_array_equal(np.signbit(got_min), [True, True, True, False, True])
  np.testing.assert_array_equal(got_min, [0.0, 0.0, 0.0, 0.0, -1.0])


def test_nan_is_the_one_with_the_largest_bits() -> None:
  f32 = np.dtype(np.float32)
  positive, quiet_negative, signalling_negative = 0x7FC00001, 0xFFC00000, 0xFF800001
  row = np.concatenate([_float(b, f32) for b in (positive, quiet_negative, signalling_negative)] + [np.ones(5, f32)])
  for kind in ("max", "min"):
    got = np.asarray(dml.reduce(row, kind)).reshape(1).view(np.uint32)[0]
    assert got == quiet_negative, (kind, hex(got))
    got = np.asarray(dml.reduce(row[[0, 3, 4]], kind)).reshape(1).view(np.uint32)[0]
    assert got == positive, (kind, hex(got))
  bf16 = np.dtype(ml_dtypes.bfloat16)
  row = np.concatenate([_float(0x7F81, bf16), _float(0xFF81, bf16), np.ones(3, bf16)])  # signalling NaNs
  for kind in ("max", "min"):
    assert np.asarray(dml.reduce(row, kind)).reshape(1).view(np.uint16)[0] == 0xFF81, kind


def test_subnormals_are_not_zero() -> None:
  tiny = _float(1, np.dtype(np.float32))[0]
  x = np.array([[0.0, tiny, -0.0], [-tiny, -0.0, -tiny]], np.float32)
  assert_bitwise_equal(dml.reduce(x, "max", 1), np.array([tiny, -0.0], np.float32), "max")
  assert_bitwise_equal(dml.reduce(x, "min", 1), np.array([-0.0, -tiny], np.float32), "min")


LAYOUTS = [
  ((6, 40), (1,)),
  ((40, 6), (0,)),
  ((3, 37, 5), (1,)),
  ((3, 4, 33), (1, 2)),
  ((5, 4, 3), (0, 2)),
  ((7, 9), (0, 1)),
  ((2, 3, 4), ()),
  ((2, 70000), (1,)),
  ((65, 3), (0,)),
]


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize(("shape", "axes"), LAYOUTS, ids=[f"{s}-{a}" for s, a in LAYOUTS])
def test_matches_the_reference(dtype: np.dtype, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
  rng = np.random.default_rng([len(shape), *shape, len(axes), dtype.itemsize, _width(dtype)])
  x = _sample(rng, dtype, shape)
  for kind in ("max", "min"):
    got = dml.reduce(x, kind, axes, keepdims=True)
    assert_bitwise_equal(got, ref_extreme(x, kind, axes), f"{dtype.name} {kind} {shape} {axes}")


@pytest.mark.parametrize("dtype", FLOATS[:3], ids=lambda d: d.name)
def test_vmap_jit_and_all_axes(dtype: np.dtype) -> None:
  rng = np.random.default_rng(7)
  x = _sample(rng, dtype, (6, 50))
  for kind in ("max", "min"):
    want = ref_extreme(x, kind, (1,))[:, 0]
    assert_bitwise_equal(jax.vmap(lambda r, kind=kind: dml.reduce(r, kind))(x), want, f"vmap {kind}")
    assert_bitwise_equal(jax.jit(jax.vmap(lambda r, kind=kind: dml.reduce(r, kind)))(x), want, f"jit vmap {kind}")
    nested = jax.vmap(jax.vmap(lambda r, kind=kind: dml.reduce(r, kind)))(x.reshape(2, 3, 50))
    assert_bitwise_equal(nested, want.reshape(2, 3), f"vmap vmap {kind}")


def test_grad_shares_the_cotangent_among_both_zeros() -> None:
  x = np.array([[0.0, -0.0, -1.0]], np.float32)
  for kind in ("max", "min"):
    g = jax.grad(lambda x, kind=kind: dml.reduce(x, kind, 1).sum())(x)
    want = [[0.5, 0.5, 0.0]] if kind == "max" else [[0.0, 0.0, 1.0]]
    np.testing.assert_array_equal(np.asarray(g), want)


def test_compiled_temporaries_are_a_fraction_of_the_input() -> None:
  """jnp.max holds no temporaries; the fused halvings write about a quarter of the input (was two full arrays)."""
  x = jax.ShapeDtypeStruct((64, 16384), jnp.float32)
  size = 64 * 16384 * 4
  for kind in ("max", "min"):
    # The CPU branch forced: the suite's process has 8 CPU devices, where an unforced program takes XLA's reduce.
    with platform.choosing(branch="cpu"):
      compiled = jax.jit(lambda a, kind=kind: dml.reduce(a, kind, 1)).lower(x).compile()
    temporaries = compiled.memory_analysis().temp_size_in_bytes
    assert temporaries <= size // 3, (kind, temporaries)
