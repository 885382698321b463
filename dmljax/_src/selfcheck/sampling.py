"""The self-check's sampling checks: dmljax.sampling's filters by bits, and ``sample`` by its properties.

The filters (``top_k_mask``, ``top_p_mask``, ``min_p_mask``) are judged bit for bit against
:mod:`.reference`'s NumPy filters: kept entries keep their bits, the others are -inf. The library may count
probability mass at float32 resolution where the reference sums it exactly, so every ``p`` (and ``min_p``) is drawn
at least ``MARGIN`` away from every cumulative sum (every weight) of its row: the two can then not disagree.

``sample`` is judged by properties that hold whatever the noise: the token is an entry the filters keep (above
-inf; index 0 for a row with none), temperature 0 gives the first entry of the order, and the same key gives the
same tokens by the whole-row route (``max_k=1``: the whole-row search and draw for every row that keeps more than
one entry) and on ``max_k`` candidates. Every parameter is per row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

import dmljax as dml
from dmljax._src.selfcheck import reference
from dmljax._src.selfcheck.checks import NotApplicable, Plan, judge_all

MARGIN = 1e-5
LOGITS = ("float16", "bfloat16", "float32", "float64")
SHAPE = (8, 1000)
# Per row: k of top_k_mask (0 and k >= V keep all), and sample's k on whole rows and on at most MAX_K candidates.
TOP_K = (0, 1, 5, 37, 999, 1000, 5000, -3)
SAMPLE_K = (50, 5, 0, 3, 1, 7, 20, 1000)
CANDIDATE_K = (50, 5, 64, 3, 1, 7, 20, 64)
MAX_K = 64
# Per row: the temperature of sample (powers of two divide exactly; 0 is greedy).
TEMPERATURE = (1.0, 0.5, 2.0, 0.0, 1.0, 1.0, 0.5, 1.0)
# Per row: p and min_p values whose answer the rules fix whatever the sums (p >= 1 all, p <= 0 the first; min_p <= 0
# all).
P_RULES = (1.0, 1.5, 0.0, -0.5, 1.0, 0.0, 2.0, -1.0)
MIN_P_RULES = (0.0, -1.0, 0.0, -0.25, 0.0, 0.0, -3.0, 0.0)


def _logits(dtype: np.dtype, seed: int) -> np.ndarray:
  """Rows of random logits with ties, ±0, NaN, ±inf, a row of -inf and NaN, a row of NaN, a peaked and a flat row."""
  rng = np.random.default_rng(seed)
  n = SHAPE[-1]
  x = rng.standard_normal(SHAPE) * 3
  x[1] = rng.integers(-3, 4, n).astype(np.float64)  # ties everywhere, both zeros
  x[1, rng.random(n) < 0.3] = -0.0
  sprinkled = rng.random(n)
  x[2, sprinkled < 0.1] = np.nan
  x[2, (sprinkled >= 0.1) & (sprinkled < 0.2)] = -np.inf
  x[2, (sprinkled >= 0.2) & (sprinkled < 0.25)] = -0.0
  x[3, rng.choice(n, 3, replace=False)] = np.inf  # +inf shares the probability
  x[3, 7] = np.nan
  x[4] = -np.inf
  x[4, rng.choice(n, 5, replace=False)] = np.nan
  x[5] = np.nan
  x[6, 11] = 25.0  # peaked: the top entry holds almost all the mass
  x[7] *= 0.01  # flat: a long tail of similar probabilities counts
  return x.astype(dtype)


def _p_between(cumulative: np.ndarray, rng: np.random.Generator) -> float:
  """A float32 p at least MARGIN away from every cumulative sum of the row, near a random target."""
  bounds = np.concatenate([[0.0], cumulative])
  gaps = [j for j in range(len(bounds) - 1) if bounds[j + 1] - bounds[j] > 4 * MARGIN]
  target = rng.uniform(0.05, 0.95)
  for j in sorted(gaps, key=lambda j: abs((bounds[j] + bounds[j + 1]) / 2 - target)):
    p = float(np.float32((bounds[j] + bounds[j + 1]) / 2))
    if np.abs(bounds - p).min() > MARGIN:
      return p
  return 0.5 if np.abs(bounds - 0.5).min() > MARGIN else 2.0  # no finite entry, or no room: the rule p >= 1


def _min_p_between(weights: np.ndarray, rng: np.random.Generator) -> float:
  """A float32 min_p at least MARGIN (relative) away from every weight of the row, near a random target."""
  distinct = np.unique(weights[weights > 0].astype(np.float64))
  target = np.exp(rng.uniform(np.log(0.01), np.log(0.9)))
  if not len(distinct):
    return float(np.float32(target))  # nothing above -inf: any min_p keeps nothing
  bounds = np.concatenate([[distinct[0] / 4], distinct, [1.0]])
  middles = np.sqrt(bounds[:-1] * bounds[1:])
  for m in sorted(middles, key=lambda m: abs(np.log(m / target))):
    m32 = float(np.float32(m))
    if 0 < m32 < 1 and (np.abs(distinct - m32) > MARGIN * m32).all():
      return m32
  return 0.0  # the rule: min_p <= 0 keeps all


def _top_p_values(x: np.ndarray, seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed + 1)
  _, cumulative = reference.top_p_cumulative(x)
  return np.array([_p_between(c, rng) for c in cumulative], np.float32)


def _min_p_values(x: np.ndarray, seed: int) -> np.ndarray:
  rng = np.random.default_rng(seed + 2)
  return np.array([_min_p_between(w, rng) for w in reference.sampling_weights(x)], np.float32)


def _judge_mask(what: str, x: np.ndarray, keep: np.ndarray) -> Callable[[Any], str | None]:
  want = reference.masked_bits(x, keep)

  def judge(got: Any) -> str | None:
    got = np.asarray(got)
    if got.dtype != x.dtype or got.shape != x.shape:
      return f"{what}: {got.dtype}{list(got.shape)} returned, {x.dtype}{list(x.shape)} expected"
    bad = np.argwhere(reference.bits_of(got) != want)
    if not len(bad):
      return None
    r, i = (int(v) for v in bad[0])
    kept = "kept" if keep[r, i] and not np.isnan(reference.decoded(x[r, i])) else "dropped (-inf)"
    return f"{what}, row {r}, entry {i} (logit {reference.decoded(x[r, i])}): {got[r, i]!r} returned; should be {kept}"

  return judge


def _float_logits(dtype: np.dtype) -> None:
  if np.dtype(dtype).name not in LOGITS:
    raise NotApplicable("sampling takes float16, bfloat16, float32 and float64 logits")


def top_k_mask(dtype: np.dtype, seed: int) -> Plan:
  """top_k_mask with one k per row (k <= 0 and k >= V keep all), and a scalar k."""
  _float_logits(dtype)
  x = _logits(dtype, seed)
  k = np.array(TOP_K, np.int32)
  judges = [
    _judge_mask("top_k_mask, k per row", x, reference.top_k_keep(x, k)),
    _judge_mask("top_k_mask, k=10", x, reference.top_k_keep(x, np.int32(10))),
  ]
  return Plan((x, k), lambda x, k: [dml.sampling.top_k_mask(x, k), dml.sampling.top_k_mask(x, 10)], judge_all(judges))


def top_p_mask(dtype: np.dtype, seed: int) -> Plan:
  """top_p_mask with p per row away from every cumulative sum, and the rules p >= 1 (all) and p <= 0 (first)."""
  _float_logits(dtype)
  x = _logits(dtype, seed)
  p, rules = _top_p_values(x, seed), np.array(P_RULES, np.float32)
  judges = [
    _judge_mask(f"top_p_mask, p per row {p.tolist()}", x, reference.top_p_keep(x, p)),
    _judge_mask(f"top_p_mask, p per row {rules.tolist()}", x, reference.top_p_keep(x, rules)),
  ]
  return Plan(
    (x, p, rules), lambda x, p, r: [dml.sampling.top_p_mask(x, p), dml.sampling.top_p_mask(x, r)], judge_all(judges)
  )


def min_p_mask(dtype: np.dtype, seed: int) -> Plan:
  """min_p_mask with min_p per row away from every weight, and the rule min_p <= 0 (all)."""
  _float_logits(dtype)
  x = _logits(dtype, seed)
  m, rules = _min_p_values(x, seed), np.array(MIN_P_RULES, np.float32)
  judges = [
    _judge_mask(f"min_p_mask, min_p per row {m.tolist()}", x, reference.min_p_keep(x, m)),
    _judge_mask(f"min_p_mask, min_p per row {rules.tolist()}", x, reference.min_p_keep(x, rules)),
  ]
  return Plan(
    (x, m, rules), lambda x, m, r: [dml.sampling.min_p_mask(x, m), dml.sampling.min_p_mask(x, r)], judge_all(judges)
  )


def _pipeline(x: np.ndarray, temperature: np.ndarray, k: np.ndarray, seed: int) -> tuple[Any, ...]:
  """sample's filters in the reference, on x / temperature: (p, min_p, kept entries). The library ranks the raw
  logits and weighs the scaled ones; these temperatures are powers of two, so x / temperature is exact in float64,
  has the raw logits' order (no two distinct logits tie) and their scaled weights: one reference serves both."""
  t = np.where(temperature > 0, temperature, 1.0).astype(np.float64)[:, None]
  scaled = reference.decoded(x) / t
  after_k = np.where(reference.top_k_keep(scaled, k), scaled, -np.inf)
  after_k = np.where(np.isnan(scaled), np.nan, after_k)
  p = _top_p_values(after_k, seed)
  after_p = np.where(reference.top_p_keep(after_k, p), after_k, -np.inf)
  m = _min_p_values(after_p, seed)
  keep = reference.min_p_keep(after_p, m) & (after_p > -np.inf)
  return p, m, keep


