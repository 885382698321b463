"""The CPU fast paths (benchmarks/, issue 5) against the NumPy reference, on the shapes that select them.

top_k takes a two-stage chunked selection on long rows and k max passes for k <= 2 on short rows;
these tests draw heavy ties, every kind of NaN, signed zeros, infinities and integer extremes so that
any tie-break or ordering slip in those paths shows up as a wrong index.
"""

import math
import zlib

import jax
import jax.numpy as jnp
import jax.test_util
import ml_dtypes
import numpy as np
import pytest
from _helpers import ties
from reference import ref_arg_reduce, ref_reduce, ref_top_k

import dmljax as dml
from dmljax._src.strategies import cpu, staged

_NAN_BITS = {
  np.dtype(np.float32): (0x7FC00000, 0xFFC00000, 0x7FC00123, 0xFFFFFFFF),
  np.dtype(np.float16): (0x7E00, 0xFE00, 0x7E01),
  np.dtype(ml_dtypes.bfloat16): (0x7FC0, 0xFFC0, 0x7FC1),
}


def _tied(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype, pool: int = 9) -> np.ndarray:
  """Values from a small pool (many ties), with NaNs of several payloads and signs, ±0 and ±inf."""
  dtype = np.dtype(dtype)
  if dtype.kind in "iu":
    info = np.iinfo(dtype)
    choices = np.array([info.min, info.max, 0, 1, info.min + 1, 7, 7, info.max - 1], dtype)
    base = rng.integers(info.min, info.max, pool, dtype=dtype, endpoint=True)
    return rng.choice(np.concatenate([choices, base]), shape)
  values = rng.choice(np.float32([-0.0, 0.0, np.inf, -np.inf, 1.5, -2.25, 3.0, 1e-3, -7.0]), shape).astype(dtype)
  bits = values.view(f"u{dtype.itemsize}")
  nan = rng.random(shape) < 0.05
  bits[nan] = rng.choice(np.array(_NAN_BITS[dtype], bits.dtype), int(nan.sum()))
  return values


def _bits(a: np.ndarray) -> np.ndarray:
  a = np.asarray(a)
  return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind not in "iu" else a


_TOP_K_CASES = [
  # (shape, k, axis), all of at least cpu.MIN_STAGED_SIZE elements: long rows take the chunked
  # path (padded where 16 or 32 does not divide n) ...
  ((5, 4096), 16, -1),
  ((9, 2048), 1, -1),
  ((17, 1000), 5, 1),
  ((2, 6, 1500), 7, -1),
  ((1200, 15), 9, 0),
  ((4, 4096), 50, -1),
  # ... short rows with k <= 2 take the max passes, the rest lax.top_k.
  ((256, 64), 2, -1),
  ((500, 37), 1, -1),
  ((170, 100), 2, 1),
  ((300, 64), 3, -1),
]


@pytest.mark.sample(0)  # every value of each parameter once by default; the whole product with -m long
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.int32, np.uint32, np.int8])
@pytest.mark.parametrize("direction", ["decreasing", "increasing"])
def test_top_k_fast_paths_match_reference(dtype: type, direction: str) -> None:
  rng = np.random.default_rng(zlib.crc32(f"{np.dtype(dtype).name}/{direction}".encode()))
  cases = [_TOP_K_CASES[i] for i in rng.choice(len(_TOP_K_CASES), 5, replace=False)]
  for shape, k, axis in cases:
    x = _tied(rng, shape, np.dtype(dtype))
    values, indices = dml.top_k(jnp.asarray(x), k, axis=axis, direction=direction, index_dtype=jnp.int32)
    want_values, want_indices = ref_top_k(x, k, axis, direction)
    np.testing.assert_array_equal(np.asarray(indices), want_indices, err_msg=f"{shape} k={k} axis={axis}")
    np.testing.assert_array_equal(_bits(values), _bits(want_values), err_msg=f"{shape} k={k} axis={axis}")


