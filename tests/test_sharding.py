"""Sharding on 8 CPU devices (issue 4, points 3 and 4).

tests/conftest.py splits the host into 8 devices before JAX starts. Every
operator runs on a 2x4 mesh with automatic axes (``jax.sharding.Mesh``) and on
one with explicit axes, with inputs sharded along
a batch axis and along the operated axis, both through ``jax.jit``'s
``in_shardings`` and through inputs placed with ``jax.device_put``; results are
compared exactly with the unsharded run. Inputs are small integers (as floats),
so ties are everywhere and every float sum is exact in any order (sums of exponentials
are not: LOG_SUM_EXP is compared to a few ulps). The top-k that automatic axes take where XLA
cannot call custom_partitioning's rule (TPUs: a selection in device-count chunks) is forced on CPU.
"""

import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _helpers import load_example, maximum_reduction_lengths
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from reference import ref_extreme

import dmljax as dml
from dmljax._src import platform, selection

F32, U32 = dml.DataType.FLOAT32, dml.DataType.UINT32
collective_bytes = load_example("local_cluster").collective_bytes
_RNG = np.random.default_rng(19271)


def _ties(shape: tuple[int, ...]) -> np.ndarray:
  return _RNG.integers(-3, 4, shape).astype(np.float32)


def _indices(shape: tuple[int, ...], low: int, high: int) -> np.ndarray:
  return _RNG.integers(low, high, shape).astype(np.int32)


def test_eight_cpu_devices_and_both_kinds_of_mesh() -> None:
  assert len(jax.devices()) == 8, "tests/conftest.py must set --xla_force_host_platform_device_count=8"
  assert _mesh("auto").axis_types == (AxisType.Auto, AxisType.Auto)
  assert _mesh("explicit").axis_types == (AxisType.Explicit, AxisType.Explicit)


def _mesh(kind: str) -> Mesh:
  if kind == "explicit":
    return jax.make_mesh((2, 4), ("b", "x"), axis_types=(AxisType.Explicit,) * 2)
  return Mesh(np.array(jax.devices()).reshape(2, 4), ("b", "x"))


X = _ties((8, 16, 8))
TOP_K1 = dml.TopK1Desc(
  dml.TensorDesc(F32, X.shape), dml.TensorDesc(F32, (8, 6, 8)), dml.TensorDesc(U32, (8, 6, 8)), 1, 6, "increasing"
)
REDUCE_DESC = dml.ReduceDesc(
  dml.ReduceFunction.ARGMAX, dml.TensorDesc(F32, X.shape), dml.TensorDesc(U32, (8, 1, 1)), (1, 2)
)


def _one_hot(indices_shape: tuple[int, ...], depth: int) -> Callable[[Any, Any], Any]:
  """ONE_HOT along the last axis, through its descriptor (the functional form's signature is changing)."""
  rank = len(indices_shape)
  desc = dml.OneHotDesc(
    dml.TensorDesc(dml.DataType.INT32, indices_shape),
    dml.TensorDesc(F32, (1,) * (rank - 1) + (2,)),
    dml.TensorDesc(F32, (*indices_shape[:-1], depth)),
    axis=rank - 1,
  )
  return lambda i, v: dml.execute(desc, i, v.reshape(desc.values_tensor.sizes))


