"""dmljax.sampling (issue 23): filters against an independent NumPy reference, runtime parameters, the draw.

Inputs come from fixed seeds; rows of small integers make ties at every boundary. Every filter result is
compared by bits with tests/sampling_reference.py; ``sample`` is checked through what it may return (a kept
entry), its distribution (a chi-square test over many keys), its determinism and its two paths (whole rows,
``max_k`` candidates), which must give the same token for the same key.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sampling_reference as ref
from _helpers import assert_bitwise_equal
from scipy import stats

import dmljax as dml
from dmljax._src.sampling import api as sampling_impl

S = dml.sampling
_RNG = np.random.default_rng(2323)
INF, NAN = np.inf, np.nan


def _ties(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
  return _RNG.integers(-3, 4, shape).astype(dtype)


def _normal(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
  return (_RNG.standard_normal(shape) * 3).astype(dtype)


HAND_ROWS = np.array(
  [
    [1.0, 3.0, 3.0, 2.0, NAN, -INF, 3.0, 0.0],
    [0.0, -0.0, 0.0, -0.0, 0.0, 0.0, -0.0, 0.0],  # all equal
    [-INF] * 8,
    [NAN] * 8,
    [NAN, -INF, 2.0, NAN, -INF, 2.0, 1.0, 1.0],
    [INF, 1.0, INF, 0.0, -INF, NAN, 5.0, INF],
    [5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0],
    [-1e30, 1e30, 0.0, 1e-30, -1e-30, 7.0, 7.0, 7.0],
  ],
  np.float32,
)
KS = (-1, 0, 1, 2, 3, 4, 7, 8, 9)
PS = (-0.5, 0.0, 1e-9, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1.0, 1.5, NAN)
MIN_PS = (-1.0, 0.0, 0.01, 0.1, 0.5, 0.9, 1.0, 2.0, NAN)


def _filters(max_k: int | None = 3) -> Any:
  """All four filters in one program (one compilation), per-row parameters."""

  @jax.jit
  def run(x: jax.Array, k: jax.Array, p: jax.Array, m: jax.Array) -> tuple[jax.Array, ...]:
    return S.top_k_mask(x, k), S.top_k_mask(x, k, max_k=max_k), S.top_p_mask(x, p), S.min_p_mask(x, m)

  return run


def _expected(
  logits: np.ndarray, k: np.ndarray, p: np.ndarray, m: np.ndarray, got_top_p: Any
) -> tuple[np.ndarray, ...]:
  top_k = ref.apply_rows(ref.keep_top_k, logits, k)
  return top_k, top_k, ref.expected_top_p(logits, p, got_top_p), ref.apply_rows(ref.keep_min_p, logits, m)


def test_filters_on_hand_rows_against_reference() -> None:
  """Ties at the boundary, -inf and NaN entries, all-equal rows, k = 1 and >= V, p = 0 and 1, per row."""
  rows = len(KS) * len(PS) * len(MIN_PS)
  logits = np.tile(HAND_ROWS, (rows, 1))
  k = np.repeat(np.tile(np.array(KS, np.int32), rows // len(KS)), len(HAND_ROWS))
  p = np.repeat(np.tile(np.repeat(np.array(PS, np.float32), len(KS)), len(MIN_PS)), len(HAND_ROWS))
  m = np.repeat(np.repeat(np.array(MIN_PS, np.float32), len(KS) * len(PS)), len(HAND_ROWS))
  got = _filters()(logits, k, p, m)
  for a, b in zip(got, _expected(logits, k, p, m, got[2]), strict=True):
    assert_bitwise_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.float16])
def test_filters_per_row_parameters_against_reference(dtype: Any) -> None:
  logits = np.concatenate([_ties((3, 5, 40), dtype), _normal((3, 5, 40), dtype)])
  logits[0, 0, 3] = NAN
  k = _RNG.integers(-2, 45, (6, 5)).astype(np.int32)
  p = _RNG.uniform(-0.1, 1.1, (6, 1)).astype(np.float32)
  min_p = _RNG.uniform(0, 1, (5,)).astype(np.float32)
  got = _filters(8)(logits, k, p, min_p)
  for a, b in zip(got, _expected(logits, k, p, min_p, got[2]), strict=True):
    assert_bitwise_equal(a, b)


def test_top_p_on_a_long_row_of_varied_weights() -> None:
  logits = _normal((4, 3000))
  p = np.array([0.2, 0.6, 0.9, 0.999], np.float32)
  got = S.top_p_mask(logits, p)
  assert_bitwise_equal(got, ref.expected_top_p(logits, p, got))


def test_float64_logits_under_x64() -> None:
  with jax.enable_x64(True):
    logits = _normal((2, 30), np.float64)
    logits[1, 4] = NAN
    assert_bitwise_equal(S.top_k_mask(logits, 5), ref.apply_rows(ref.keep_top_k, logits, np.int32(5)))
    got = S.top_p_mask(logits, 0.8)
    assert_bitwise_equal(got, ref.expected_top_p(logits, np.float32(0.8), got))
    token = S.sample(jax.random.key(1), logits, temperature=0.0)
    assert_bitwise_equal(token, ref.greedy(logits))


def test_one_program_serves_every_parameter_value() -> None:
  """Python numbers, NumPy scalars and arrays of k, p, min_p and temperature: one compilation each function."""
  logits = jnp.asarray(_normal((2, 16)))
  key = jax.random.key(0)
  jitted = {
    "top_k": sampling_impl._top_k_mask,
    "top_p": sampling_impl._top_p_mask,
    "min_p": sampling_impl._min_p_mask,
    "sample": sampling_impl._sample,
  }
  before = {name: fn._cache_size() for name, fn in jitted.items()}
  values = [(1, 0.1, 0.0, 0.0), (5, 0.5, 0.2, 0.7), (np.int32(9), np.float32(0.9), 0.5, 1.0)]
  values.append((jnp.array([3, 0], jnp.int32), jnp.array([0.3, 1.0], jnp.float32), jnp.float32(0.1), 2.0))
  for k, p, m, t in values:
    S.top_k_mask(logits, k)
    S.top_p_mask(logits, p)
    S.min_p_mask(logits, m)
    S.sample(key, logits, temperature=t, top_k=k, top_p=p, min_p=m)
  after = {name: fn._cache_size() for name, fn in jitted.items()}
  assert {name: after[name] - before[name] for name in jitted} == dict.fromkeys(jitted, 1)


def _kept_sets(logits: np.ndarray, k: int | None, p: float | None, min_p: float | None) -> np.ndarray:
  rows = np.asarray(logits, np.float32)
  if k is not None:
    rows = ref.apply_rows(ref.keep_top_k, rows, np.int32(k))
  if p is not None:
    rows = ref.apply_rows(ref.keep_top_p, rows, np.float32(p))
  if min_p is not None:
    rows = ref.apply_rows(ref.keep_min_p, rows, np.float32(min_p))
  return rows


CHI_SQUARE_CASES = ((5, None, None), (None, 0.8, None), (None, None, 0.05), (6, 0.7, 0.05), (None, None, None))


def test_sample_distribution_chi_square() -> None:
  """20000 draws per filter combination (one program for all) against the filtered softmax."""
  logits = np.log(np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.04, 0.03, 0.02, 0.01], np.float32))
  logits = logits[np.random.default_rng(7).permutation(10)]
  draws = 20000
  keys = jax.random.split(jax.random.key(230), draws)

  @jax.jit
  def draw_all(keys: jax.Array) -> tuple[jax.Array, ...]:
    return tuple(
      jax.vmap(lambda key, k=k, p=p, m=m: S.sample(key, logits, top_k=k, top_p=p, min_p=m))(keys)
      for k, p, m in CHI_SQUARE_CASES
    )

  for (k, p, min_p), tokens in zip(CHI_SQUARE_CASES, draw_all(keys), strict=True):
    filtered = _kept_sets(logits[None], k, p, min_p)[0].astype(np.float64)
    expected = np.exp(filtered - filtered.max())
    expected /= expected.sum()
    counts = np.bincount(np.asarray(tokens), minlength=10)
    assert np.all(counts[expected == 0] == 0), (k, p, min_p)
    support = expected > 0
    statistic, p_value = stats.chisquare(counts[support], expected[support] * draws)
    assert p_value > 1e-3, (k, p, min_p, statistic, counts, expected)


def test_sample_takes_only_kept_entries_and_both_paths_agree() -> None:
  """Whole rows, max_k candidates and the fallback (a k above max_k) draw the same token for the same key."""
  logits = _ties((6, 24))
  logits[:, :4] = NAN
  logits[5] = -INF
  k = np.array([1, 3, 7, 12, 2, 5], np.int32)
  p = np.array([0.5, 0.9, 1.0, 0.2, 0.6, 0.5], np.float32)
  kept = np.zeros(logits.shape, bool)
  for row in range(6):
    r = ref.masked(logits[row], ref.keep_top_k(logits[row], int(k[row])))
    kept[row] = ~np.isneginf(ref.masked(r, ref.keep_top_p(r, float(p[row]))))

  @jax.jit
  def draw(keys: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    def one(key: jax.Array, max_k: int | None) -> jax.Array:
      return S.sample(key, logits, top_k=k, top_p=p, temperature=0.8, max_k=max_k)

    whole = jax.lax.map(lambda key: one(key, None), keys)
    by_candidates = jax.lax.map(lambda key: one(key, 12), keys)
    fallback = jax.lax.map(lambda key: one(key, 4), keys)  # k = 7 and 12 exceed max_k
    return whole, by_candidates, fallback

  whole, by_candidates, fallback = draw(jax.random.split(jax.random.key(3), 20))
  assert_bitwise_equal(by_candidates, whole)
  assert_bitwise_equal(fallback, whole)
  tokens = np.asarray(whole)
  assert np.all(kept[np.arange(5), tokens[:, :5]])
  assert np.all(tokens[:, 5] == 0)  # an all -inf row draws index 0
  assert len(np.unique(tokens[:, 2])) > 3  # sampled, not a fixed point


def test_sample_is_deterministic_per_key_and_greedy_at_temperature_zero() -> None:
  logits = _ties((4, 3, 30))
  logits[0, 0, 0] = NAN
  logits[1, 1] = NAN
  temperature = np.array([0.0, 1.0, 0.0], np.float32)  # per row (the last batch axis)

  @jax.jit
  def run(key: jax.Array, x: jax.Array) -> tuple[jax.Array, ...]:
    greedy = [
      S.sample(key, x, temperature=0, **options)
      for options in ({}, {"top_k": 3}, {"top_k": 3, "max_k": 4}, {"top_p": 0.5, "min_p": 0.1})
    ]
    return S.sample(key, x, top_p=0.9), S.sample(key, x, temperature=temperature), *greedy

  key = jax.random.key(5)
  first, mixed, *greedy = run(key, logits)
  again = run(key, logits)
  assert_bitwise_equal(again[0], first)
  assert not np.array_equal(np.asarray(run(jax.random.key(6), logits)[0]), np.asarray(first))
  expected = ref.greedy(logits)
  for tokens in greedy:
    assert_bitwise_equal(tokens, expected)
  assert_bitwise_equal(np.asarray(mixed)[:, [0, 2]], expected[:, [0, 2]])


@pytest.mark.long  # tests/test_sampling_transforms.py maps each argument alone by default
def test_vmap_over_keys_and_logits() -> None:
  logits = _normal((5, 3, 12))
  keys = jax.random.split(jax.random.key(9), 5)
  k = np.array([1, 2, 3, 4, 5], np.int32)

  @jax.jit
  def batched(keys: jax.Array, x: jax.Array, k: jax.Array) -> tuple[jax.Array, jax.Array]:
    tokens = jax.vmap(lambda key, x, k: S.sample(key, x, top_k=k, top_p=0.9, max_k=4))(keys, x, k)
    return tokens, jax.vmap(S.top_k_mask)(x, k)

  tokens, masks = batched(keys, logits, k)
  one_by_one = np.stack([S.sample(keys[i], logits[i], top_k=k[i], top_p=0.9, max_k=4) for i in range(5)])
  assert_bitwise_equal(tokens, one_by_one)
  assert_bitwise_equal(masks, np.stack([ref.apply_rows(ref.keep_top_k, logits[i], k[i]) for i in range(5)]))


def test_row_offset_numbers_the_rows_as_in_the_whole_batch() -> None:
  """``sample(key, x[a:b], row_offset=a)`` is rows ``a:b`` of ``sample(key, x)``, bit for bit, with the offset a
  Python int, a NumPy or JAX integer scalar, or traced; a traced one is taken modulo 2**32; ``jax.vmap`` over the
  offset (with the logits, or with shared logits) draws each one's row."""
  logits = np.random.default_rng(4101).standard_normal((12, 40)).astype(np.float32)  # no entry dominates a row
  key = jax.random.key(4)

  def draw(x: Any, row_offset: Any) -> jax.Array:
    return S.sample(key, x, temperature=0.8, top_k=7, top_p=0.9, max_k=4, row_offset=row_offset)

  whole = np.asarray(draw(logits, None))
  assert len(np.unique(whole)) > 3  # sampled, not a fixed point
  jitted = jax.jit(draw)
  for a, b in ((0, 12), (3, 7), (11, 12)):
    for offset in (a, np.int64(a), jnp.int32(a), jnp.uint32(a)):
      assert_bitwise_equal(draw(logits[a:b], offset), whole[a:b])
    assert_bitwise_equal(jitted(logits[a:b], jnp.int32(a)), whole[a:b])
  assert_bitwise_equal(jitted(logits, jnp.int32(-1)), draw(logits, 2**32 - 1))
  rows = jnp.arange(12, dtype=jnp.int32)
  mapped = jax.jit(jax.vmap(lambda offset, row: draw(row[None], offset)))(rows, logits)  # row i as row i
  assert_bitwise_equal(mapped[:, 0], whole)
  shared = jax.jit(jax.vmap(lambda offset: draw(logits[5:6], offset)))(rows)  # row 5's logits as row i
  assert_bitwise_equal(shared[5:6, 0], whole[5:6])
  assert len(np.unique(np.asarray(shared))) > 1  # each offset its own noise


