"""gather_nd's gather in CLIP mode: negative signed indices are wrapped once by the library, every other
out-of-range coordinate is clamped by the gather itself (unsigned ones are still capped first). Checked
against the NumPy reference on every integer width with indices far out of range, under vmap, grad and
explicit sharding, and for its cost: the same floating-point operation count as native ``x[i]``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import x64
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from reference import ref_gather_nd

import dmljax as dml


def _indices(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], size: int) -> np.ndarray:
  """In-range, negative in [-size, -1], below -size and above size, and the type's extremes."""
  info = np.iinfo(dtype)
  pool = [0, 1, size - 1, size, size + 3, info.max, info.max - 1]
  if info.min < 0:
    pool += [-1, -size, max(info.min, -size - 2), info.min, info.min + 1]
  pool = [p for p in pool if info.min <= p <= info.max]
  return rng.choice(np.array(pool, dtype), shape)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32])
def test_clip_gather_matches_reference_far_out_of_range(dtype: type) -> None:
  rng = np.random.default_rng(30)
  x = rng.standard_normal((7, 5, 3)).astype(np.float32)
  for indices_shape, batch_dims in (((11, 1), 0), ((4, 6, 2), 0), ((7, 9, 1), 1), ((7, 2, 2), 1)):
    size = x.shape[batch_dims]
    indices = _indices(rng, np.dtype(dtype), indices_shape, size)
    got = dml.gather_nd(jnp.asarray(x), jnp.asarray(indices), batch_dims=batch_dims)
    np.testing.assert_array_equal(np.asarray(got), ref_gather_nd(x, indices, batch_dims))


def test_clip_gather_with_64_bit_indices() -> None:
  rng = np.random.default_rng(31)
  x = rng.standard_normal((9, 4)).astype(np.float32)
  with x64():
    for dtype in (np.int64, np.uint64):
      indices = _indices(rng, np.dtype(dtype), (13, 1), 9)
      got = dml.gather_nd(jnp.asarray(x), jnp.asarray(indices))
      np.testing.assert_array_equal(np.asarray(got), ref_gather_nd(x, indices, 0))


def test_clip_gather_gradient_accumulates_at_the_clamped_rows() -> None:
  x = jnp.asarray(np.arange(12, dtype=np.float32).reshape(4, 3))
  indices = jnp.asarray(np.array([[9], [-1], [3], [-9], [0], [100]], np.int32))  # rows 3, 3, 3, 0, 0, 3
  grad = jax.grad(lambda x: jnp.sum(dml.gather_nd(x, indices) * jnp.float32(2)))(x)
  np.testing.assert_array_equal(np.asarray(grad), np.array([[4] * 3, [0] * 3, [0] * 3, [8] * 3], np.float32))
  per_example = jax.vmap(lambda t, i: dml.gather_nd(t, i))(jnp.stack([x, -x]), jnp.stack([indices, indices[::-1]]))
  np.testing.assert_array_equal(np.asarray(per_example[0]), ref_gather_nd(np.asarray(x), np.asarray(indices), 0))
  np.testing.assert_array_equal(np.asarray(per_example[1]), ref_gather_nd(-np.asarray(x), np.asarray(indices[::-1]), 0))


def test_clip_gather_with_explicit_sharding() -> None:
  mesh = jax.make_mesh((8,), ("b",), axis_types=(jax.sharding.AxisType.Explicit,))
  rng = np.random.default_rng(32)
  x = rng.standard_normal((8, 6, 4)).astype(np.float32)
  indices = _indices(rng, np.dtype(np.int32), (8, 5, 1), 6)
  placed_x = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("b")))
  placed_i = jax.device_put(jnp.asarray(indices), NamedSharding(mesh, P("b")))
  with jax.set_mesh(mesh):
    got = jax.jit(lambda a, i: dml.gather_nd(a, i, batch_dims=1))(placed_x, placed_i)
  np.testing.assert_array_equal(np.asarray(got), ref_gather_nd(x, indices, 1))


def test_small_gather_costs_what_native_indexing_costs() -> None:
  """XLA's CPU client runs programs under 1000 estimated operations inline: a small gather must not cross it."""
  x, i = jnp.ones((1000, 64), jnp.float32), jnp.ones((256, 1), jnp.int32)

  def flops(f: object) -> float:
    return float(jax.jit(f).lower(x, i).compile().cost_analysis().get("flops", 0.0))

  assert flops(lambda x, i: dml.gather_nd(x, i)) <= flops(lambda x, i: x[i[:, 0]])
