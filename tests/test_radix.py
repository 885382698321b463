"""The radix selection (radix select + compaction + a sort of k), checked on CPU.

No GPU runs here: the selection functions are called directly (the Pallas kernel in
interpret mode), and ``dml.top_k`` runs with the CUDA branch forced on CPU and the
strategy chosen by name (``platform.choosing(branch="cuda", top_k=..., interpret=True)``).
The Pallas kernel's compile for an H100 is in tests/test_accelerator_structure.py.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _helpers import bits, x64
from jax import export
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from reference import ref_top_k

import dmljax as dml
from dmljax._src import platform, rank_keys, top_k
from dmljax._src.strategies import dispatch
from dmljax._src.strategies import radix as radix_select

DTYPES_32 = (
  np.float32,
  np.float16,
  ml_dtypes.bfloat16,
  np.int8,
  np.int16,
  np.int32,
  np.uint8,
  np.uint16,
  np.uint32,
)
DTYPES_64 = (np.float64, np.int64, np.uint64)
DIRECTIONS = ("decreasing", "increasing")
# Row lengths that are not multiples of the kernel's chunk, short and over one chunk.
LENGTHS = (37, radix_select.PALLAS_CHUNK + 88)


def _ks(n: int) -> tuple[int, ...]:
  return (1, 2, n // 2, n - 1, n)


def _sample(dtype: Any, shape: tuple[int, int], seed: int) -> np.ndarray:
  """Random bit patterns (NaN payloads included), the type's special values, and heavy ties."""
  rng = np.random.default_rng(seed)
  dtype = np.dtype(dtype)
  width = dtype.itemsize * 8
  raw = rng.integers(0, 1 << width, shape, dtype=np.uint64).astype(f"uint{width}").view(dtype)
  if jnp.issubdtype(dtype, jnp.floating):
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0], np.float64).astype(dtype)
    unsigned = np.dtype(f"uint{width}")
    quiet = np.array(np.nan, dtype).view(unsigned)
    sign = np.array(1 << (width - 1), unsigned)
    payloads = np.array([quiet | 1, quiet | 3, quiet | 1 | sign], unsigned).view(dtype)  # NaNs with payloads
    # Random NaNs made quiet (payload and sign kept): NumPy's reference warns on signalling ones.
    raw_bits = raw.view(unsigned)
    is_nan = (raw_bits & ~sign) > np.array(np.inf, dtype).view(unsigned)
    raw = np.where(is_nan, raw_bits | quiet, raw_bits).view(dtype)
    # Subnormals are left out: the rank keys tie them with zero on XLA:CPU (a rank_keys matter, not a
    # selection one; every path sees the same keys).
    magnitude = raw.view(unsigned) & ~sign
    subnormal = (magnitude != 0) & (magnitude < np.array(ml_dtypes.finfo(dtype).smallest_normal, dtype).view(unsigned))
    raw = np.where(subnormal, np.zeros_like(raw), raw)
    specials = np.concatenate([specials, payloads, np.array([ml_dtypes.finfo(dtype).max], dtype)])
    ties = rng.integers(-2, 3, shape).astype(dtype)
  else:
    info = np.iinfo(dtype)
    specials = np.array([info.min, info.max, 0, 1, info.max - 1], dtype)
    ties = rng.integers(max(info.min, -2), 3, shape).astype(dtype)
  pick = rng.integers(0, 3, shape)
  out = np.where(pick == 0, raw, np.where(pick == 1, rng.choice(specials, shape), ties))
  out[0] = specials[0]  # one row of a single value: all ties
  return out.astype(dtype)


def _key(x: np.ndarray, direction: str) -> jax.Array:
  return _keys(jnp.asarray(x), direction == "decreasing")


@functools.partial(jax.jit, static_argnums=1)
def _keys(x: jax.Array, descending: bool) -> jax.Array:
  return rank_keys.ascending_key(x) if descending else rank_keys.descending_key(x)


def _check(x: np.ndarray, k: int, direction: str, indices: Any) -> None:
  want_values, want_indices = ref_top_k(x, k, -1, direction)
  indices = np.asarray(indices)
  np.testing.assert_array_equal(indices, want_indices, err_msg=f"{x.dtype} {direction} k={k}")
  np.testing.assert_array_equal(bits(np.take_along_axis(x, indices, axis=-1)), bits(want_values))


