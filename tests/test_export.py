"""jax.export (issue 4, point 5).

Every operator, on both paths, exports to StableHLO for CPU, CUDA and TPU at
once, serializes, deserializes and runs on CPU with exactly the results of the
unexported call. The multi-platform module lowers top-k's CPU fast path and its
portable path side by side (``lax.platform_dependent``) and picks one when run.
"""

import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import export
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import dmljax as dml
from dmljax._src import platform

F32, U32, I64 = dml.DataType.FLOAT32, dml.DataType.UINT32, dml.DataType.INT64
_RNG = np.random.default_rng(5)
PLATFORMS = ("cpu", "cuda", "tpu")


def _values(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
  return _RNG.integers(-4, 5, shape).astype(dtype)


def _indices(shape: tuple[int, ...], low: int, high: int) -> np.ndarray:
  return _RNG.integers(low, high, shape).astype(np.int32)


NAN_ROW = np.array([[1.0, np.nan, -0.0, 0.0, np.inf, 1.0]], np.float32)

CASES: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
  ("top_k_f32", lambda x: dml.top_k(x, 4), (np.concatenate([NAN_ROW, _values((3, 6), np.float32)]),)),
  (
    "top_k_bf16_increasing",
    lambda x: dml.top_k(x, 3, axis=0, direction="increasing"),
    (_values((5, 4), ml_dtypes.bfloat16),),
  ),
  ("top_k_int8", lambda x: dml.top_k(x, 2, index_dtype=jnp.int32), (_values((3, 5), np.int8),)),
  ("top_k_uint32", lambda x: dml.top_k(x, 5), (_values((2, 7), np.int64).astype(np.uint32),)),
  ("argmin", lambda x: dml.argmin(x, (0, 2), ties="last"), (_values((3, 4, 2), np.float32),)),
  ("argmax_f16", lambda x: dml.argmax(x, 1), (_values((3, 5), np.float16),)),
  *[
    (f"reduce_{f.name}", lambda x, f=f: dml.reduce(x, f, 1), (_values((3, 4), np.float32) + 5,))
    for f in dml.ReduceFunction
  ],
  ("reduce_int16_multiply", lambda x: dml.reduce(x, "multiply", (0, 1)), (_values((3, 4), np.int16),)),
  ("gather_nd", lambda x, i: dml.gather_nd(x, i), (_values((4, 3), np.float32), _indices((5, 1), -6, 6))),
  (
    "gather_nd_batch",
    lambda x, i: dml.gather_nd(x, i, batch_dims=1),
    (_values((2, 3, 4), np.int8), _indices((2, 2, 2), -5, 5)),
  ),
  (
    "one_hot",
    lambda i, v: dml.one_hot(i, 5, axis=0, on_value=v[1], off_value=v[0]),
    (_indices((6,), -7, 7), _values((2,), np.float32)),
  ),
  (
    "execute_top_k1",
    lambda x: dml.execute(
      dml.TopK1Desc(dml.TensorDesc(F32, (2, 6)), dml.TensorDesc(F32, (2, 3)), dml.TensorDesc(U32, (2, 3)), 1, 3, 0), x
    ),
    (_values((2, 6), np.float32),),
  ),
  (
    "execute_argmax",
    lambda x: dml.execute(dml.ArgMaxDesc(dml.TensorDesc(F32, (3, 3)), dml.TensorDesc(U32, (1, 1)), (0, 1), 1), x),
    (_values((3, 3), np.float32),),
  ),
  (
    "execute_reduce",
    lambda x: dml.execute(
      dml.ReduceDesc(dml.ReduceFunction.L2, dml.TensorDesc(F32, (2, 3)), dml.TensorDesc(F32, (2, 1)), (1,)), x
    ),
    (_values((2, 3), np.float32),),
  ),
  (
    "execute_gather_nd1",
    lambda x, i: dml.execute(
      dml.GatherND1Desc(dml.TensorDesc(F32, (2, 3)), dml.TensorDesc(U32, (2, 1)), dml.TensorDesc(F32, (1, 2)), 2, 2, 1),
      x,
      i,
    ),
    (_values((2, 3), np.float32), np.array([[2], [7]], np.uint32)),
  ),
  (
    "execute_one_hot",
    lambda i, v: dml.execute(
      dml.OneHotDesc(dml.TensorDesc(U32, (3, 1)), dml.TensorDesc(F32, (1, 2)), dml.TensorDesc(F32, (3, 4)), 1), i, v
    ),
    (np.array([[0], [3], [4]], np.uint32), _values((1, 2), np.float32)),
  ),
  # Rows long enough for CUDA's one-pass Pallas kernel under jit: exported, that branch holds XLA's selection.
  ("top_k_long_rows", lambda x: dml.top_k(x, 8, direction="increasing"), (_values((2, 1100), np.int16),)),
]


