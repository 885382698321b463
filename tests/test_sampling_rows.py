"""A row that needs work over its whole row pays for its own row, not for its batch's (issue 42, point 2).

The filters decide most rows on their candidates; a row whose top-k/top-p prefix reaches past them (``top_k=0``
with ``top_p < 1``, a ``k`` above ``max_k``), whose top-p total is its whole row's, or whose kept set ``sample``
draws from whole, needs work over its row. That work runs one row at a time, as many times as there are such rows:

* every whole-row array inside a loop of the compiled programs is one row (``(1, V)``), never the batch's, on the
  XLA composition and on the compiled CPU kernels' route, also under ``jax.vmap``;
* on CPU the kernels' calls are in the compiled programs (the search and the kept entries), and not on the
  composition (a build without a compiler, ``cpu_kernel=False``);
* both routes give the same masks (the NumPy reference's, tests/sampling_reference.py) and the same tokens, by
  bits, as each row computed alone, for every float type and for rows of every kind mixed in one batch;
* ``sample`` with top-p alone holds at most the logits' size and 1 MiB of temporaries.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import sampling_reference as ref
from _helpers import assert_bitwise_equal, x64

import dmljax as dml
from benchmarks.compiled import hlo
from dmljax._src import cpu_kernel_library, platform
from dmljax._src.sampling import kernel as sampling_kernel
from dmljax._src.sampling import search

S = dml.sampling
MiB = 1 << 20
V = 3000  # far more entries than candidates
REQUIRED = os.environ.get("DMLJAX_REQUIRE_CPU_KERNEL") == "1"


def _mixed(dtype: Any, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
  """Eight rows, one of each kind, with NaN and infinite logits: (logits, per-row parameters)."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((8, V)) * 3
  x[1, ::5] = rng.integers(-3, 4, x[1, ::5].shape)  # ties at the boundaries
  x[2, ::7] = np.nan
  x[3, [4, 900]] = np.inf
  x[5, ::3] = -np.inf
  x[6, :] = np.nan
  x[7, :] = -np.inf
  params = {
    # search (k off, top-p of the whole row), candidates, count then mass search, greedy, filters off,
    # top-p at an infinite temperature, a NaN row, a row of -inf
    "k": np.array([0, 50, 1000, 0, 0, 0, 0, 0], np.int32),
    "p": np.array([0.9, 0.9, 0.95, 0.5, 1.0, 0.3, 0.9, 0.9], np.float32),
    "m": np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.001, 0.0, 0.1], np.float32),
    "t": np.array([0.7, 0.7, 1.0, 0.0, 0.7, np.inf, 0.7, 1.0], np.float32),
  }
  return x.astype(dtype), params


@contextlib.contextmanager
def _route(kernel: bool) -> Iterator[None]:
  """The compiled CPU kernels' route (``kernel``) or the XLA composition; the kernel's cases skip without the
  kernels' library, unless DMLJAX_REQUIRE_CPU_KERNEL=1 makes their absence a failure."""
  if kernel and not cpu_kernel_library.available():
    if REQUIRED:
      pytest.fail(f"DMLJAX_REQUIRE_CPU_KERNEL=1, but {cpu_kernel_library.status()}")
    pytest.skip(f"no sampling kernel: {cpu_kernel_library.status()}")
  with platform.choosing(cpu_kernel=kernel):
    yield


@functools.partial(jax.jit, static_argnames="dtype")
def _calls(x: jax.Array, k: jax.Array, p: jax.Array, m: jax.Array, t: jax.Array, offset: jax.Array, dtype: Any):
  """The masks and draws of the test, in one program for every row count (``offset``: the first row's number)."""
  del dtype  # the logits' type, part of the program's key already
  key = jax.random.key(8)
  return (
    S.top_k_mask(x, k),
    S.top_p_mask(x, p),
    S.top_p_mask(x, 0.9),
    S.sample(key, x, temperature=t, top_k=k, top_p=p, min_p=m, row_offset=offset),
    S.sample(key, x, temperature=t, top_p=0.9, row_offset=offset),
    S.sample(key, x, temperature=t, row_offset=offset),
  )


def _run(x: np.ndarray, params: dict[str, np.ndarray], offset: int = 0) -> list[np.ndarray]:
  outs = _calls(x, *(params[name] for name in "kpmt"), jnp.int32(offset), dtype=np.dtype(x.dtype).name)
  return [np.asarray(a) for a in outs]