def test_top_k_key_selection_paths_agree_on_random_keys() -> None:
  """Chunked, extracted and plain selections give the same indices on keys with many ties."""
  rng = np.random.default_rng(7)
  for n, k, chunk in ((4096, 16, 16), (1000, 5, 16), (2048, 1, 32), (300, 4, 8)):
    key = jnp.asarray(rng.integers(-3, 3, (3, n), dtype=np.int32))
    plain = jax.jit(cpu.top_k_of_key, static_argnums=1)(key, k)
    chunked = jax.jit(lambda key, k=k, chunk=chunk: staged.chunked(key, k, chunk, cpu.top_k_of_key))(key)
    np.testing.assert_array_equal(np.asarray(chunked), np.asarray(plain))
    extracted = jax.jit(staged.extracted, static_argnums=1)(key, min(k, 2))
    np.testing.assert_array_equal(np.asarray(extracted), np.asarray(plain)[:, : min(k, 2)])


def test_top_k_chunked_path_is_taken_on_long_rows() -> None:
  """The shapes of the benchmark select the chunked path (so the tests above exercise it)."""
  assert staged.cpu_chunk(32768, 50) == 32
  assert staged.cpu_chunk(32768, 1) == 32
  assert staged.cpu_chunk(4096, 16) == 16
  assert staged.cpu_chunk(64, 2) is None
  for shape, _, _ in _TOP_K_CASES:
    assert np.prod(shape) >= cpu.MIN_STAGED_SIZE


@pytest.mark.parametrize("find_max", [False, True])
@pytest.mark.parametrize("direction", ["increasing", "decreasing"])
def test_arg_reduce_fast_paths_match_reference(find_max: bool, direction: str) -> None:
  rng = np.random.default_rng(11 + 2 * find_max + (direction == "decreasing"))
  op = dml.argmax if find_max else dml.argmin
  for dtype, shape, axes in (
    (np.float32, (16, 16, 64), (1, 2)),
    (np.float32, (3, 5, 7), (0, 2)),
    (np.int32, (9, 2048), (1,)),
    (np.float16, (2, 8, 8, 3), (1, 2)),
    (ml_dtypes.bfloat16, (60, 300), (0, 1)),
    (np.float32, (3, 40), (1,)),
    (np.uint32, (8, 33, 2), (1,)),
  ):
    x = _tied(rng, shape, np.dtype(dtype), pool=3)
    got = op(jnp.asarray(x), axes, ties=ties(direction), keepdims=True, index_dtype=jnp.int32)
    want = ref_arg_reduce(x, axes, "max" if find_max else "min", direction)
    np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"{np.dtype(dtype).name} {shape} {axes}")


# Relative tolerance per dtype, scaled by the reduced count N as jax's own tests scale theirs: rounding errors of
# random sign leave a float32 reduction of N same-sign terms within a few eps·√N of the exact value. For the
# sizes below 4·eps·√N stays well under 1/N, so an average divided by N - 1 (or N + 1) fails.
_EPS = {np.dtype(np.float32): float(np.finfo(np.float32).eps)}


def _reduction_rtol(dtype: np.dtype, n: int) -> float:
  return 4 * _EPS[np.dtype(dtype)] * math.sqrt(n)