def test_jvp_and_grad_of_masked_logits_flow_to_kept_entries_only() -> None:
  logits = jnp.asarray(_normal((3, 20)))
  tangent = jnp.asarray(_normal((3, 20)))
  filters = (lambda x: S.top_k_mask(x, 4), lambda x: S.top_p_mask(x, 0.7), lambda x: S.min_p_mask(x, 0.2))

  @jax.jit
  def run(x: jax.Array, t: jax.Array) -> tuple[Any, ...]:
    def kept_sum(fn: Any, x: jax.Array) -> jax.Array:
      y = fn(x)
      return jnp.sum(jnp.where(jnp.isfinite(y), y, np.float32(0)))

    return tuple((jax.jvp(fn, (x,), (t,)), jax.grad(functools.partial(kept_sum, fn))(x)) for fn in filters)

  for (out, out_tangent), grad in run(logits, tangent):
    kept = np.isfinite(np.asarray(out))
    assert_bitwise_equal(out_tangent, np.where(kept, np.asarray(tangent), np.float32(0)))
    assert_bitwise_equal(grad, kept.astype(np.float32))


BAD_CALLS = [
  ("logits.dtype=int32", lambda: S.top_k_mask(np.arange(4, dtype=np.int32), 2)),
  ("logits.shape=()", lambda: S.top_p_mask(np.float32(1), 0.5)),
  ("p.shape=(3,)", lambda: S.top_p_mask(np.zeros((2, 4), np.float32), np.zeros(3, np.float32))),
  ("min_p.shape=(2, 2)", lambda: S.min_p_mask(np.zeros((2, 4), np.float32), np.zeros((2, 2), np.float32))),
  ("k=2.0", lambda: S.top_k_mask(np.zeros(4, np.float32), 2.0)),
  ("k.dtype=float32", lambda: S.top_k_mask(np.zeros(4, np.float32), np.float32(2))),
  ("temperature=-0.5", lambda: S.sample(jax.random.key(0), np.zeros(4, np.float32), temperature=-0.5)),
  ("key.dtype=int32", lambda: S.sample(np.zeros(2, np.int32), np.zeros(4, np.float32))),
  ("key=int", lambda: S.sample(0, np.zeros(4, np.float32))),
  ("top_k=1.5", lambda: S.sample(jax.random.key(0), np.zeros(4, np.float32), top_k=1.5)),
  ("max_k=0", lambda: S.top_k_mask(np.zeros(4, np.float32), 2, max_k=0)),
  ("row_offset=1.5", lambda: S.sample(jax.random.key(0), np.zeros(4, np.float32), row_offset=1.5)),
  ("row_offset=True", lambda: S.sample(jax.random.key(0), np.zeros(4, np.float32), row_offset=True)),
  ("row_offset=-1", lambda: S.sample(jax.random.key(0), np.zeros(4, np.float32), row_offset=-1)),
  ("row_offset=4294967296", lambda: S.sample(jax.random.key(0), np.zeros(4, np.float32), row_offset=2**32)),
  ("row_offset=(0, 1)", lambda: S.sample(jax.random.key(0), np.zeros((2, 4), np.float32), row_offset=(0, 1))),
  ("row_offset.shape=(2,)", lambda: S.sample(jax.random.key(0), np.zeros((2, 4), np.float32), row_offset=np.arange(2))),
  ("row_offset.dtype=float32", lambda: S.sample(jax.random.key(0), np.zeros(4, np.float32), row_offset=jnp.float32(1))),
]