ROUTES = [pytest.param(True, id="kernel"), pytest.param(False, id="composition")]
DTYPES = [np.float32, ml_dtypes.bfloat16, np.float16, np.float64]
# The default run's sample of the (type, route) product (each case compiles six calls three times): the kernel's
# route for float32 and bfloat16, the composition's for float16; the long profile runs the other five. Each case
# compares both routes' batches, so every type's routes are compared in the default run but float64's.
_DEFAULT_MIXED = {("float32", True), ("bfloat16", True), ("float16", False)}
MIXED = [
  pytest.param(
    dtype,
    *route.values,
    id=f"{np.dtype(dtype).name}-{route.id}",
    marks=() if (np.dtype(dtype).name, *route.values) in _DEFAULT_MIXED else pytest.mark.long,
  )
  for dtype in DTYPES
  for route in ROUTES
]
# Few kept entries: the 16-bit types (where the kept-entries handler once compared in the wrong width) by default.
FEW_KEPT = [d if np.dtype(d).itemsize == 2 else pytest.param(d, marks=pytest.mark.long) for d in DTYPES]


@pytest.mark.parametrize(("dtype", "kernel"), MIXED)
def test_mixed_rows_give_each_row_s_own_bits_on_both_routes(dtype: Any, kernel: bool) -> None:
  """Every output of a batch of mixed rows equals, by bits, that row computed alone (``row_offset`` numbering it
  as in the batch) and the other route's; the masks equal the NumPy reference's."""
  context = x64() if np.dtype(dtype) == np.float64 else contextlib.nullcontext()
  x, params = _mixed(dtype, 4242)
  with context:
    with _route(kernel):
      got = _run(x, params)
      for row in range(x.shape[0]):
        alone = {name: value[row : row + 1] for name, value in params.items()}
        for i, (a, b) in enumerate(zip(_run(x[row : row + 1], alone, row), got, strict=True)):
          assert_bitwise_equal(a, b[row : row + 1], f"output {i}, row {row} alone")
    with _route(not kernel):
      other = _run(x, params)
  for i, (a, b) in enumerate(zip(other, got, strict=True)):
    assert_bitwise_equal(b, a, f"output {i}: the routes differ")
  assert_bitwise_equal(got[0], ref.apply_rows(ref.keep_top_k, x, params["k"]), "top_k_mask")
  assert_bitwise_equal(got[1], ref.expected_top_p(x, params["p"], got[1]), "top_p_mask")
  assert_bitwise_equal(got[2], ref.expected_top_p(x, 0.9, got[2]), "top_p_mask(0.9)")
  tokens = got[3]
  assert tokens[3] == ref.greedy(x[3:4])[0], "the greedy row"
  assert tokens[6] == 0 and tokens[7] == 0, "rows of NaN or -inf draw index 0"
  for row in (0, 1, 2, 4):  # the drawn token is one the row keeps (the reference's float64 sums, off by rounding
    # only where a prefix's probability lies within a few ulps of p: not in these rows)
    keep = ref.sampler_keep(
      x[row], float(params["t"][row]), int(params["k"][row]), float(params["p"][row]), float(params["m"][row])
    )
    assert keep[tokens[row]], f"row {row} drew {tokens[row]}, which it does not keep"


def _equations(jaxpr: Any, inside: bool = False) -> Iterator[tuple[Any, bool]]:
  """Every equation of a jaxpr, nested ones included, with whether it sits inside a ``while`` loop."""
  for eqn in jaxpr.eqns:
    yield eqn, inside
    loop = inside or eqn.primitive.name == "while"
    for value in eqn.params.values():
      for item in value if isinstance(value, (tuple, list)) else (value,):
        inner = getattr(item, "jaxpr", item)
        if hasattr(inner, "eqns"):
          yield from _equations(inner, loop)


def _batch_arrays_in_loops(fn: Callable[..., Any], *args: Any) -> list[str]:
  """The arrays of more than one whole row (last axis ``V``) that equations inside loops compute."""
  jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
  found = []
  for eqn, inside in _equations(jaxpr):
    for var in eqn.outvars:
      shape = getattr(var.aval, "shape", ())
      if inside and len(shape) >= 1 and shape[-1] == V and int(np.prod(shape[:-1])) > 1:
        found.append(f"{eqn.primitive.name} -> {shape}")
  return found


@pytest.mark.parametrize("kernel", ROUTES)
@pytest.mark.parametrize("mapped", [None, "logits", "k"])
def test_whole_row_work_in_loops_reads_one_row(kernel: bool, mapped: str | None) -> None:
  """The search, the row totals and the whole-row draw each run in a loop over the rows that need them, each pass
  on one row: no equation in a loop computes an array of the batch's whole rows (the search over every row of the
  batch did, in each of its passes). Under ``jax.vmap`` over the logits or over ``k`` too."""
  x = jnp.zeros((4, V), jnp.float32)
  key = jax.random.key(0)
  k = jnp.array([0, 50, 1000, 0], jnp.int32)

  def work(x: jax.Array, k: jax.Array) -> tuple[jax.Array, ...]:
    return (
      S.top_p_mask(x, 0.9),
      S.top_p_mask(S.top_k_mask(x, k, max_k=8), 0.5, max_k=8),
      S.sample(key, x, temperature=0.7, top_k=k, top_p=0.9),
      S.sample(key, x, temperature=0.7, top_p=0.9, min_p=0.01),
    )

  fn, args = work, (x, k)
  if mapped == "logits":
    fn, args = jax.vmap(work, in_axes=(0, None)), (jnp.zeros((3, 4, V), jnp.float32), k)
  elif mapped == "k":
    fn, args = jax.vmap(work, in_axes=(None, 0)), (x, jnp.stack([k, k + 1, k * 0]))
  with _route(kernel):
    found = _batch_arrays_in_loops(fn, *args)
  assert not found, found


