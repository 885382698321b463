"""Values that cross devices or pass through a sort come back with their bits: NaN payloads, signalling NaNs, -0.0.

XLA:CPU all-gathers and sorts bfloat16 as float32 (a quieting round trip), and XLA's partitioner turns a
gather from a split table into masked gathers and an all-reduce SUM (-0.0 + 0.0 is +0.0). Each test here
failed before the values moved as integers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import BFLOAT16, assert_bitwise_equal, load_example, spy_on, x64
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import dmljax as dml
from dmljax._src import gather_nd, platform, value_bits
from dmljax._src.strategies import sort


def _mesh(explicit: bool) -> jax.sharding.Mesh:
  axis_type = AxisType.Explicit if explicit else AxisType.Auto
  return jax.make_mesh((4,), ("d",), axis_types=(axis_type,), devices=jax.devices()[:4])


def _placed(fn: Any, x: np.ndarray, spec: P, explicit: bool, *rest: np.ndarray) -> Any:
  sharding = NamedSharding(_mesh(explicit), spec)
  if explicit:
    return jax.jit(fn)(jax.device_put(x, sharding), *rest)
  return jax.jit(fn, in_shardings=(sharding, *(None for _ in rest)))(x, *rest)


def _bf16_row_with_payloads() -> np.ndarray:
  x = np.random.default_rng(22).standard_normal((1, 4096)).astype(BFLOAT16)
  bits = x.view(np.uint16)
  bits[0, 100], bits[0, 2000], bits[0, 3000] = 0x7F8C, 0xFFA3, 0x7F81  # two signalling NaNs, a negative quiet one
  bits[0, 5] = 0x8000  # -0.0
  return x


@pytest.fixture(autouse=True)
def _choice_restored() -> Iterator[None]:
  yield
  platform.force(None)


@pytest.mark.parametrize("branch", [None, "default"])
@pytest.mark.parametrize("explicit", [False, True], ids=["auto", "explicit"])
def test_sharded_top_k_keeps_nan_payloads(explicit: bool, branch: platform.Branch | None) -> None:
  """A bfloat16 row over 4 devices, k=40: candidates all-gathered as bits, the merge reading bits."""
  x = _bf16_row_with_payloads()
  with platform.choosing(branch=branch, interpret=True):
    values, indices = _placed(lambda x: dml.top_k(x, 40), x, P(None, "d"), explicit)
  want_indices = np.asarray(dml.top_k(x, 40)[1])
  np.testing.assert_array_equal(np.asarray(indices), want_indices)
  assert_bitwise_equal(values, np.take_along_axis(x, want_indices, axis=1), "sharded top_k values")
  assert_bitwise_equal(values[:, :3], x[:, [100, 2000, 3000]], "the NaNs first, payloads kept")


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("explicit", [False, True], ids=["auto", "explicit"])
def test_gather_nd_from_a_row_sharded_table_keeps_bits(explicit: bool, deterministic: bool) -> None:
  x = np.arange(16, dtype=np.float32).reshape(8, 2)
  bits = x.view(np.uint32)
  bits[1, 0], bits[6, 1], bits[3, 1] = 0x80000000, 0x7F800001, 0xFFC00123  # -0.0, a signalling NaN, a payload
  indices = np.array([[1], [6], [3], [0]], np.int32)
  got = _placed(
    lambda x, i: dml.gather_nd(x, i, deterministic=deterministic),
    x,
    P("d", None),
    explicit,
    indices,
  )
  assert_bitwise_equal(got, x[indices[:, 0]], "gather_nd from a row-sharded table")


def test_gather_nd_still_differentiates_after_reading_bits() -> None:
  x = np.arange(8, dtype=np.float32).reshape(4, 2)
  indices = np.array([[1], [1], [3]], np.int32)
  grad = jax.grad(lambda x: dml.gather_nd(x, indices).sum())(x)
  np.testing.assert_array_equal(np.asarray(grad), [[0, 0], [2, 2], [0, 0], [1, 1]])
  tangent = jax.jvp(lambda x: dml.gather_nd(x, indices), (x,), (2 * x,))[1]
  np.testing.assert_array_equal(np.asarray(tangent), 2 * x[indices[:, 0]])


@pytest.fixture
def narrow_lax_top_k(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
  """Rows longer than 16 take the sort that rows longer than int32 can index take (read at trace time)."""
  monkeypatch.setattr(sort, "LAX_TOP_K_LARGEST_INDEX", 15)
  jax.clear_caches()
  yield
  jax.clear_caches()


@pytest.mark.usefixtures("narrow_lax_top_k")
@pytest.mark.parametrize("largest_first", [True, False])
def test_wide_rows_sort_carries_bfloat16_payloads(largest_first: bool) -> None:
  x = np.linspace(-4, 4, 40).astype(BFLOAT16).reshape(1, 40)
  bits = x.view(np.uint16)
  bits[0, 3], bits[0, 17], bits[0, 30] = 0x7FC1, 0xFFA3, 0x7F81
  direction = "decreasing" if largest_first else "increasing"
  values, indices = dml.top_k(x, 40, direction=direction)
  assert_bitwise_equal(values, np.take_along_axis(x, np.asarray(indices), axis=1), "wide_rows values")
  nans = [3, 17, 30]
  np.testing.assert_array_equal(np.asarray(indices)[0, :3] if largest_first else np.asarray(indices)[0, -3:], nans)


@pytest.mark.parametrize("k", [3, 40])
def test_sorted_with_values_carries_bfloat16_payloads(k: int) -> None:
  """TPU's short-row strategy sorts (key, index, value): the values ride along as bits."""
  x = np.linspace(-4, 4, 40).astype(BFLOAT16).reshape(1, 40)
  bits = x.view(np.uint16)
  bits[0, 3], bits[0, 17], bits[0, 30] = 0x7FC1, 0xFFA3, 0x7F81
  with platform.choosing(top_k="sorted_with_values"):
    values, indices = jax.jit(lambda x: dml.top_k(x, k))(x)
  assert_bitwise_equal(values, np.take_along_axis(x, np.asarray(indices), axis=1), "sorted_with_values")
  assert_bitwise_equal(values[:, :3], x[:, [3, 17, 30]], "the NaNs first, payloads kept")