@pytest.mark.parametrize("n", LENGTHS)
def test_radix_top_k_is_exact_for_every_32_bit_type(n: int) -> None:
  inputs = [(_sample(d, (3, n), 100 + i), direction) for i, d in enumerate(DTYPES_32) for direction in DIRECTIONS]
  keys = jnp.concatenate([_key(x, direction) for x, direction in inputs])  # one batch: 3 rows per input
  for k in _ks(n):
    got = np.asarray(jax.jit(lambda key, k=k: radix_select.radix_top_k(key, k))(keys))
    for row, (x, direction) in enumerate(inputs):
      _check(x, k, direction, got[3 * row : 3 * row + 3])


def test_radix_top_k_is_exact_for_64_bit_keys() -> None:
  n = LENGTHS[1]
  with x64():
    inputs = [(_sample(d, (3, n), 200 + i), direction) for i, d in enumerate(DTYPES_64) for direction in DIRECTIONS]
    keys = jnp.concatenate([_key(x, direction) for x, direction in inputs])
    assert keys.dtype == np.int64
    for k in _ks(n):
      got = np.asarray(jax.jit(lambda key, k=k: radix_select.radix_top_k(key, k))(keys))
      for row, (x, direction) in enumerate(inputs):
        _check(x, k, direction, got[3 * row : 3 * row + 3])