@pytest.mark.parametrize(("got", "call"), BAD_CALLS, ids=[g for g, _ in BAD_CALLS])
def test_bad_input_names_the_argument(got: str, call: Any) -> None:
  with pytest.raises(dml.DescriptorError, match="got " + got.replace("(", r"\(").replace(")", r"\)")):
    call()


def test_bad_input_raises_at_trace_time_and_lists_every_problem() -> None:
  with pytest.raises(dml.DescriptorError) as info:
    jax.eval_shape(lambda x: S.sample(jax.random.key(0), x, temperature=-1.0, top_k=0.5), jnp.zeros((2, 3), jnp.int32))
  assert "3 problems" in str(info.value)


def test_traced_out_of_range_values_follow_the_rules() -> None:
  logits = jnp.asarray(_normal((3, 16)))

  @jax.jit
  def run(k: jax.Array, p: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    return S.top_k_mask(logits, k), S.top_p_mask(logits, p), S.sample(jax.random.key(0), logits, temperature=t)

  keep_all, keep_one, tokens = run(jnp.int32(-3), jnp.float32(-1.0), jnp.float32(-2.0))
  assert_bitwise_equal(keep_all, np.asarray(logits))
  assert np.all(np.sum(np.isfinite(np.asarray(keep_one)), axis=-1) == 1)
  assert_bitwise_equal(tokens, ref.greedy(np.asarray(logits)))
  assert not np.any(np.isnan(np.asarray(run(jnp.int32(100), jnp.float32(np.nan), jnp.float32(np.nan))[1])))


def test_compiled_cpu_program_sorts_nothing() -> None:
  logits = jnp.zeros((8, 4096), jnp.float32)
  key = jax.random.key(0)

  def everything(x: jax.Array, k: jax.Array, p: jax.Array) -> tuple[jax.Array, ...]:
    return (
      S.top_k_mask(x, k),
      S.top_p_mask(x, p),
      S.min_p_mask(x, p),
      S.sample(key, x, top_k=k, top_p=p, min_p=0.1),
      S.sample(key, x, top_k=k, top_p=p, max_k=64),
    )

  text = jax.jit(everything).lower(logits, jnp.int32(5), jnp.float32(0.9)).compile().as_text()
  sorts = [line for line in text.splitlines() if " sort(" in line]
  assert not sorts, sorts