# (name, function, arguments, input specs, output dimension that must stay sharded along "b" or None)
CASES: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...], tuple[P, ...], int | None]] = [
  ("top_k_batch", lambda x: dml.top_k(x, 5, axis=1), (X,), (P("b"),), 0),
  ("top_k_axis", lambda x: dml.top_k(x, 6, axis=1), (X,), (P("b", "x"),), 0),
  ("top_k_axis_increasing", lambda x: dml.top_k(x, 3, axis=1, direction="increasing"), (X,), (P(None, "x"),), None),
  ("top_k_axis_both_mesh_axes", lambda x: dml.top_k(x, 5, axis=1), (X,), (P(None, ("b", "x")),), None),
  ("top_k_last_axis", lambda x: dml.top_k(x, 4), (X,), (P("b", None, "x"),), 0),
  ("execute_top_k1_axis", lambda x: dml.execute(TOP_K1, x), (X,), (P("b", "x"),), 0),
  ("argmin_axes", lambda x: dml.argmin(x, (1, 2)), (X,), (P("b", "x"),), 0),
  ("argmin_axes_both", lambda x: dml.argmin(x, (1, 2), ties="last"), (X,), (P(None, "x", "b"),), None),
  ("argmax_axes", lambda x: dml.argmax(x, (0, 1), ties="last"), (X,), (P("b", "x"),), None),
  ("argmax_batch", lambda x: dml.argmax(x, 2), (X,), (P("b"),), 0),
  *[(f"reduce_{f.name}", lambda x, f=f: dml.reduce(x, f, (1, 2)), (X,), (P("b", "x"),), 0) for f in dml.ReduceFunction],
  ("execute_reduce_argmax", lambda x: dml.execute(REDUCE_DESC, x), (X,), (P("b", "x", None),), 0),
  (
    "gather_nd_batch",
    lambda x, i: dml.gather_nd(x, i, batch_dims=1),
    (X, _indices((8, 5, 1), -20, 20)),
    (P("b", "x"), P("b")),
    0,
  ),
  (
    "gather_nd_gathered_dims",
    lambda x, i: dml.gather_nd(x, i),
    (X, _indices((5, 2), -20, 20)),
    (P("b", "x"), P()),
    None,
  ),
  (
    "gather_nd_batch_indices",
    lambda x, i: dml.gather_nd(x, i),
    (X.reshape(16, 8, 8), _indices((8, 4, 1), -20, 20)),
    (P("x"), P("b")),
    0,
  ),
  ("one_hot_batch", _one_hot((8, 1), 16), (_indices((8, 1), -20, 20), _ties((2,))), (P("b"), P()), 0),
]


def _assert_same(got: Any, want: Any, rtol: float = 0.0) -> None:
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    assert g.dtype == w.dtype
    if rtol:
      np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=0)
    else:
      np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


# Sums of exponentials are not exact, so their order (per shard, then across shards) may move the last bit.
_INEXACT = {"reduce_LOG_SUM_EXP": 4 * float(np.finfo(np.float32).eps)}


def _assert_batch_sharded(out: Any, dim: int | None) -> None:
  if dim is None:
    return
  for leaf in jax.tree.leaves(out):
    spec = tuple(leaf.sharding.spec) + (None,) * leaf.ndim
    assert spec[dim] == "b", leaf.sharding


@pytest.mark.sample(0)  # every value of each parameter once by default; the whole product with -m long
@pytest.mark.parametrize("kind", ["auto", "explicit"])
@pytest.mark.parametrize(("name", "fn", "args", "specs", "batch_dim"), CASES, ids=[c[0] for c in CASES])
def test_sharded_equals_unsharded(
  kind: str, name: str, fn: Callable[..., Any], args: tuple[np.ndarray, ...], specs: tuple[P, ...], batch_dim: Any
) -> None:
  rtol = _INEXACT.get(name, 0.0)
  mesh = _mesh(kind)
  want = jax.jit(fn)(*args)
  shardings = tuple(NamedSharding(mesh, s) for s in specs)
  by_in_shardings = jax.jit(fn, in_shardings=shardings)(*args)
  _assert_same(by_in_shardings, want, rtol)
  _assert_batch_sharded(by_in_shardings, batch_dim)
  placed = [jax.device_put(a, s) for a, s in zip(args, shardings, strict=True)]
  by_placement = jax.jit(fn)(*placed)
  _assert_same(by_placement, want, rtol)
  _assert_batch_sharded(by_placement, batch_dim)


TOP_K_CASES = [case for case in CASES if "top_k" in case[0]]


@pytest.fixture
def chunk_counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
  """Fills with the chunk count of every chunked selection lowered (the count is chosen at lowering)."""
  seen: list[int] = []
  original = selection._chunked_top_k

  def spy(*args: Any, chunks: int, **kwargs: Any) -> Any:
    seen.append(chunks)
    return original(*args, chunks=chunks, **kwargs)

  monkeypatch.setattr(selection, "_chunked_top_k", spy)
  return seen