@pytest.mark.parametrize("kernel", ROUTES)
def test_the_kernels_are_in_the_compiled_cpu_programs_of_their_route_only(kernel: bool) -> None:
  """On CPU the search is the kernel's call, and the whole-row draw lists the kept entries by its other call; the
  composition's programs (a build without a compiler) hold neither."""
  x = jnp.zeros((8, V), jnp.float32)
  key = jax.random.key(0)
  targets = (cpu_kernel_library.SAMPLING_CUT_TARGET, cpu_kernel_library.SAMPLING_KEPT_TARGET)
  with _route(kernel):
    mask = jax.jit(lambda x: S.top_p_mask(x, 0.9)).lower(x).compile().as_text()
    drawn = jax.jit(lambda x: S.sample(key, x, top_p=0.9)).lower(x).compile().as_text()
  assert (targets[0] in mask) == kernel, "top_p_mask: the search's call"
  assert targets[1] not in mask, "top_p_mask lists no kept entries"
  assert all((target in drawn) == kernel for target in targets), "sample(top_p=0.9): the kernels' calls"


@pytest.mark.parametrize("kernel", ROUTES)
def test_sample_with_top_p_alone_holds_at_most_the_logits_and_1_mib(kernel: bool) -> None:
  """Compiled for (64, 262144) float32 logits (64 MiB): ``sample(top_p=0.9)`` alone (whose whole-row search and
  draw are compiled in) holds at most 64 MiB + 1 MiB of temporaries (XLA's buffer assignment; nothing is run)."""
  x = jax.ShapeDtypeStruct((64, 262144), jnp.float32)
  key = jax.random.key(0)
  with _route(kernel):
    for temperature in (1.0, 0.7):
      compiled = jax.jit(lambda x, t=temperature: S.sample(key, x, temperature=t, top_p=0.9)).lower(x).compile()
      analysis = compiled.memory_analysis()
      assert analysis is not None
      allowed = 64 * 262144 * 4 + MiB
      assert analysis.temp_size_in_bytes <= allowed, (temperature, analysis.temp_size_in_bytes, allowed)


