"""Top-p is the float32 softmax's nucleus at every vocabulary size (issue 29, point 1).

The reference (tests/sampling_reference.py) sums the float32 softmax's probabilities exactly (float64, in the
order); the kept count must be the exact one wherever p is further than the documented 2**-21 from a
cumulative probability. Rows: long tails (one large logit and a quarter million tiny ones), near-uniform rows
past 2**19 entries (where 32-bit limb sums would overflow with their carries), and p placed just past the
bound on either side of a cumulative sum. Each vocabulary size compiles once; every row is searched whole (the
candidates cannot decide them), so the whole-row search is what is checked.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sampling_reference as ref
from _helpers import assert_bitwise_equal

import dmljax as dml

S = dml.sampling
_RNG = np.random.default_rng(2929)


def _kept(logits: np.ndarray, p: np.ndarray) -> np.ndarray:
  return np.sum(np.isfinite(np.asarray(S.top_p_mask(logits, p))), axis=-1)


def _check(logits: np.ndarray, p: np.ndarray, kept: np.ndarray) -> None:
  for row in range(len(logits)):
    allowed = ref.top_p_counts(logits[row], float(p[row]))
    assert int(kept[row]) in allowed, (row, int(kept[row]), sorted(allowed), float(p[row]))


def _long_tail(length: int, tail: float) -> np.ndarray:
  row = np.full(length, tail, np.float32)
  row[_RNG.integers(length)] = 0
  return row


@pytest.mark.parametrize(
  ("length", "tail", "ps"),
  [
    (262144, -17.4, (0.995, 0.999, 0.5)),  # the float32 nucleus keeps 80,659 and 225,847 entries
    (131072, -18.42, (0.999, 0.9, 0.99)),
  ],
)
def test_long_tails_count(length: int, tail: float, ps: tuple[float, ...]) -> None:
  logits = np.stack([_long_tail(length, tail) for _ in ps])
  p = np.array(ps, np.float32)
  kept = _kept(logits, p)
  _check(logits, p, kept)
  assert kept[0] > 1000  # the tail counts: not the one large entry alone


@pytest.mark.parametrize(
  "length", [256000, *(pytest.param(n, marks=pytest.mark.long) for n in (2**19 - 3, 524400, 2**20, 2**21))]
)
def test_near_uniform_rows_past_two_to_the_nineteen(length: int) -> None:
  logits = np.stack(
    [
      (_RNG.standard_normal(length) * 0.01).astype(np.float32),  # near-uniform: p = 0.5 keeps about half
      (_RNG.standard_normal(length) * 2).astype(np.float32),
      _long_tail(length, -16.0),
    ]
  )
  p = np.array([0.5, 0.9, 0.999], np.float32)
  kept = _kept(logits, p)
  _check(logits, p, kept)
  assert abs(int(kept[0]) - length // 2) < length // 20


@pytest.mark.parametrize("distance", [1e-6, 1.2 * 2.0**-21])
def test_p_just_past_the_bound_from_a_cumulative_sum(distance: float) -> None:
  """p = C_j -/+ d keeps j + 1 / j + 2 entries exactly for d just above the documented bound, 2**-21 (about
  4.8e-7), and for d = 1e-6."""
  length = 50000
  base = (_RNG.standard_normal(length) * 3).astype(np.float32)
  cumulative = np.cumsum(ref.probabilities(base)[ref.order(base)])
  positions = (10, 300, 2000, 9000)
  ps = [cumulative[j] + sign * distance for j in positions for sign in (-1, 1)]
  p = np.array(ps, np.float32)
  assert np.all(np.abs(p.astype(np.float64) - np.repeat(cumulative[list(positions)], 2)) > 2.0**-21)
  logits = np.tile(base, (len(ps), 1))
  kept = _kept(logits, p)
  _check(logits, p, kept)
  expected = [j + 1 if sign < 0 else j + 2 for j in positions for sign in (-1, 1)]
  assert kept.tolist() == expected


def test_min_p_against_the_float64_ratio() -> None:
  """min_p keeps the entries whose probability is at least min_p times the largest, away from the boundary."""
  logits = (_RNG.standard_normal((4, 100000)) * 4).astype(np.float32)
  min_p = np.array([1e-6, 1e-3, 0.1, 0.9], np.float32)
  got = np.isfinite(np.asarray(S.min_p_mask(logits, min_p)))
  ratio = np.exp(logits.astype(np.float64) - logits.max(-1, keepdims=True))
  clear = np.abs(ratio / min_p[:, None] - 1) > 1e-6
  assert np.array_equal(got[clear], (ratio >= min_p[:, None])[clear])
  assert got.sum() > 0


def test_temporaries_are_small_when_the_candidates_decide() -> None:
  """Compiled for (64, 262144) float32 logits (64 MiB): sample with top_k and the masks hold at most the
  logits' size; sample with top_p alone (whose whole-row search and draw are compiled in) at most what
  jax.random.categorical holds."""
  x = jax.ShapeDtypeStruct((64, 262144), jnp.float32)
  key = jax.random.key(0)

  def temporaries(fn: object) -> int:
    return jax.jit(fn).lower(x).compile().memory_analysis().temp_size_in_bytes  # type: ignore[arg-type]

  logits_bytes = 64 * 262144 * 4
  assert temporaries(lambda x: S.sample(key, x, top_k=50, top_p=0.9)) <= 1.01 * logits_bytes
  assert temporaries(lambda x: S.top_k_mask(x, 50)) <= 1.01 * logits_bytes
  assert temporaries(lambda x: S.min_p_mask(x, 0.1)) <= 1.01 * logits_bytes
  assert temporaries(lambda x: S.top_p_mask(x, 0.9)) <= 1.01 * logits_bytes
  categorical = temporaries(lambda x: jax.random.categorical(key, x))
  assert temporaries(lambda x: S.sample(key, x, top_p=0.9)) <= categorical


@pytest.mark.parametrize("off", [-3000, -40, -4, -1, 0, 1, 4, 40, 3000])
def test_the_exact_search_ends_at_the_target_however_far_off_its_guide(off: int) -> None:
  """The whole-row search's float guide may put its threshold a few keys off the exact one (its sums round):
  the exact loop moves the probe a key per pass, then bisects what is left of its bracket; either way the cut
  is the exact prefix. A counting guide off by ``off`` entries stands in for it, on rows of normal logits and on
  rows of a few distinct values, where ``k`` lands inside runs of equal entries (lowest indices first)."""
  from dmljax._src.sampling import search

  normal = (_RNG.standard_normal((3, 5000)) * 3).astype(np.float32)
  few = _RNG.integers(-4, 5, (3, 5000)).astype(np.float32)
  rows = jnp.asarray(np.concatenate([normal, few]))
  k = jnp.array([100, 1000, 4500, 100, 1000, 4500], jnp.int32)
  shape = rows.shape
  target = search.Target(
    parts=lambda fresh: (jnp.ones(shape, jnp.int32),),
    reached=lambda sums: sums[0] >= k,
    guide=lambda fresh: jnp.ones(shape, jnp.float32),
    guide_target=jnp.clip(k + off, 1, shape[-1]).astype(jnp.float32),
  )
  got = jax.jit(lambda r: search.cut(r, search.order_key, target))(rows)
  kept = np.asarray(search.through(search.order_key(rows), *got))
  expected = ref.apply_rows(ref.keep_top_k, np.asarray(rows), np.asarray(k))
  np.testing.assert_array_equal(kept, np.isfinite(expected))
  assert kept.sum(-1).tolist() == np.asarray(k).tolist()


def test_the_benchmark_rows_nucleus() -> None:
  """benchmarks/sampling.py's 64 x 32,000 rows (normal logits times 3), p = 0.9: nuclei of about 1,400 entries,
  past the candidates, where the float guide's rounding puts some row's threshold a key off (the local
  correction's case)."""
  logits = (np.random.default_rng(32064).standard_normal((64, 32000), np.float32) * 3).astype(np.float32)
  p = np.full(64, 0.9, np.float32)
  kept = _kept(logits, p)
  _check(logits, p, kept)
  assert kept.min() > 64


@pytest.mark.parametrize("ties", [2, pytest.param(3, marks=pytest.mark.long), 6])
def test_a_cut_among_equal_entries_takes_the_lower_indices_first(ties: int) -> None:
  """The cut lands among ``ties`` equal logits (scattered over the row): the prefix takes them lowest index first,
  as many as the nucleus needs. Two ties are settled by one check of the lower-index one; three or more by the
  index bisection. p is placed at every step inside the run (one row each, batched: the search runs once)."""
  length = 2000
  base = (_RNG.standard_normal(length) * 0.5).astype(np.float32)
  at = _RNG.choice(length, ties, replace=False)
  ordered = np.sort(base)
  base[at] = (ordered[length - 500] + ordered[length - 501]) / 2  # about the 500th largest, equal to no other
  assert np.sum(base == base[at[0]]) == ties
  cumulative = np.cumsum(ref.probabilities(base)[ref.order(base)])
  first = int(np.nonzero(np.isin(ref.order(base), at))[0][0])  # the run's first position in the order
  ps = [(cumulative[first + m - 1] + cumulative[first + m]) / 2 for m in range(ties)]  # needs m + 1 of the run
  logits = np.tile(base, (ties, 1))
  p = np.array(ps, np.float32)
  got = np.asarray(S.top_p_mask(logits, p))
  assert_bitwise_equal(got, ref.expected_top_p(logits, p, got))
  assert np.sum(np.isfinite(got), axis=-1).tolist() == [first + m + 1 for m in range(ties)]
