"""The strategy tables' rows chosen by name, checked on CPU: each on a forced platform branch (Pallas kernels in
interpret mode), under jit, vmap, derivatives, sharding and export; and the rule that a strategy runs only on the
cases it declares it handles.
"""

from __future__ import annotations

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
from dmljax._src import platform, top_k
from dmljax._src.strategies import dispatch
from dmljax._src.strategies.case import Case

DIRECTIONS = ("decreasing", "increasing")


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


# --- dml.top_k with the CUDA branch forced on CPU and a strategy chosen by name ---------------------------------


@pytest.fixture(params=["gpu_kernel", "sorted_keys"])
def forced(request: pytest.FixtureRequest) -> Iterator[str]:
  """``dml.top_k`` runs the CUDA branch on CPU with the given strategy (Pallas in interpret mode)."""
  with platform.choosing(branch="cuda", top_k=request.param, interpret=True):
    yield request.param


def _ops(fn: Any, *args: Any) -> str:
  return jax.jit(fn).lower(*args).as_text()


def test_forced_branch_runs_the_named_selection(forced: str) -> None:
  x = _sample(np.float32, (4, 50), 400)
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
  values, indices = export.deserialize(exported.serialize()).call(x)
  want_values, want_indices = ref_top_k(x, 6, -1, "decreasing")
  np.testing.assert_array_equal(np.asarray(indices), want_indices)
  np.testing.assert_array_equal(bits(values), bits(want_values))


def test_pallas_strategy_under_x64_traces_the_cuda_kernel_on_cpu() -> None:
  """Under x64, Python int constants become int64 in a kernel's int32 arithmetic; ``lax.platform_dependent``
  traces the CUDA kernel even on CPU, so a kernel that mixed them would fail ``dml.top_k`` there too."""
  x = _sample(np.float32, (3, 40), 406)
  with x64(), platform.choosing(top_k="one_pass", interpret=True):
    jaxpr = str(jax.make_jaxpr(lambda x: dml.top_k(x, 5))(x))
    values, indices = dml.top_k(x, 5)  # the kernel, in interpret mode, lowered with x64 on
  assert "dmljax_one_pass_top_k" in jaxpr  # the CUDA branch's kernel primitive, not only the CPU path
  want_values, want_indices = ref_top_k(x, 5, -1, "decreasing")
  np.testing.assert_array_equal(np.asarray(indices), want_indices)
  np.testing.assert_array_equal(bits(values), bits(want_values))


# --- the choice of strategy ----------------------------------------------------------------------------------


def test_an_unknown_strategy_is_refused_with_the_names() -> None:
  with platform.choosing(top_k="bitonic"), pytest.raises(ValueError, match="one_pass"):
    dml.top_k(np.arange(6.0, dtype=np.float32), 2)


def test_a_new_choice_retraces_the_library_and_clears_no_cache() -> None:
  """The library's own jitted top_k traces again under a new choice; a caller's compiled programs stay."""
  x = np.arange(24, dtype=np.int32).reshape(2, 12)
  unrelated = jax.jit(lambda a: a * 2)
  unrelated(x)
  cached = unrelated._cache_size()
  before = top_k._top_k_program._cache_size()
  found = {}
  with platform.forced("default"):
    for name in ("sorted_keys", "cpu_extracted", "sorted_keys"):
      with platform.choosing(top_k=name):
        found[name] = "chlo.top_k" in _ops(lambda x: dml.top_k(x, 3), x)
        np.testing.assert_array_equal(np.asarray(dml.top_k(x, 3)[1]), [[11, 10, 9], [11, 10, 9]])
  assert found == {"sorted_keys": True, "cpu_extracted": False}
  assert top_k._top_k_program._cache_size() == before + 2  # one program per choice, the third call reused the first
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


@pytest.mark.parametrize(
  ("name", "x", "k"),
  [
    # int32 past float32's integers: the float view would tie 2**24 and 2**24 + 1.
    ("cpu_float_view", np.array([16777216, 16777217], np.int32), 1),
    # Rows too short to chunk.
    ("cpu_chunked", np.arange(8, dtype=np.float32), 3),
    ("chunked_sorts", np.arange(8, dtype=np.float32), 3),
    # XLA's GPU kernel keys: types of up to 16 bits, float32 and bfloat16; int32 would lose precision.
    ("gpu_kernel", np.arange(1 << 25, (1 << 25) + 2048, dtype=np.int32).reshape(2, 1024), 3),
    ("peak_reduction", np.arange(8, dtype=np.int32), 3),
    # The one-pass kernel loads stored bytes: no 4-bit floats (4-bit integers are selected as 8-bit ones).
    ("one_pass", np.arange(8, dtype=np.float32).astype(jnp.float4_e2m1fn), 2),
    # The TPU DMA kernel reads 16- and 32-bit elements: float8 types whose key merges zeros or NaNs are left.
    ("tpu_kernel", np.arange(8, dtype=np.float32).astype(jnp.float8_e4m3fn), 2),
  ],
)
def test_a_forced_strategy_outside_the_cases_it_handles_is_refused(name: str, x: np.ndarray, k: int) -> None:
  """The refusal names the strategy, the case and what it handles, never a wrong answer or a bare assertion."""
  strategy = dispatch.BY_NAME[name]
  assert not strategy.handles(Case.of(jnp.asarray(x), k, True))
  with platform.choosing(top_k=name, interpret=True), pytest.raises(ValueError, match=f"{name!r} does not handle"):
    dml.top_k(x, k)


def test_every_table_handles_every_case_in_its_last_row() -> None:
  """The dispatch never runs a strategy outside what it declares: the rows' conditions include ``handles``, and
  every table ends in a row that handles every type (every float8, 4-bit and 64-bit type included)."""
  narrow = ("float8", "float4", "int4", "uint4")
  dtypes_ = [np.dtype(getattr(jnp, name)) for name in dir(jnp) if name.startswith(narrow)]
  dtypes_ += [np.dtype(t) for t in (np.float16, jnp.bfloat16, np.float32, np.float64, np.int8, np.uint32, np.int64)]
  for table in dispatch.TABLES.values():
    for dtype in dtypes_:
      for shape, k in (((4, 8), 3), ((2, 5000), 40), ((3, 1024), 1)):
        case = Case(dtype, shape, k, True)
        assert table[-1].handles(case)
        chosen = dispatch._first(table, case)
        assert chosen.handles(case), (chosen.name, case)