def _judge_tokens(what: str, keep: np.ndarray, greedy: np.ndarray | None) -> Callable[[Any], str | None]:
  def judge(tokens: Any) -> str | None:
    tokens = np.asarray(tokens)
    if tokens.dtype != np.int32 or tokens.shape != keep.shape[:-1]:
      return f"{what}: {tokens.dtype}{list(tokens.shape)} returned, int32{list(keep.shape[:-1])} expected"
    for r, token in enumerate(tokens.tolist()):
      if greedy is not None and greedy[r] >= 0:
        if token != greedy[r]:
          return f"{what}, row {r}: token {token}; temperature 0 takes the first entry of the order, {greedy[r]}"
        continue
      if not keep[r].any():
        if token != 0:
          return f"{what}, row {r}: token {token}; a row with nothing to draw gives index 0"
      elif not 0 <= token < keep.shape[-1] or not keep[r, token]:
        return f"{what}, row {r}: token {token} is not an entry the filters keep ({int(keep[r].sum())} kept)"
    return None

  return judge


def sample(dtype: np.dtype, seed: int) -> Plan:
  """sample with temperature, top_k, top_p and min_p per row: kept tokens, greedy rows, whole rows = candidates."""
  _float_logits(dtype)
  x = _logits(dtype, seed)
  temperature = np.array(TEMPERATURE, np.float32)
  k, small_k = np.array(SAMPLE_K, np.int32), np.array(CANDIDATE_K, np.int32)
  p, m, keep = _pipeline(x, temperature, k, seed)
  small_p, small_m, small_keep = _pipeline(x, temperature, small_k, seed + 3)
  first = reference.sampling_order(x)[:, 0]
  greedy = np.where(temperature == 0, first, -1)
  greedy_all = first

  def compute(x: jax.Array, t: jax.Array, k: jax.Array, p: jax.Array, m: jax.Array, *small: jax.Array) -> Any:
    key = jax.random.key(seed)
    sk, sp, sm = small
    tokens = dml.sampling.sample(key, x, temperature=t, top_k=k, top_p=p, min_p=m)
    # max_k=1: every row that keeps more than its first entry is filtered and drawn by the whole-row route.
    whole = dml.sampling.sample(key, x, temperature=t, top_k=sk, top_p=sp, min_p=sm, max_k=1)
    candidates = dml.sampling.sample(key, x, temperature=t, top_k=sk, top_p=sp, min_p=sm, max_k=MAX_K)
    return [tokens, whole, candidates, dml.sampling.sample(key, x, temperature=0.0)]

  judge_tokens = _judge_tokens("sample, per-row temperature/top_k/top_p/min_p", keep, greedy)
  judge_whole = _judge_tokens("sample, k <= max_k on whole rows", small_keep, greedy)
  judge_greedy = _judge_tokens("sample, temperature 0", np.ones(x.shape, bool), greedy_all)

  def judge(outputs: Any) -> str | None:
    tokens, whole, candidates, all_greedy = (np.asarray(o) for o in outputs)
    problem = judge_tokens(tokens) or judge_whole(whole) or judge_greedy(all_greedy)
    if problem:
      return problem
    if not np.array_equal(whole, candidates):
      r = int(np.flatnonzero(whole != candidates)[0])
      return (
        f"sample, row {r}: token {candidates[r]} on max_k={MAX_K} candidates, {whole[r]} by the whole-row route "
        "(max_k=1, same key)"
      )
    return None

  return Plan((x, temperature, k, p, m, small_k, small_p, small_m), compute, judge)