@pytest.mark.parametrize(
  ("function", "shape", "axes"),
  [
    ("sum", (64, 4096), (1,)),
    ("sum", (4096, 64), (0,)),
    ("sum", (16, 64, 128), (0, 1)),
    ("sum", (96, 512), None),
    ("average", (2, 4, 56, 56), (2, 3)),
    ("average", (4096, 64), (0,)),
    ("average", (7, 3, 300), (0, 2)),
    ("l2", (16, 1024), (1,)),
    ("log_sum_exp", (16, 1024), (1,)),
    ("multiply", (16, 1024), (1,)),
    ("sum_square", (8, 1000), (1,)),
    ("l1", (3, 7, 500), (0, 2)),
  ],
)
def test_float_reductions_match_reference(function: str, shape: tuple[int, ...], axes: tuple[int, ...] | None) -> None:
  rng = np.random.default_rng(zlib.crc32(f"{function}/{shape}/{axes}".encode()))
  axes = axes if axes is not None else tuple(range(len(shape)))
  n = math.prod(shape[a] for a in axes)
  # Terms of one sign (mean 1), so every result is far from 0 and a relative tolerance applies.
  x = (1.0 + 0.25 * rng.standard_normal(shape)).astype(np.float32)
  if function == "multiply":
    x = (1.0 + 0.01 * rng.standard_normal(shape)).astype(np.float32)
  rtol = _reduction_rtol(x.dtype, n)
  if function == "average":
    assert 4 * rtol < 1 / n, "this size would not tell a divide-by-(N - 1) from a divide-by-N"
  got = np.asarray(dml.reduce(jnp.asarray(x), function, axes, keepdims=True, index_dtype=jnp.int32))
  np.testing.assert_allclose(got, ref_reduce(x, function, axes), rtol=rtol, atol=0)


@pytest.mark.parametrize("function", ["max", "min"])
def test_max_min_propagate_nan_on_long_rows(function: str) -> None:
  """XLA:CPU's vectorised max/min reductions skip NaN on long rows; SPEC §5 wants NaN."""
  rng = np.random.default_rng(5)
  x = rng.standard_normal((6, 2048), dtype=np.float32)
  x[1, 7] = np.nan
  x[4, 2047] = np.nan
  for axes in ((1,), (0, 1), (0,)):
    got = np.asarray(dml.reduce(jnp.asarray(x), function, axes, keepdims=True))
    np.testing.assert_array_equal(got, ref_reduce(x, function, axes))


def test_column_sum_by_matrix_vector_product_has_plain_sum_derivatives() -> None:
  """The leading-axes sum (a matrix-vector product on CPU) differentiates like jnp.sum, to second order."""
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.standard_normal((512, 160), dtype=np.float32))
  jax.test_util.check_grads(
    lambda v: dml.reduce(v, "sum", 0, keepdims=True), (x,), order=2, modes=("fwd", "rev"), atol=1e-2, rtol=1e-2
  )
  ct = jnp.asarray(rng.standard_normal((1, 160), dtype=np.float32))
  grad = jax.vjp(lambda v: dml.reduce(v, "sum", 0, keepdims=True), x)[1](ct)[0]
  np.testing.assert_array_equal(np.asarray(grad), np.broadcast_to(np.asarray(ct), x.shape))


def test_product_by_halving_wraps_integers_and_differentiates_exactly() -> None:
  rng = np.random.default_rng(9)
  ints = rng.integers(-7, 8, (5, 640), dtype=np.int32)
  np.testing.assert_array_equal(
    np.asarray(dml.reduce(jnp.asarray(ints), "multiply", 1, keepdims=True)), ref_reduce(ints, "multiply", (1,))
  )
  # Powers of two multiply exactly in any order, so the product rule's values are exact.
  x = rng.choice(np.float32([0.5, 1.0, 2.0, -1.0, -2.0]), (3, 96))
  x[1, 17] = 0.0
  x[2, 3] = x[2, 90] = 0.0
  grad = np.asarray(jax.grad(lambda v: dml.reduce(v, "multiply", 1, keepdims=True).sum())(jnp.asarray(x)))
  others = np.prod(np.delete(x[0], 5)) * np.ones(1, np.float32)
  np.testing.assert_array_equal(grad[0, 5:6], others)
  np.testing.assert_array_equal(grad[1], np.where(np.arange(96) == 17, np.prod(np.delete(x[1], 17)), 0.0))
  np.testing.assert_array_equal(grad[2], np.zeros(96, np.float32))
  np.testing.assert_array_equal(grad[0], np.prod(x[0]) / x[0])
