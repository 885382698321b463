"""The small-array float path of top_k on CPU (strategies.cpu.float_view).

Where the rank key would not be staged (below MIN_STAGED_SIZE elements, or rows neither chunked nor
extracted), and below MAX_PLAIN_FLOAT_SIZE on rows of at least MIN_PLAIN_FLOAT_ROW, floats are selected
through their canonical float (-0.0 as +0.0, NaNs as the positive NaN; negated for INCREASING) instead of
the integer rank key. Checked against the NumPy reference on heavy ties, NaNs of both signs and several
payloads, signed zeros and infinities, and under vmap, grad, jvp and explicit sharding.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from reference import ref_top_k
from test_fast_paths import _bits, _tied

import dmljax as dml
from dmljax._src import platform
from dmljax._src.strategies import cpu
from dmljax._src.strategies.case import Case

_SMALL = [((256, 8), 2, -1), ((8, 1000), 40, -1), ((3, 5), 5, -1), ((1, 999), 7, -1), ((40, 6), 3, 0), ((7,), 7, 0)]
# Few long rows below MAX_PLAIN_FLOAT_SIZE take the plain path too; (16, 4096) is the staged selection.
_FEW_LONG_ROWS = [((2, 9000), 17, -1), ((3, 1024, 7), 2, 1)]
_STAGED = [((16, 4096), 8, -1), ((256, 64), 2, -1)]
# Rows the staged selection would not help either (no chunking, k > 2) take the plain path at any size.
_UNSTAGED = [((512, 64), 4, -1)]


@pytest.mark.sample(0)  # every value of each parameter once by default; the whole product with -m long
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("direction", ["decreasing", "increasing"])
def test_small_float_top_k_matches_reference(dtype: type, direction: str) -> None:
  rng = np.random.default_rng(20)
  for shape, k, axis in _SMALL + _FEW_LONG_ROWS + _STAGED + _UNSTAGED:
    moved = shape[:axis] + shape[axis + 1 :] + (shape[axis],) if axis != -1 else shape
    assert cpu.float_view_pays(Case(np.dtype(dtype), moved, k, True)) == ((shape, k, axis) not in _STAGED)
    x = _tied(rng, shape, np.dtype(dtype))
    values, indices = dml.top_k(jnp.asarray(x), k, axis=axis, direction=direction, index_dtype=jnp.int32)
    ref_values, ref_indices = ref_top_k(x, k, axis % len(shape), direction)
    np.testing.assert_array_equal(np.asarray(indices), ref_indices, err_msg=f"{shape} k={k}")
    np.testing.assert_array_equal(_bits(np.asarray(values)), _bits(ref_values), err_msg=f"{shape} k={k}")


def test_small_path_agrees_with_the_rank_key_path() -> None:
  rng = np.random.default_rng(21)
  x = jnp.asarray(_tied(rng, (64, 50), np.dtype(np.float32)))
  for largest_first in (True, False):
    case = Case.of(x, 9, largest_first)
    np.testing.assert_array_equal(np.asarray(cpu.float_view(x, case)[1]), np.asarray(cpu.key_view(x, case)[1]))


def test_small_path_compiles_to_one_elementwise_pass_and_top_k() -> None:
  x = jnp.ones((256, 8), jnp.float32)
  with platform.choosing(cpu_kernel=False):  # the XLA path (the compiled kernel's tests: tests/test_cpu_kernel.py)
    text = jax.jit(lambda x: dml.top_k(x, 2, index_dtype=jnp.int32)).lower(x).compile().as_text()
  assert "shift-right-arithmetic" not in text  # no integer key round trip
  assert text.count('custom_call_target="TopK"') == 1


def test_small_path_under_vmap_grad_and_jvp() -> None:
  rng = np.random.default_rng(22)
  x = jnp.asarray(_tied(rng, (6, 4, 30), np.dtype(np.float32)))
  for direction in ("decreasing", "increasing"):
    mapped = jax.vmap(lambda r, d=direction: dml.top_k(r, 3, direction=d, index_dtype=jnp.int32))(x)
    direct = dml.top_k(x, 3, direction=direction, index_dtype=jnp.int32)
    np.testing.assert_array_equal(np.asarray(mapped[1]), np.asarray(direct[1]))
  y = jnp.asarray(rng.standard_normal((5, 12), dtype=np.float32))
  grad = jax.grad(lambda y: jnp.sum(dml.top_k(y, 2, index_dtype=jnp.int32)[0] * jnp.float32(3)))(y)
  expected = np.zeros((5, 12), np.float32)
  np.put_along_axis(expected, np.argsort(-np.asarray(y), axis=-1, kind="stable")[:, :2], np.float32(3), axis=-1)
  np.testing.assert_array_equal(np.asarray(grad), expected)
  t = jnp.asarray(rng.standard_normal((5, 12), dtype=np.float32))
  (_, i), (tv, _) = jax.jvp(lambda y: dml.top_k(y, 4, index_dtype=jnp.int32), (y,), (t,))
  np.testing.assert_array_equal(np.asarray(tv), np.take_along_axis(np.asarray(t), np.asarray(i), axis=-1))


def test_small_path_with_explicit_sharding() -> None:
  mesh = jax.make_mesh((4, 2), ("b", "v"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
  rng = np.random.default_rng(23)
  x = _tied(rng, (8, 64), np.dtype(np.float32))
  for spec in (P("b", None), P("b", "v")):
    placed = jax.device_put(jnp.asarray(x), NamedSharding(mesh, spec))
    with jax.set_mesh(mesh):
      values, indices = jax.jit(lambda a: dml.top_k(a, 5, index_dtype=jnp.int32))(placed)
    ref_values, ref_indices = ref_top_k(x, 5, 1, "decreasing")
    np.testing.assert_array_equal(np.asarray(indices), ref_indices)
    np.testing.assert_array_equal(_bits(np.asarray(values)), _bits(ref_values))
