"""dmljax.sampling (issue 23): filters against an independent NumPy reference, runtime parameters, the draw.

Inputs come from fixed seeds; rows of small integers make ties at every boundary. Every filter result is
compared by bits with tests/sampling_reference.py; ``sample`` is checked through what it may return (a kept
entry), its distribution (a chi-square test over many keys), its determinism and its two paths (whole rows,
``max_k`` candidates), which must give the same token for the same key.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sampling_reference as ref
from _helpers import assert_bitwise_equal
from scipy import stats

import dmljax as dml
from dmljax._src import sampling as sampling_impl

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


@pytest.mark.parametrize("k", KS)
def test_top_k_mask_hand_rows(k: int) -> None:
  expected = ref.apply_rows(ref.keep_top_k, HAND_ROWS, np.int32(k))
  assert_bitwise_equal(S.top_k_mask(HAND_ROWS, k), expected)
  assert_bitwise_equal(S.top_k_mask(HAND_ROWS, k, max_k=3), expected)


@pytest.mark.parametrize("p", PS)
def test_top_p_mask_hand_rows(p: float) -> None:
  assert_bitwise_equal(S.top_p_mask(HAND_ROWS, p), ref.apply_rows(ref.keep_top_p, HAND_ROWS, np.float32(p)))


@pytest.mark.parametrize("min_p", MIN_PS)
def test_min_p_mask_hand_rows(min_p: float) -> None:
  expected = ref.apply_rows(ref.keep_min_p, HAND_ROWS, np.float32(min_p))
  assert_bitwise_equal(S.min_p_mask(HAND_ROWS, min_p), expected)


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16, np.float16])
@pytest.mark.parametrize("make", [_ties, _normal])
def test_filters_per_row_parameters_against_reference(dtype: Any, make: Any) -> None:
  logits = make((3, 5, 40), dtype)
  logits[0, 0, 3] = NAN
  k = _RNG.integers(-2, 45, (3, 5)).astype(np.int32)
  p = _RNG.uniform(-0.1, 1.1, (3, 1)).astype(np.float32)
  min_p = _RNG.uniform(0, 1, (5,)).astype(np.float32)
  assert_bitwise_equal(S.top_k_mask(logits, k), ref.apply_rows(ref.keep_top_k, logits, k))
  assert_bitwise_equal(S.top_k_mask(logits, k, max_k=8), ref.apply_rows(ref.keep_top_k, logits, k))
  assert_bitwise_equal(S.top_p_mask(logits, p), ref.apply_rows(ref.keep_top_p, logits, p))
  assert_bitwise_equal(S.min_p_mask(logits, min_p), ref.apply_rows(ref.keep_min_p, logits, min_p))


def test_top_p_on_a_long_row_of_varied_weights() -> None:
  logits = _normal((4, 3000))
  p = np.array([0.2, 0.6, 0.9, 0.999], np.float32)
  assert_bitwise_equal(S.top_p_mask(logits, p), ref.apply_rows(ref.keep_top_p, logits, p))


def test_float64_logits_under_x64() -> None:
  with jax.enable_x64(True):
    logits = _normal((2, 30), np.float64)
    logits[1, 4] = NAN
    assert_bitwise_equal(S.top_k_mask(logits, 5), ref.apply_rows(ref.keep_top_k, logits, np.int32(5)))
    assert_bitwise_equal(S.top_p_mask(logits, 0.8), ref.apply_rows(ref.keep_top_p, logits, np.float32(0.8)))
    token = S.sample(jax.random.key(1), logits, temperature=0.0)
    assert_bitwise_equal(token, ref.greedy(logits))


def test_one_program_serves_every_parameter_value() -> None:
  logits = jnp.asarray(_normal((4, 64)))
  key = jax.random.key(0)
  jitted = {
    "top_k": sampling_impl._top_k_mask,
    "top_p": sampling_impl._top_p_mask,
    "min_p": sampling_impl._min_p_mask,
    "sample": sampling_impl._sample,
  }
  before = {name: fn._cache_size() for name, fn in jitted.items()}
  for k, p, m, t in [(1, 0.1, 0.0, 0.0), (5, 0.5, 0.2, 0.7), (np.int32(9), np.float32(0.9), 0.5, 1.0)]:
    S.top_k_mask(logits, k)
    S.top_p_mask(logits, p)
    S.min_p_mask(logits, m)
    S.sample(key, logits, temperature=t, top_k=k, top_p=p, min_p=m)
  after = {name: fn._cache_size() for name, fn in jitted.items()}
  assert {name: after[name] - before[name] for name in jitted} == dict.fromkeys(jitted, 1)

  traces = []

  @jax.jit
  def step(key: jax.Array, logits: jax.Array, k: jax.Array, p: jax.Array, t: jax.Array) -> jax.Array:
    traces.append(1)
    return S.sample(key, logits, temperature=t, top_k=k, top_p=p, max_k=8)

  for k, p, t in [(3, 0.5, 1.0), (20, 0.9, 0.5), (0, 1.0, 0.0)]:
    step(key, logits, jnp.int32(k), jnp.float32(p), jnp.float32(t))
  per_row = step(key, logits, jnp.arange(4, dtype=jnp.int32), jnp.full(4, 0.5, jnp.float32), jnp.ones(4, jnp.float32))
  assert len(traces) == 2 and per_row.shape == (4,)  # scalar parameters, then per-row ones


def _kept_sets(logits: np.ndarray, k: int | None, p: float | None, min_p: float | None) -> np.ndarray:
  rows = np.asarray(logits, np.float32)
  if k is not None:
    rows = ref.apply_rows(ref.keep_top_k, rows, np.int32(k))
  if p is not None:
    rows = ref.apply_rows(ref.keep_top_p, rows, np.float32(p))
  if min_p is not None:
    rows = ref.apply_rows(ref.keep_min_p, rows, np.float32(min_p))
  return rows


@pytest.mark.parametrize(
  ("k", "p", "min_p"), [(5, None, None), (None, 0.8, None), (None, None, 0.05), (6, 0.7, 0.05), (None, None, None)]
)
def test_sample_distribution_chi_square(k: int | None, p: float | None, min_p: float | None) -> None:
  logits = np.log(np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.04, 0.03, 0.02, 0.01], np.float32))
  logits = logits[np.random.default_rng(7).permutation(10)]
  filtered = _kept_sets(logits[None], k, p, min_p)[0].astype(np.float64)
  expected = np.exp(filtered - filtered.max())
  expected /= expected.sum()
  draws = 20000
  keys = jax.random.split(jax.random.key(230), draws)
  tokens = jax.vmap(lambda key: S.sample(key, logits, top_k=k, top_p=p, min_p=min_p))(keys)
  counts = np.bincount(np.asarray(tokens), minlength=10)
  assert np.all(counts[expected == 0] == 0)
  support = expected > 0
  statistic, p_value = stats.chisquare(counts[support], expected[support] * draws)
  assert p_value > 1e-3, (statistic, counts, expected)


def test_sample_takes_only_kept_entries_and_both_paths_agree() -> None:
  logits = _ties((6, 50))
  logits[:, :4] = NAN
  logits[5] = -INF
  k = np.array([1, 3, 7, 12, 0, 5], np.int32)
  p = np.array([0.5, 0.9, 1.0, 0.2, 0.6, 0.5], np.float32)
  kept = np.isfinite(_kept_sets(logits, None, None, None)) & False
  for row in range(6):
    r = ref.masked(logits[row], ref.keep_top_k(logits[row], int(k[row])))
    r = ref.masked(r, ref.keep_top_p(r, float(p[row])))
    kept[row] = ~np.isneginf(r)
  for seed in range(20):
    key = jax.random.key(seed)
    whole = S.sample(key, logits, top_k=k, top_p=p, temperature=0.8)
    by_candidates = S.sample(key, logits, top_k=k, top_p=p, temperature=0.8, max_k=12)
    assert_bitwise_equal(by_candidates, whole)
    tokens = np.asarray(whole)
    assert np.all(kept[np.arange(5), tokens[:5]])
    assert tokens[5] == 0  # an all -inf row draws index 0
  fallback = S.sample(jax.random.key(3), logits, top_k=k, top_p=p, max_k=4)  # k = 7, 12 and 0 exceed max_k
  assert_bitwise_equal(fallback, S.sample(jax.random.key(3), logits, top_k=k, top_p=p))


def test_sample_is_deterministic_per_key_and_greedy_at_temperature_zero() -> None:
  logits = _ties((4, 3, 30))
  logits[0, 0, 0] = NAN
  logits[1, 1] = NAN
  key = jax.random.key(5)
  first = S.sample(key, logits, top_p=0.9)
  assert_bitwise_equal(S.sample(key, logits, top_p=0.9), first)
  assert not np.array_equal(np.asarray(S.sample(jax.random.key(6), logits)), np.asarray(S.sample(key, logits)))
  expected = ref.greedy(logits)
  for options in ({}, {"top_k": 3}, {"top_k": 3, "max_k": 4}, {"top_p": 0.5, "min_p": 0.1}):
    assert_bitwise_equal(S.sample(key, logits, temperature=0, **options), expected)
  temperature = np.array([0.0, 1.0, 0.0], np.float32)  # per row (the last batch axis)
  mixed = np.asarray(S.sample(key, logits, temperature=temperature))
  assert_bitwise_equal(mixed[:, [0, 2]], expected[:, [0, 2]])


def test_vmap_over_keys_and_logits() -> None:
  logits = _normal((5, 3, 40))
  keys = jax.random.split(jax.random.key(9), 5)
  k = np.array([1, 2, 3, 4, 5], np.int32)
  batched = jax.vmap(lambda key, x, k: S.sample(key, x, top_k=k, top_p=0.9, max_k=4))(keys, logits, k)
  one_by_one = np.stack([S.sample(keys[i], logits[i], top_k=int(k[i]), top_p=0.9, max_k=4) for i in range(5)])
  assert_bitwise_equal(batched, one_by_one)
  masks = jax.vmap(S.top_k_mask)(logits, k)
  assert_bitwise_equal(masks, np.stack([ref.apply_rows(ref.keep_top_k, logits[i], k[i]) for i in range(5)]))
  masks = jax.vmap(S.top_p_mask, (0, None))(logits, np.float32(0.5))
  assert_bitwise_equal(masks, ref.apply_rows(ref.keep_top_p, logits, np.float32(0.5)))


@pytest.mark.parametrize("which", ["top_k", "top_p", "min_p"])
def test_jvp_of_masked_logits_flows_to_kept_entries_only(which: str) -> None:
  logits = jnp.asarray(_normal((3, 20)))
  tangent = jnp.asarray(_normal((3, 20)))
  fn = {
    "top_k": lambda x: S.top_k_mask(x, 4),
    "top_p": lambda x: S.top_p_mask(x, 0.7),
    "min_p": lambda x: S.min_p_mask(x, 0.2),
  }[which]
  out, out_tangent = jax.jvp(fn, (logits,), (tangent,))
  kept = np.isfinite(np.asarray(out))
  assert_bitwise_equal(out_tangent, np.where(kept, np.asarray(tangent), np.float32(0)))
  grad = jax.grad(lambda x: jnp.sum(jnp.where(jnp.isfinite(fn(x)), fn(x), 0.0)))(logits)
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


def _hlo(fn: Any, *args: Any) -> str:
  return jax.jit(fn).lower(*args).compile().as_text()


def test_compiled_cpu_programs_sort_nothing() -> None:
  logits = jnp.zeros((8, 4096), jnp.float32)
  key = jax.random.key(0)
  programs = {
    "top_k_mask": _hlo(S.top_k_mask, logits, jnp.int32(5)),
    "top_p_mask": _hlo(S.top_p_mask, logits, jnp.float32(0.9)),
    "min_p_mask": _hlo(S.min_p_mask, logits, jnp.float32(0.1)),
    "sample": _hlo(lambda x, k, p: S.sample(key, x, top_k=k, top_p=p, min_p=0.1), logits, jnp.int32(5), 0.9),
    "sample max_k": _hlo(lambda x, k: S.sample(key, x, top_k=k, top_p=0.9, max_k=64), logits, jnp.int32(5)),
  }
  for name, text in programs.items():
    sorts = [line for line in text.splitlines() if " sort(" in line and "4096]" in line.split(" sort(")[0]]
    assert not sorts, (name, sorts)