@pytest.mark.parametrize("dtype", FEW_KEPT, ids=lambda d: np.dtype(d).name)
def test_a_row_drawn_from_few_kept_entries_gives_the_composition_s_tokens(dtype: Any) -> None:
  """Rows that keep fewer than half their entries are raced over the kernel's list of them (a filters-off row of
  mostly NaN; a top-p row past its candidates), positive and negative logits alike, at finite and infinite
  temperatures: the tokens of both routes are equal for every key, and the list is every kept entry."""
  context = x64() if np.dtype(dtype) == np.float64 else contextlib.nullcontext()
  rng = np.random.default_rng(515)
  x = rng.standard_normal((4, V)) * 3 + np.array([[0.0], [2.0], [-2.0], [0.0]])
  x[:3, rng.permutation(V)[: 3 * V // 4]] = np.nan  # a quarter of each of these rows is kept
  x = x.astype(dtype)
  t = np.array([0.7, np.inf, 1.3, 1.0], np.float32)
  p = np.array([1.0, 1.0, 1.0, 0.2], np.float32)  # the last row: top-p past its 4 candidates
  keys = jax.random.split(jax.random.key(77), 16)

  def tokens(route: bool) -> np.ndarray:
    with _route(route):
      draw = jax.jit(jax.vmap(lambda key: S.sample(key, x, temperature=t, top_p=p, max_k=4)))
      return np.asarray(draw(keys))

  with context:
    with_kernel, composed = tokens(True), tokens(False)
    assert_bitwise_equal(with_kernel, composed, "tokens of the two routes")
    assert not np.isnan(x.astype(np.float64)[np.arange(4), with_kernel]).any(), "a NaN entry was drawn"
    key_dtype = np.dtype(np.uint64) if np.dtype(dtype).itemsize == 8 else np.dtype(np.uint32)
    whole_t, whole_j = search.everything((4,), V, key_dtype)
    with _route(True):
      listed, count = jax.jit(sampling_kernel.kept)(jnp.asarray(x), whole_t[:, 0], whole_j[:, 0])
  for row in range(4):
    expected = np.flatnonzero(~np.isnan(x[row].astype(np.float64)))
    assert int(count[row]) == expected.size, (row, int(count[row]), expected.size)
    assert_bitwise_equal(np.asarray(listed[row, : expected.size]), expected.astype(np.int32), f"row {row}'s list")


LONG = 1 << 17  # long enough that the kernels cut a row's passes into parts (one per thread, up to four)
# Longer than the rows whose units' sums the search keeps in 64 bits (float32 weights: 2**18 entries), and than the
# rows whose buffers a thread keeps from call to call: 128-bit sums, a buffer of the call's own.
LONGER = (1 << 18) + 1


@pytest.mark.parametrize("length", [LONG, LONGER])
def test_long_rows_searched_in_parts_give_the_composition_s_bits(length: int) -> None:
  """A batch of one row of 2**17 entries (and of 2**18 + 1), fewer rows than the kernels' threads, so that each pass
  over the row is cut into parts: its threshold's ties (a few logit values only) lie in every part, and its NaN
  entries too. The top-k count and the top-p mass searched (one after the other, and each alone), the masks and the
  draws equal the composition's by bits and the NumPy reference's; the kept entries the kernel lists are every kept
  entry, ascending.
  """
  rng = np.random.default_rng(2718)
  x = rng.integers(-40, 4, (1, length)).astype(np.float32) / np.float32(4)  # 44 values: ties everywhere
  x[0, rng.permutation(length)[:500]] = np.nan
  key = jax.random.key(31)

  def outputs(route: bool) -> list[np.ndarray]:
    with _route(route):
      calls = jax.jit(
        lambda x: (
          S.top_k_mask(x, 40000),
          S.top_p_mask(x, 0.9),
          S.top_p_mask(x, 0.3),
          S.sample(key, x, temperature=0.7, top_k=40000, top_p=0.95),
          S.sample(key, x, temperature=1.3, top_p=0.2),
        )
      )
      return [np.asarray(a) for a in calls(x)]

  got, composed = outputs(True), outputs(False)
  for i, (a, b) in enumerate(zip(got, composed, strict=True)):
    assert_bitwise_equal(a, b, f"output {i}: the routes differ")
  assert_bitwise_equal(got[0], ref.apply_rows(ref.keep_top_k, x, np.array([40000])), "top_k_mask")
  assert_bitwise_equal(got[1], ref.expected_top_p(x, np.array([0.9], np.float32), got[1]), "top_p_mask(0.9)")
  assert_bitwise_equal(got[2], ref.expected_top_p(x, np.array([0.3], np.float32), got[2]), "top_p_mask(0.3)")
  assert ref.sampler_keep(x[0], 0.7, 40000, 0.95, 0.0)[got[3][0]], "the drawn token is not kept"
  assert ref.sampler_keep(x[0], 1.3, 0, 0.2, 0.0)[got[4][0]], "the drawn token is not kept"
  kept = np.isfinite(got[2][0])  # a cut inside the ties of a value: its entries through an index j
  order = ref.order(x[0])
  last = order[int(kept.sum()) - 1]
  t, j = search.order_key(jnp.asarray(x[:, last : last + 1])), jnp.full((1, 1), last, jnp.int32)
  with _route(True):
    listed, count = jax.jit(sampling_kernel.kept)(jnp.asarray(x), t[:, 0], j[:, 0])
  expected = np.flatnonzero(kept)
  assert int(count[0]) == expected.size, (int(count[0]), expected.size)
  assert_bitwise_equal(np.asarray(listed[0, : expected.size]), expected.astype(np.int32), "the kept entries' list")
  assert not np.asarray(listed[0, expected.size :]).any(), "the list's tail is not zeros"


def test_a_batch_of_one_row_runs_no_kernel_call_outside_its_loops() -> None:
  """In a batch of one row a loop's body reads the whole batch, and XLA hoisted the kernels' calls out of their
  loops, running them even where the loop makes no pass: the compiled program's entry computation holds none."""
  x = jnp.zeros((1, V), jnp.float32)
  key = jax.random.key(0)
  targets = (cpu_kernel_library.SAMPLING_CUT_TARGET, cpu_kernel_library.SAMPLING_KEPT_TARGET)
  with _route(True):
    for fn in (lambda x: S.top_p_mask(x, 0.9), lambda x: S.sample(key, x, temperature=0.7, top_k=0, top_p=0.9)):
      module = hlo.parse(jax.jit(fn).lower(x).compile().as_text())
      called = {i.custom_call_target for i in module.instructions.values()}
      assert targets[0] in called, "the program has no search call"
      hoisted = [i.name for i in module.entry.instructions if i.custom_call_target in targets]
      assert not hoisted, hoisted