@pytest.mark.parametrize(("name", "fn", "args", "specs", "batch_dim"), TOP_K_CASES, ids=[c[0] for c in TOP_K_CASES])
def test_chunked_selection_on_automatic_axes(
  name: str,
  fn: Callable[..., Any],
  args: tuple[np.ndarray, ...],
  specs: tuple[P, ...],
  batch_dim: Any,
  chunk_counts: list[int],
) -> None:
  """Where XLA cannot call custom_partitioning's rule (TPUs), automatic axes select in device-count chunks.

  The non-CPU branch, forced on CPU: the sequences (16 or 8 long here) are cut in gcd(length, 8 devices) = 8
  chunks, and the result is the unsharded one. (XLA:CPU never partitions a TopK, so the bytes this moves on
  CPU say nothing about a TPU; benchmarks/compiled/tpu_automatic_mesh.py measures them compiled for one.)
  """
  del name, batch_dim
  shardings = tuple(NamedSharding(_mesh("auto"), s) for s in specs)

  def traced_afresh(*a: Any) -> Any:  # not a function jitted before, under the platform's own branch
    return fn(*a)

  with platform.forced("default"):
    want = jax.jit(traced_afresh)(*args)
    assert chunk_counts == []  # a one-device program selects whole sequences
    _assert_same(jax.jit(traced_afresh, in_shardings=shardings)(*args), want)
  assert chunk_counts == [8]