@pytest.mark.parametrize(("n", "k"), [(LENGTHS[0], LENGTHS[0] - 1), (LENGTHS[1], LENGTHS[1] // 2)])
def test_pallas_selection_in_interpret_mode_is_exact(n: int, k: int) -> None:
  """The kernel's (threshold, rank) per row equal the XLA passes', and the selection built on it is exact."""
  dtypes = (np.float32, ml_dtypes.bfloat16, np.int8, np.uint32)
  inputs = [(_sample(d, (3, n), 300 + i), direction) for i, d in enumerate(dtypes) for direction in DIRECTIONS]
  keys = jnp.concatenate([_key(x, direction) for x, direction in inputs])
  threshold, rank = jax.jit(lambda key: radix_select.radix_threshold(key, k))(keys)
  assert (np.asarray(rank) >= 1).all() and (np.asarray(rank) <= k).all()
  got = np.asarray(jax.jit(lambda key: radix_select.pallas_radix_top_k(key, k, interpret=True))(keys))
  for row, (x, direction) in enumerate(inputs):
    _check(x, k, direction, got[3 * row : 3 * row + 3])
  kernel = jax.jit(lambda key: radix_select.pallas_radix_threshold(key, k, interpret=True))(keys)
  np.testing.assert_array_equal(np.asarray(kernel[0]), np.asarray(threshold))
  np.testing.assert_array_equal(np.asarray(kernel[1]), np.asarray(rank))


@pytest.mark.parametrize("radix_bits", [2, 8])
def test_histogram_counting_is_exact(monkeypatch: pytest.MonkeyPatch, radix_bits: int) -> None:
  """The scatter-add counting variant, at other digit widths, selects exactly as the reference."""
  monkeypatch.setattr(radix_select, "RADIX_COUNTING", "histogram")
  n, k = LENGTHS[1], LENGTHS[1] // 3
  inputs = [(_sample(d, (3, n), 500 + i), "decreasing") for i, d in enumerate((np.float16, np.int32, np.uint8))]
  keys = jnp.concatenate([_key(x, direction) for x, direction in inputs])
  got = np.asarray(jax.jit(lambda key: radix_select.radix_top_k(key, k, radix_bits=radix_bits))(keys))
  for row, (x, direction) in enumerate(inputs):
    _check(x, k, direction, got[3 * row : 3 * row + 3])


def test_threshold_is_the_kth_largest_key_and_rank_counts_its_ties() -> None:
  keys = np.array([[5, 7, 7, 7, -3, 7, np.iinfo(np.int32).min, 9]], np.int32)
  # Sorted descending: 9, 7, 7, 7, 7, 5, -3, min.
  for k, (threshold, rank) in {1: (9, 1), 2: (7, 1), 4: (7, 3), 5: (7, 4), 6: (5, 1), 8: (-(1 << 31), 1)}.items():
    t, r = radix_select.radix_threshold(jnp.asarray(keys), k)
    assert (int(t[0]), int(r[0])) == (threshold, rank), k


# --- dml.top_k with the CUDA branch forced on CPU and a radix strategy chosen ---------------------------------


@pytest.fixture(params=["radix", "radix_pallas"])
def forced(request: pytest.FixtureRequest) -> Iterator[str]:
  """``dml.top_k`` runs the CUDA branch on CPU with the given strategy (Pallas in interpret mode)."""
  with platform.choosing(branch="cuda", top_k=request.param, interpret=True):
    yield request.param


def _ops(fn: Any, *args: Any) -> str:
  return jax.jit(fn).lower(*args).as_text()


def test_forced_branch_runs_the_radix_selection(forced: str) -> None:
  x = _sample(np.float32, (4, 50), 400)
  text = _ops(lambda x: dml.top_k(x, 5), x)
  assert "chlo.top_k" not in text and "scatter" in text
  for direction, axis in (("decreasing", 1), ("increasing", 0)):
    values, indices = jax.jit(lambda x, d=direction, a=axis: dml.top_k(x, 3, axis=a, direction=d))(x)
    want_values, want_indices = ref_top_k(x, 3, axis, direction)
    np.testing.assert_array_equal(np.asarray(indices), want_indices)
    np.testing.assert_array_equal(bits(values), bits(want_values))


def test_forced_branch_vmap_and_derivatives(forced: str) -> None:
  x = _sample(np.int8, (3, 40), 401).astype(np.float32)
  batched = jax.vmap(lambda row: dml.top_k(row, 4))(x)
  want_values, want_indices = ref_top_k(x, 4, -1, "decreasing")
  np.testing.assert_array_equal(np.asarray(batched[1]), want_indices)
  np.testing.assert_array_equal(bits(batched[0]), bits(want_values))
  tangent = np.random.default_rng(402).standard_normal(x.shape).astype(np.float32)
  _, value_tangent = jax.jvp(lambda x: dml.top_k(x, 4)[0], (x,), (tangent,))
  np.testing.assert_array_equal(np.asarray(value_tangent), np.take_along_axis(tangent, want_indices, axis=-1))
  grad = jax.grad(lambda x: jnp.sum(dml.top_k(x, 4)[0]))(x)
  expected = np.zeros_like(x)
  np.put_along_axis(expected, want_indices, 1.0, axis=-1)
  np.testing.assert_array_equal(np.asarray(grad), expected)


@pytest.mark.parametrize("kind", ["auto", "explicit"])
def test_forced_branch_along_a_sharded_axis(forced: str, kind: str) -> None:
  x = _sample(np.int16, (4, 64), 403).astype(np.float32)
  want_values, want_indices = ref_top_k(x, 5, -1, "increasing")
  if kind == "explicit":
    mesh = jax.make_mesh((2, 4), ("b", "x"))
  else:
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("b", "x"))
  sharding = NamedSharding(mesh, P("b", "x"))
  fn = jax.jit(lambda x: dml.top_k(x, 5, direction="increasing"))
  text = fn.lower(jax.device_put(x, sharding)).compile().as_text()
  assert "all-gather" in text  # per-shard candidates merged, not the whole row gathered by XLA
  for values, indices in (
    fn(jax.device_put(x, sharding)),
    jax.jit(lambda x: dml.top_k(x, 5, direction="increasing"), in_shardings=sharding)(x),
  ):
    np.testing.assert_array_equal(np.asarray(indices), want_indices)
    np.testing.assert_array_equal(bits(values), bits(want_values))


def test_forced_branch_exports_and_round_trips(forced: str) -> None:
  x = _sample(np.uint8, (3, 45), 404)
  fn = jax.jit(lambda x: dml.top_k(x, 6))
  exported = export.export(fn, platforms=("cpu",))(jax.ShapeDtypeStruct(x.shape, x.dtype))
  assert "chlo.top_k" not in exported.mlir_module()
  values, indices = export.deserialize(exported.serialize()).call(x)
  want_values, want_indices = ref_top_k(x, 6, -1, "decreasing")
  np.testing.assert_array_equal(np.asarray(indices), want_indices)
  np.testing.assert_array_equal(np.asarray(values), want_values)


def test_pallas_strategy_under_x64_traces_the_cuda_kernel_on_cpu() -> None:
  """Regression: under x64 the kernel's digit counts summed to int64 into its int32 loop carry, and
  ``lax.platform_dependent`` traces the CUDA kernel even on CPU, so ``dml.top_k`` failed there too."""
  x = _sample(np.float32, (3, 40), 406)
  with x64(), platform.choosing(top_k="radix_pallas"):
    jaxpr = str(jax.make_jaxpr(lambda x: dml.top_k(x, 5))(x))
    values, indices = dml.top_k(x, 5)
  assert "pallas_call" in jaxpr  # the CUDA branch's kernel was traced, not only the CPU one
  want_values, want_indices = ref_top_k(x, 5, -1, "decreasing")
  np.testing.assert_array_equal(np.asarray(indices), want_indices)
  np.testing.assert_array_equal(bits(values), bits(want_values))


# --- the choice of strategy ----------------------------------------------------------------------------------


def test_an_unknown_strategy_is_refused_with_the_names() -> None:
  with platform.choosing(top_k="bitonic"), pytest.raises(ValueError, match="radix_pallas"):
    dml.top_k(np.arange(6.0, dtype=np.float32), 2)


def test_a_new_choice_retraces_the_library_and_clears_no_cache() -> None:
  """The library's own jitted top_k traces again under a new choice; a caller's compiled programs stay."""
  x = np.arange(24, dtype=np.int32).reshape(2, 12)
  unrelated = jax.jit(lambda a: a * 2)
  unrelated(x)
  cached = unrelated._cache_size()
  before = top_k._top_k._cache_size()
  found = {}
  with platform.forced("default"):
    for name in ("sorted_keys", "radix", "sorted_keys"):
      with platform.choosing(top_k=name):
        found[name] = "chlo.top_k" in _ops(lambda x: dml.top_k(x, 3), x)
        np.testing.assert_array_equal(np.asarray(dml.top_k(x, 3)[1]), [[11, 10, 9], [11, 10, 9]])
  assert found == {"sorted_keys": True, "radix": False}
  assert top_k._top_k._cache_size() == before + 2  # one program per choice, the third call reused the first
  assert unrelated._cache_size() == cached


def test_every_named_strategy_is_exact_on_a_forced_branch() -> None:
  """Each strategy by name, with NaNs, signed zeros and ties, on a platform's branch forced on CPU.

  A forced strategy runs the same code on every branch, so each takes one branch, the branches in turn.
  """
  x = _sample(np.float32, (3, 1100), 407)
  for number, name in enumerate(sorted(dispatch.BY_NAME)):
    branch = platform.BRANCHES[number % len(platform.BRANCHES)]
    with platform.choosing(branch=branch, top_k=name, interpret=True):
      for direction in DIRECTIONS:
        k = 1 if name == "peak_reduction" else 7
        values, indices = dml.top_k(x, k, direction=direction)
        want_values, want_indices = ref_top_k(x, k, -1, direction)
        np.testing.assert_array_equal(np.asarray(indices), want_indices, err_msg=f"{name} {branch} {direction}")
        np.testing.assert_array_equal(bits(values), bits(want_values), err_msg=f"{name} {branch} {direction}")


def test_a_strategy_that_is_not_exact_for_the_input_is_refused() -> None:
  """XLA's GPU kernel keys exist for types of up to 16 bits and float32 only: int32 would lose precision."""
  x = np.arange(1 << 25, (1 << 25) + 2048, dtype=np.int32).reshape(2, 1024)
  with platform.choosing(branch="cuda", top_k="gpu_kernel"), pytest.raises(ValueError, match="not exact"):
    dml.top_k(x, 3)
  with platform.choosing(branch="cuda", top_k="peak_reduction"), pytest.raises(ValueError, match="not exact"):
    dml.top_k(x, 3)