@pytest.mark.parametrize("dtype", [BFLOAT16, jnp.float4_e2m1fn, jnp.float8_e4m3fnuz, jnp.float8_e8m0fnu, np.float64])
def test_values_move_as_unsigned_integers_of_their_width(dtype: Any) -> None:
  x = np.arange(16, dtype=np.uint8).astype(np.float32).astype(dtype)
  with x64():
    moved = value_bits.to_bits(jnp.asarray(x))
    assert moved.dtype.kind == "u"
    assert_bitwise_equal(value_bits.from_bits(moved, np.dtype(dtype)), x, str(dtype))


@pytest.mark.parametrize("axis", [0, 1], ids=["batch", "sequence"])
def test_partitioning_rules_keep_a_thread_local_x64(axis: int) -> None:
  """XLA calls custom_partitioning's rule on its own thread, outside a ``jax.enable_x64`` block: the rule's body
  was traced with int64 keys cut to int32 (wrong indices, or a crash while compiling)."""
  rng = np.random.default_rng(64)
  x = rng.standard_normal((4, 40)) * 10.0 ** rng.integers(-300, 300, (4, 40))
  sharding = NamedSharding(_mesh(False), P(*([None] * axis), "d"))
  with x64():
    values, indices = jax.jit(lambda x: dml.top_k(x, 5, direction="increasing"), in_shardings=sharding)(x)
    argmin = jax.jit(lambda x: dml.argmin(x.reshape(4, 4, 10), (1, 2)), in_shardings=sharding)(x)
  want = np.argsort(x, axis=1, kind="stable")[:, :5]
  np.testing.assert_array_equal(np.asarray(indices), want)
  assert_bitwise_equal(values, np.take_along_axis(x, want, axis=1), "float64 values")
  np.testing.assert_array_equal(np.asarray(argmin), np.argmin(x, axis=1))


collective_bytes = load_example("local_cluster").collective_bytes


@pytest.mark.parametrize("dtype", [np.float32, BFLOAT16])
def test_chunks_on_automatic_axes_move_only_candidates(dtype: Any) -> None:
  """The selection by chunks (ROCm, TPUs on automatic axes): each device selects from the chunk it holds.

  XLA's partitioner replicated the chunk matrix for the per-chunk TopK (an all-gather of every chunk's keys,
  the whole row) before; now only the 4 chunks' k candidates, and the k results, cross devices."""
  x = np.random.default_rng(9).standard_normal((1, 4096)).astype(dtype)
  sharding = NamedSharding(_mesh(False), P(None, "d"))
  with platform.choosing(branch="default"):
    compiled = jax.jit(lambda x: dml.top_k(x, 8), in_shardings=sharding).lower(x).compile()
    values, indices = compiled(x)
  want_values, want_indices = dml.top_k(x, 8)
  np.testing.assert_array_equal(np.asarray(indices), np.asarray(want_indices))
  assert_bitwise_equal(values, np.asarray(want_values), "by chunks")
  assert 0 < collective_bytes(compiled) < x.nbytes // 4  # less than one device's chunk


def test_deterministic_gather_differentiates_by_its_sort_and_scan(monkeypatch: pytest.MonkeyPatch) -> None:
  """``deterministic=True`` changes the derivative only: the values are the plain gather's bits."""
  reached = spy_on(((gather_nd, "_gather_nd_deterministic"),), monkeypatch)
  x = np.arange(8, dtype=np.float32).reshape(4, 2)
  indices = np.array([[1], [1], [3]], np.int32)
  jax.jit(lambda x: dml.gather_nd(x, indices, deterministic=True)).lower(x)
  assert not reached
  grad = jax.jit(jax.grad(lambda x: dml.gather_nd(x, indices, deterministic=True).sum()))(x)
  assert reached
  np.testing.assert_array_equal(np.asarray(grad), [[0, 0], [2, 2], [0, 0], [1, 1]])