@pytest.mark.parametrize(("name", "fn", "args"), CASES, ids=[c[0] for c in CASES])
def test_export_for_cpu_cuda_tpu_round_trips(name: str, fn: Callable[..., Any], args: tuple[np.ndarray, ...]) -> None:
  del name
  shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
  exported = export.export(jax.jit(fn), platforms=PLATFORMS)(*shapes)
  assert exported.platforms == PLATFORMS
  assert "stablehlo" in exported.mlir_module()
  restored = export.deserialize(exported.serialize())
  assert restored.platforms == PLATFORMS
  got, want = restored.call(*args), jax.jit(fn)(*args)
  got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
  assert len(got_leaves) == len(want_leaves)
  for g, w in zip(got_leaves, want_leaves, strict=True):
    assert g.dtype == w.dtype
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_exported_top_k_is_differentiable() -> None:
  x = _values((3, 6), np.float32) + np.linspace(0, 0.5, 18, dtype=np.float32).reshape(3, 6)

  def loss(x: jax.Array) -> jax.Array:
    return jnp.sum(dml.top_k(x, 2)[0] * jnp.array([[1.0, 2.0]], jnp.float32))

  exported = export.export(jax.jit(loss), platforms=PLATFORMS)(jax.ShapeDtypeStruct(x.shape, x.dtype))
  restored = export.deserialize(exported.serialize(vjp_order=1))
  np.testing.assert_array_equal(jax.grad(restored.call)(x), jax.grad(loss)(x))


@pytest.mark.parametrize("spec", [P("b"), P("b", "x"), P(None, ("b", "x"))], ids=str)
def test_program_sharded_over_explicit_axes_exports(spec: P) -> None:
  """On explicit axes the sharded top-k is a shard_map, which serializes (no partitioning callback)."""
  mesh = jax.make_mesh((2, 4), ("b", "x"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
  sharding = NamedSharding(mesh, spec)
  x = _values((8, 64), np.float32)

  def fn(x: jax.Array) -> Any:
    return dml.top_k(x, 5), dml.argmax(x, 1, ties="last")

  exported = export.export(jax.jit(fn))(jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding))
  assert exported.nr_devices == 8
  got = export.deserialize(exported.serialize()).call(jax.device_put(x, sharding))
  want = fn(x)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
  if spec[0] == "b":
    assert all(leaf.sharding.spec[0] == "b" for leaf in jax.tree.leaves(got))


def test_program_sharded_over_automatic_axes_exports_where_top_k_selects_in_chunks() -> None:
  """Off CPU, CUDA and ROCm (TPUs), automatic axes select in device-count chunks: no Python rule, so it serializes.

  Exported for TPU, the module holds no partitioning callback; with the non-CPU branch forced on CPU, the
  exported program runs and equals the unsharded call. (On CPU the rule is custom_partitioning's callback, which
  jax.export refuses: explicit axes export there.)
  """
  sharding = NamedSharding(Mesh(np.array(jax.devices()).reshape(2, 4), ("b", "x")), P("b", "x"))
  x = _values((8, 64), np.float32)
  spec = jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

  def fn(x: jax.Array) -> Any:
    return dml.top_k(x, 5), dml.top_k(x, 3, direction="increasing")

  for_tpu = export.export(jax.jit(fn), platforms=("tpu",))(spec)
  assert for_tpu.nr_devices == 8 and "CustomSPMDPartitioning" not in for_tpu.mlir_module()
  # The rows cut in 8 chunks of 8, one per device (the relayout moves the values as their bits).
  assert "tensor<8x8x8xui32>" in for_tpu.mlir_module()
  assert export.deserialize(for_tpu.serialize()).platforms == ("tpu",)
  with platform.forced("default"):
    # A function of its own: ``fn`` was traced above with every platform's branch, and a choice is read while tracing.
    restored = export.deserialize(export.export(jax.jit(lambda x: fn(x)))(spec).serialize())
    got = restored.call(jax.device_put(x, sharding))
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(fn(x)), strict=True):
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("platforms", [PLATFORMS, ("tpu",)], ids="+".join)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16], ids=lambda d: np.dtype(d).name)
def test_top_k_exports_with_x64(dtype: Any, platforms: tuple[str, ...]) -> None:
  """With ``jax_enable_x64`` on, the TPU branch's DMA kernel (a Mosaic kernel: 32-bit types only) exports.

  Rows of 1100 take the TPU table's ``tpu_kernel`` row, whose float values with merged keys (NaN payloads, the
  zeros' signs) the kernel reads; exported for CPU too, the program runs here with the unexported call's bits.
  """
  x = _values((4, 1100), dtype)
  bits = x.view(f"u{x.dtype.itemsize}")
  nan = np.frombuffer(np.array([np.nan], np.float32).astype(dtype).tobytes(), bits.dtype)[0]
  bits[:, ::97] = nan | np.arange(bits[:, ::97].size, dtype=bits.dtype).reshape(4, -1) % 3  # NaN payloads
  bits[1, 5] = 1 << (8 * x.dtype.itemsize - 1)  # -0.0

  def fn(x: jax.Array) -> Any:
    return dml.top_k(x, 5)

  def kernels(module: str) -> list[str]:
    """The Mosaic kernels' serialized modules in an exported module."""
    return re.findall(r'tpu_custom_call.*?backend_config = "([^"]*)"', module, re.S)

  spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
  with jax.enable_x64(True):
    exported = export.export(jax.jit(fn), platforms=platforms)(spec)
    restored = export.deserialize(exported.serialize())
  # The kernels are there (Mosaic refused a 64-bit value in them before: the export raised), as many as with x64
  # off. Their serialized bytes are not compared: they carry names that depend on what the process lowered before.
  assert kernels(exported.mlir_module())
  assert len(kernels(exported.mlir_module())) == len(
    kernels(export.export(jax.jit(fn), platforms=platforms)(spec).mlir_module())
  )
  if "cpu" not in platforms:
    return
  with jax.enable_x64(True):
    got, want = restored.call(x), jax.jit(fn)(x)
  for g, w in zip(got, want, strict=True):
    assert g.dtype == w.dtype
    np.testing.assert_array_equal(np.asarray(g).view(np.uint8), np.asarray(w).view(np.uint8))
