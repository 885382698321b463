"""REDUCE MAX/MIN of floats, bit for bit: IEEE 754-2019 maximum/minimum zeros, the NaN with the largest bits.

Every axis layout the fused CPU path reshapes (trailing, leading, middle, several, all; apart, which XLA's
reduction takes), odd lengths (halves that overlap), long rows (split into parts), ``vmap`` (whose rule keeps
the NaN fix-up a one-branch ``lax.cond``), ``jit`` and ``grad``, against the NumPy reference; and the compiled
program's temporaries stay a fraction of the input.

These tests run REDUCE's XLA composition (the compiled CPU kernel's are in tests/test_cpu_kernel.py). A one-device
program takes the fused CPU path whatever the process's device count (the choice is the
program's: tests/test_sharding.py checks that a program over several devices takes XLA's reduction), so this
file runs it here, in the suite's 8-device process, and tests/test_one_device_process.py runs the whole file
again in a process of one device, where a user on a laptop is; ``test_one_device_programs_take_the_halving``
checks from the lowered program that the halving is what ran.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_bitwise_equal, maximum_reduction_lengths
from reference import ref_extreme

import dmljax as dml
from dmljax._src import platform


@pytest.fixture(autouse=True)
def composition() -> Iterator[None]:
  """The XLA composition (the compiled CPU kernel's own tests: tests/test_cpu_kernel.py), as a build without a
  C++ compiler runs it, and as every platform but CPU does."""
  with platform.choosing(cpu_kernel=False):
    yield


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
  ((300, 16), (1,)),
  ((3, 4096), (1,)),  # blocks of 128 along the minor axis, then their results
  ((2, 96, 3), (1,)),  # blocks of 16 (of 8 for types made bits first) rows apart, then a reduction
  ((320, 2), (0,)),
]
# Reduced axes next to each other: the layouts the halving takes (the others, reduced axes apart or none, take
# XLA's reduction or nothing).
HALVED = [(shape, axes) for shape, axes in LAYOUTS if axes and axes == tuple(range(axes[0], axes[-1] + 1))]


@pytest.mark.sample(0)  # every type and every layout at least once by default; the whole product with -m long
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
    compiled = jax.jit(lambda a, kind=kind: dml.reduce(a, kind, 1)).lower(x).compile()
    temporaries = compiled.memory_analysis().temp_size_in_bytes
    assert temporaries <= size // 3, (kind, temporaries)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(ml_dtypes.float8_e5m2)], ids=lambda d: d.name)
@pytest.mark.parametrize(("shape", "axes"), HALVED, ids=[f"{s}-{a}" for s, a in HALVED])
def test_one_device_programs_take_the_halving(dtype: np.dtype, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
  """In any process, a one-device program reduces by halving: no maximum reduction left over more than the
  halving's last 16 elements (or the 64 parts a long row is split into), where XLA's reduces every element."""
  x = jax.ShapeDtypeStruct(shape, dtype)
  for kind in ("max", "min"):
    lowered = jax.jit(lambda a, kind=kind: dml.reduce(a, kind, axes)).lower(x).as_text()
    lengths = maximum_reduction_lengths(lowered)
    assert max(lengths, default=0) <= 64 < math.prod(shape[a] for a in axes) or max(lengths, default=0) <= 16, (
      kind,
      lengths,
    )


def _with_negative_nans(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
  """:func:`_sample` with the type's negative NaNs (the key's wrapped values) in about a third of the rows."""
  x = _sample(rng, dtype, shape)
  bits = x.reshape(-1, shape[-1]).view(f"u{dtype.itemsize}")
  with np.errstate(invalid="ignore"):
    patterns = np.arange(256, dtype=np.uint8)
    negative_nans = patterns[np.isnan(patterns.view(dtype).astype(np.float32)) & (patterns >= 128)]
  rows = np.flatnonzero(rng.random(bits.shape[0]) < 0.3)
  bits[rows, rng.integers(0, shape[-1], rows.size)] = rng.choice(negative_nans, rows.size)
  return x


@pytest.mark.parametrize("dtype", [np.dtype(ml_dtypes.float8_e5m2), np.dtype(ml_dtypes.float8_e4m3fn)], ids=str)
@pytest.mark.parametrize(("shape", "axes"), [((300, 16), (1,)), ((5000, 3), (1,)), ((2, 4100), (1,))], ids=str)
def test_wrapped_narrow_keys_are_reduced_right(dtype: np.dtype, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
  """float8's keys wrap (negative NaNs move to the top): every XLA reduction of them is right, the halving's
  last one over rows of 16 included (4800 keys: where XLA:CPU's 8-bit reduction would lose the wrap)."""
  x = _with_negative_nans(np.random.default_rng([shape[0], dtype.num]), dtype, shape)
  for kind in ("max", "min"):
    assert_bitwise_equal(dml.reduce(x, kind, axes, keepdims=True), ref_extreme(x, kind, axes), f"{kind} {shape}")


def _on_cpu(a: np.ndarray) -> jax.Array:
  return jax.device_put(a, jax.devices("cpu")[0])  # XLA:CPU's behaviour, whatever the default backend


def _wrapping_into_max() -> tuple[int, int]:
  a = np.zeros(4096, np.int8)
  a[1] = -128  # -128 - 3 wraps to 125, the maximum
  return int(jax.jit(lambda a: jnp.max(a - jnp.int8(3)))(_on_cpu(a))), 125


def _wrapping_into_min() -> tuple[int, int]:
  a = np.zeros(4096, np.uint8)
  a[1] = 255  # 255 + 3 wraps to 2, the minimum
  return int(jax.jit(lambda a: jnp.min(a + jnp.uint8(3)))(_on_cpu(a))), 2


def _wrapping_into_a_float_sum() -> tuple[int, int]:
  a = np.zeros(4096, np.int8)
  a[1] = -128  # -128 - 3 wraps to 125: the sum is 125 - 3 * 4095
  total = jax.jit(lambda a: jnp.sum((a - jnp.int8(3)).astype(jnp.float32)))(_on_cpu(a))
  return int(total), 125 - 3 * 4095


@pytest.mark.xfail(
  strict=True,
  raises=AssertionError,
  reason="XLA:CPU computes 8-bit arithmetic fused into its YNNPACK reductions without the wrap (saturating): "
  "docs/semantics.rst, 'Integer overflow'. This passing means XLA is fixed: update that section.",
)
@pytest.mark.parametrize(
  "program", [_wrapping_into_max, _wrapping_into_min, _wrapping_into_a_float_sum], ids=lambda f: f.__name__
)
def test_xla_cpu_keeps_the_wrap_of_8_bit_arithmetic_fused_into_a_reduction(program: Any) -> None:
  """The minimal programs of the docs, under ``jax.jit`` on CPU, against NumPy's wrapped answer: ``jnp.max(a - 3)``
  of 4096 int8 holding -128 gives -3 (-128 - 3 saturated to -128), ``jnp.min(a + 3)`` of uint8 holding 255 gives 3,
  and the float32 sum of ``a - 3`` is 253 short (-12416). REDUCE keeps its 8-bit values out of that fusion
  (tests/test_narrow_integers.py); once XLA keeps the wrap, each case here passes, and its strict xfail fails the
  suite to say so."""
  got, numpy_answer = program()
  assert got == numpy_answer