@pytest.mark.sample(0)  # every value of each parameter once by default; the whole product with -m long
@pytest.mark.parametrize("descending", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_chunked_selection_equals_the_whole_sequence_selection(dtype: Any, descending: bool) -> None:
  """Chunk candidates and their merge keep the value order, the index tie rule and ``last`` (ties to the highest)."""
  x = _ties((3, 4, 24)).astype(dtype)
  if dtype == np.float32:
    x[0, 0, [1, 7, 20]], x[1, 2, [3, 12]] = np.nan, [-0.0, 0.0]
  else:
    x[2, 1, [5, 17]] = np.iinfo(np.int32).min, np.iinfo(np.int32).max
  for k, last in [(1, False), (1, True), (5, False), (24, False)]:
    for chunks in (2, 3, 8):
      got = selection._chunked_top_k(jnp.asarray(x), k, descending, last, chunks)
      _assert_same(got, selection.local_top_k(jnp.asarray(x), k, descending, last))


@pytest.mark.parametrize(("length", "chunks"), [(12, [4]), (7, [])])
def test_chunk_count_divides_the_length_and_the_device_count(
  length: int, chunks: list[int], chunk_counts: list[int]
) -> None:
  """12 elements in a program of 8 devices: 4 chunks of 3; 7 elements: no chunks (one plain selection)."""
  x = _ties((8, length))
  sharding = NamedSharding(_mesh("auto"), P("b", "x" if length % 4 == 0 else None))
  with platform.forced("default"):
    got = jax.jit(lambda x: dml.top_k(x, 2), in_shardings=sharding)(x)
  _assert_same(got, dml.top_k(x, 2))
  assert chunk_counts == chunks


@pytest.mark.parametrize("kind", ["auto", "explicit"])
def test_one_hot_output_sharded_along_its_axis(kind: str) -> None:
  mesh = _mesh(kind)
  indices, values = _indices((8, 3, 1), -40, 40), _ties((2,))
  fn = _one_hot(indices.shape, 32)
  want = fn(indices, values)
  out_sharding = NamedSharding(mesh, P("b", None, "x"))
  got = jax.jit(fn, out_shardings=out_sharding)(indices, values)
  _assert_same(got, want)
  assert got.sharding.is_equivalent_to(out_sharding, 3)
  assert got.addressable_shards[0].data.shape == (4, 3, 8)


@pytest.mark.parametrize("kind", ["auto", "explicit"])
def test_top_k_gradient_along_sharded_axis(kind: str) -> None:
  mesh = _mesh(kind)
  x = X + np.linspace(0, 0.5, X.size, dtype=np.float32).reshape(X.shape)
  weights = jnp.arange(1.0, 6.0, dtype=jnp.float32).reshape(1, 5, 1)

  def loss(x: jax.Array) -> jax.Array:
    return jnp.sum(dml.top_k(x, 5, axis=1)[0] * weights)

  want = jax.grad(loss)(x)
  sharding = NamedSharding(mesh, P("b", "x"))
  got = jax.jit(jax.grad(loss), in_shardings=sharding)(x)
  _assert_same(got, want)
  assert np.count_nonzero(np.asarray(got)) == 5 * 8 * 8
  _assert_same(jax.jit(jax.grad(loss))(jax.device_put(x, sharding)), want)
  tangent = np.cos(x)

  def values_jvp(x: jax.Array, t: jax.Array) -> Any:
    return jax.jvp(lambda x: dml.top_k(x, 5, axis=1)[0], (x,), (t,))

  _assert_same(jax.jit(values_jvp)(jax.device_put(x, sharding), tangent), values_jvp(x, tangent))


@pytest.mark.parametrize("kind", ["auto", "explicit"])
def test_only_candidates_cross_devices(kind: str) -> None:
  """A top-k / argmin / argmax along an axis sharded 8 ways moves less than one device's shard."""
  mesh = jax.make_mesh((8,), ("v",), axis_types=(AxisType.Explicit if kind == "explicit" else AxisType.Auto,))
  logits = _RNG.integers(-50, 50, (4, 8 * 1024)).astype(np.float32)
  sharding = NamedSharding(mesh, P(None, "v"))
  shard_bytes = logits.nbytes // 8
  plain = jax.jit(lambda x: jax.lax.top_k(x, 8), in_shardings=sharding).lower(logits).compile()
  assert collective_bytes(plain) >= shard_bytes
  placed = jax.device_put(logits, sharding)
  fns = [
    lambda x: dml.top_k(x, 8),
    lambda x: dml.top_k(x, 8, direction="increasing"),
    lambda x: dml.argmin(x, 1),
    lambda x: dml.argmax(x, 1, ties="last"),
  ]
  for fn in fns:
    want = fn(logits)
    for compiled, arg in [
      (jax.jit(fn, in_shardings=sharding).lower(logits).compile(), logits),
      (jax.jit(fn).lower(placed).compile(), placed),
    ]:
      assert 0 < collective_bytes(compiled) < shard_bytes
      _assert_same(compiled(arg), want)


@pytest.mark.parametrize("axis_names", [frozenset({"b", "x"}), frozenset({"b"})])
def test_top_k_inside_shard_map(axis_names: frozenset[str]) -> None:
  """Inside shard_map each device's block is its own input (the partitioner is not asked to split it)."""
  mesh = _mesh("auto")
  fn = jax.shard_map(lambda x: dml.top_k(x, 3), mesh=mesh, in_specs=P("b"), out_specs=P("b"), axis_names=axis_names)
  _assert_same(jax.jit(fn)(X), dml.top_k(X, 3))


@pytest.mark.parametrize(
  ("branch", "kernel"), [("cuda", "mosaic_gpu|__gpu"), ("tpu", "tpu_custom_call")], ids=["cuda", "tpu"]
)
def test_the_accelerator_kernels_lower_inside_shard_map_with_its_type_checks(branch: str, kernel: str) -> None:
  """Inside ``jax.shard_map`` with ``check_vma`` on (JAX's default), the CUDA and TPU top-k kernels (compiled, not
  interpreted: lowered for their platform) type their outputs as varying over the mesh axes their input does: a
  Pallas output typed as the same on every device is refused by JAX there."""
  mesh = _mesh("auto")
  x = jax.ShapeDtypeStruct((8, 2048), jnp.float32)
  fn = jax.jit(jax.shard_map(lambda x: dml.top_k(x, 5), mesh=mesh, in_specs=P("b"), out_specs=P("b")))
  with platform.choosing(branch=branch):
    text = fn.trace(x).lower(lowering_platforms=(branch,)).as_text()
  assert re.search(kernel, text), branch


def test_top_k_under_set_mesh_with_explicit_axes() -> None:
  mesh = _mesh("explicit")
  set_mesh = getattr(jax, "set_mesh", None) or jax.sharding.use_mesh  # jax.set_mesh from 0.7.1
  with set_mesh(mesh):
    x = jax.device_put(X, P("b", "x"))
    values, indices = jax.jit(lambda x: dml.top_k(x, 6, axis=1, direction="increasing"))(x)
    vmapped = jax.jit(jax.vmap(lambda row: dml.top_k(row, 6, axis=0)))(x)
  want = dml.top_k(X, 6, axis=1, direction="increasing")
  _assert_same((values, indices), want)
  assert values.sharding.spec[0] == "b"
  _assert_same(vmapped, dml.top_k(X, 6, axis=1))


@pytest.mark.parametrize("axes", [(1,), None, (0, 1)])
@pytest.mark.parametrize("jit", [False, True])
def test_multiply_along_an_explicitly_sharded_axis(axes: tuple[int, ...] | None, jit: bool) -> None:
  """MULTIPLY's CPU row-halving reshape must not trip over an explicit sharding of a reduced axis."""
  mesh = jax.make_mesh((8,), ("d",), axis_types=(AxisType.Explicit,))
  x = np.random.default_rng(23).uniform(0.5, 1.5, (4, 64)).astype(np.float32)
  placed = jax.device_put(x, NamedSharding(mesh, P(None, "d")))

  def fn(v: jax.Array) -> jax.Array:
    return dml.reduce(v, "multiply", axes, keepdims=True)

  got = (jax.jit(fn) if jit else fn)(placed)
  want = np.prod(x.astype(np.float64), axis=axes, keepdims=True)
  np.testing.assert_allclose(np.asarray(got), want, rtol=64 * np.finfo(np.float32).eps)


def _negative_nans(shape: tuple[int, ...]) -> np.ndarray:
  """float8_e5m2 normal values with a negative NaN (a key that wraps to the top) in every other row."""
  x = np.random.default_rng(29).normal(size=shape).astype(ml_dtypes.float8_e5m2)
  x.view(np.uint8)[::2, 3] = 0xFE
  return x


@pytest.mark.parametrize("kind", ["auto", "explicit", "shard_map", "one device"])
def test_reduce_max_chooses_its_path_from_the_program(kind: str) -> None:
  """REDUCE MAX on CPU halves the rows in a program of one device (or inside a shard_map manual over every mesh
  axis, where each device reduces its own block) and takes XLA's reduction in a program spread over several
  devices, whatever the process's device count; float8 keys wrap, and both paths reduce them right."""
  x = _negative_nans((64, 4096))
  want = ref_extreme(x, "max", (1,))[:, 0]
  mesh = _mesh("explicit" if kind == "explicit" else "auto")

  def fn(v: jax.Array) -> jax.Array:
    return dml.reduce(v, "max", 1)

  if kind == "shard_map":
    fn = jax.shard_map(fn, mesh=mesh, in_specs=P(("b", "x")), out_specs=P(("b", "x")))
  arg = x if kind == "one device" else jax.device_put(x, NamedSharding(mesh, P(("b", "x"))))
  with platform.choosing(cpu_kernel=False):  # the composition (a one-device program runs the kernel where built)
    lowered = jax.jit(fn).lower(arg)
  lengths = maximum_reduction_lengths(lowered.as_text())
  if kind in ("auto", "explicit"):
    assert max(lengths) >= 4096 // 8, lengths  # XLA's reduction of every (local) element of a row
  else:
    assert max(lengths, default=0) <= 16, lengths  # the halving's last 16
  np.testing.assert_array_equal(np.asarray(lowered.compile()(arg)).view(np.uint8), want.view(np.uint8))
