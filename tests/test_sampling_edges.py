"""dmljax.sampling's edges and noise (issue 29, points 2 and 3).

k of every integer width clipped before it is narrowed; +inf logits sharing the draw; temperatures tending to
0 in every dtype; all-NaN and all -inf rows; noise streams of 64 bits (no two keys share one), checked across
keys and not only through the marginal distribution; the candidates' decision staying one scalar under vmap.
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

S = dml.sampling
_RNG = np.random.default_rng(2930)
ROW = (_RNG.standard_normal((3, 40)) * 2).astype(np.float32)


@pytest.mark.parametrize(
  "k",
  [2**40, -(2**40), np.int64(2**32 + 1), np.uint32(2**31 + 5), np.uint64(2**63 + 1), np.int8(-1), np.array([2**33])],
  ids=["py2**40", "py-2**40", "int64", "uint32", "uint64", "int8", "array-int64"],
)
def test_k_of_any_width_is_clipped_never_wrapped(k: Any) -> None:
  assert_bitwise_equal(S.top_k_mask(ROW, k), ROW)  # k >= V and k <= 0 both keep every entry


def test_traced_wide_k_is_clipped_in_its_own_type() -> None:
  with jax.enable_x64(True):
    got = jax.jit(S.top_k_mask)(ROW, jnp.int64(2**32 + 1))
    assert_bitwise_equal(got, ROW)
    assert_bitwise_equal(
      jax.jit(S.top_k_mask)(ROW, jnp.int64(2**32 + 3) - 2**32), ref.apply_rows(ref.keep_top_k, ROW, 3)
    )
  assert_bitwise_equal(jax.jit(S.top_k_mask)(ROW, jnp.uint32(2**31 + 5)), ROW)


def test_a_non_integer_k_is_refused() -> None:
  with pytest.raises(dml.DescriptorError, match="k must be an integer"):
    S.top_k_mask(ROW, 2.5)
  with pytest.raises(dml.DescriptorError, match="top_k must be an integer"):
    S.sample(jax.random.key(0), ROW, top_k=np.float32(3))


def test_infinite_logits_share_the_draw() -> None:
  logits = np.array([1.0, np.inf, 2.0, np.inf], np.float32)
  keys = jax.random.split(jax.random.key(31), 4000)
  for options in ({}, {"top_p": 0.9}, {"top_k": 3}, {"min_p": 0.5}):
    tokens = np.asarray(jax.jit(jax.vmap(lambda key, o=options: S.sample(key, logits, **o)))(keys))
    counts = np.bincount(tokens, minlength=4)
    assert counts[0] == counts[2] == 0, options
    assert 1800 < counts[1] < 2200, (options, counts)  # binomial(4000, 1/2): 6 standard deviations
  # top_p: each +inf entry holds half of the probability.
  assert (~np.isneginf(np.asarray(S.top_p_mask(logits, 0.5)))).tolist() == [False, True, False, False]
  assert (~np.isneginf(np.asarray(S.top_p_mask(logits, 0.75)))).tolist() == [False, True, False, True]


@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16, np.float32])
def test_temperatures_tending_to_zero_are_greedy(dtype: Any) -> None:
  logits = np.array([[100.0, 200.0, 300.0], [3.0, -1.0, 2.0]], dtype)
  keys = jax.random.split(jax.random.key(32), 64)
  for temperature in (1e-37, 1e-45, 1e-20, 1e-3):
    tokens = jax.vmap(lambda key, t=temperature: S.sample(key, logits, temperature=t))(keys)
    assert np.all(np.asarray(tokens) == np.array([2, 0])), temperature


def test_rows_of_nan_or_minus_infinity_draw_index_zero() -> None:
  logits = np.array([[np.nan] * 6, [-np.inf] * 6, [np.nan, -np.inf, np.nan, -np.inf, np.nan, np.nan]], np.float32)
  key = jax.random.key(33)
  for options in ({}, {"top_k": 2}, {"top_p": 0.5}, {"min_p": 0.1}, {"top_k": 9, "top_p": 0.9, "min_p": 0.2}):
    for temperature in (0.0, 1.0):
      assert S.sample(key, logits, temperature=temperature, **options).tolist() == [0, 0, 0], options
  for mask in (S.top_k_mask(logits, 2), S.top_p_mask(logits, 0.5), S.min_p_mask(logits, 0.1)):
    assert np.all(np.isneginf(np.asarray(mask)))


def _conds(jaxpr: Any) -> list[Any]:
  """Every ``cond`` equation of a closed jaxpr, nested ones included."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "cond":
      found.append(eqn)
    for sub in jax.core.subjaxprs(eqn) if hasattr(jax.core, "subjaxprs") else _subjaxprs(eqn):
      found.extend(_conds(sub))
  return found


def _subjaxprs(eqn: Any) -> list[Any]:
  subs = []
  for value in eqn.params.values():
    for item in value if isinstance(value, (tuple, list)) else (value,):
      inner = getattr(item, "jaxpr", item)
      if hasattr(inner, "eqns"):
        subs.append(inner)
  return subs


@pytest.mark.parametrize("mapped", ["k", "logits", "key", "temperature"])
def test_the_candidates_decision_stays_scalar_under_vmap(mapped: str) -> None:
  """Under jax.vmap over any argument (``k`` per mapped instance, the logits, the key, the temperature) every
  ``cond`` that guards whole-row work keeps a scalar predicate: it is not turned into a select that always runs
  the search and the whole-row draw."""
  x = jnp.zeros((2, 300), jnp.float32)
  ks, keys = jnp.arange(1, 5, dtype=jnp.int32), jax.random.split(jax.random.key(0), 4)
  xs, ts = jnp.zeros((4, 2, 300), jnp.float32), jnp.linspace(0, 1, 4, dtype=jnp.float32)
  calls = {
    "k": (lambda k: (S.top_k_mask(x, k), S.sample(keys[0], x, top_k=k, top_p=0.9)), ks),
    "logits": (lambda row: (S.top_p_mask(row, 0.9), S.sample(keys[0], row, top_k=5, top_p=0.9)), xs),
    "key": (lambda key: S.sample(key, x, top_k=5, top_p=0.9, min_p=0.1), keys),
    "temperature": (lambda t: S.sample(keys[0], x, temperature=t, top_p=0.9), ts),
  }
  fn, batch = calls[mapped]
  conds = _conds(jax.make_jaxpr(jax.vmap(fn))(batch).jaxpr)
  assert conds, "no cond: the whole-row work would always run"
  assert all(eqn.invars[0].aval.shape == () for eqn in conds), [eqn.invars[0].aval for eqn in conds]


def test_a_parameter_of_one_value_per_row_with_a_trailing_axis_is_read_per_row() -> None:
  """``top_p`` of shape (B, 1) (as ``keepdims`` leaves it) is one value per row, the same as shape (B,); a shape
  that is neither is refused with the reshape that fixes it."""
  logits = jnp.asarray(ROW)
  p = np.array([0.3, 0.6, 0.9], np.float32)
  assert_bitwise_equal(S.top_p_mask(logits, p[:, None]), S.top_p_mask(logits, p))
  key = jax.random.key(5)
  k = np.array([[2], [5], [40]], np.int32)
  assert S.sample(key, logits, top_k=k).tolist() == S.sample(key, logits, top_k=k[:, 0]).tolist()
  with pytest.raises(dml.DescriptorError, match=r"p\.reshape\(\(3,\)\)"):
    S.top_p_mask(logits, np.zeros((3, 2), np.float32))


def test_integer_arrays_are_accepted_wherever_python_ints_are() -> None:
  """A 0-d integer array is a number like the Python int: top_p=jnp.array(1) keeps all, temperature=jnp.array(0)
  is greedy, top_k=jnp.array(2) keeps two."""
  logits = jnp.asarray(ROW)
  key = jax.random.key(6)
  assert_bitwise_equal(S.top_p_mask(logits, jnp.array(1)), S.top_p_mask(logits, 1))
  assert_bitwise_equal(S.min_p_mask(logits, jnp.array(0)), S.min_p_mask(logits, 0))
  assert S.sample(key, logits, temperature=jnp.array(0)).tolist() == np.argmax(ROW, -1).tolist()
  assert_bitwise_equal(S.top_k_mask(logits, jnp.array(2)), S.top_k_mask(logits, 2))


def test_top_p_refuses_rows_past_its_exact_sums_at_trace_time() -> None:
  """Top-p's exact sums hold rows of up to 2**29 entries: a longer row is refused before anything is allocated,
  with what to do instead; top_k_mask and min_p_mask take it."""
  long_rows = jax.ShapeDtypeStruct((1, 2**29 + 1), jnp.float32)
  with pytest.raises(dml.DescriptorError, match="at most 2\\*\\*29"):
    jax.eval_shape(lambda x: S.top_p_mask(x, 0.9), long_rows)
  with pytest.raises(dml.DescriptorError, match="at most 2\\*\\*29"):
    jax.eval_shape(lambda x: S.sample(jax.random.key(0), x, top_p=0.9), long_rows)
  assert jax.eval_shape(lambda x: S.top_k_mask(x, 5), long_rows).shape == long_rows.shape


_U = 2.0**-24  # the spacing of float32 just below 1
F32_MAX = float(np.finfo(np.float32).max)
# Rows on which ranking the raw logits and ranking the scaled ones keep different entries, at the temperature beside
# each: the scaled values tie (T = +inf; (x - m) / T rounding to 0; (x - m) / T subnormal, flushed to 0 on XLA:CPU)
# where the raw logits do not, and the largest logits are not the lowest-index ones.
ORDER_ROWS = np.array(
  [
    [-3.0, 0.0, -np.inf, 5.0, np.nan, 1.0, 4.0, 2.0],
    [1.0, np.inf, -np.inf, 3.0, np.inf, np.nan, 2.0, 0.0],  # +inf logits: drawn among them, at T = +inf too
    [1 - 3 * _U, 1 - _U, 1 - 2 * _U, 1 - _U, 1.0, 1 - 3 * _U, -np.inf, 1 - 2 * _U],
    [0.0, 1.0, 0.5, 3.0, 2.0, -0.25, -0.5, 2.5],
  ],
  np.float32,
)
ORDER_TEMPERATURES = np.array([np.inf, np.inf, F32_MAX, 3e38], np.float32)
ORDER_FILTERS = ((3, 1.0), (0, 0.4), (1, 1.0), (4, 0.6))  # (top_k, top_p) per block of rows; 0 and 1.0: off


def test_the_filters_rank_the_raw_logits_at_every_temperature() -> None:
  """At T = +inf, at T = float32's largest (where (x - m) / T rounds to 0) and at T = 3e38 (where it is subnormal),
  top-k and top-p keep the prefixes of the raw logits' order: the kept set is the reference's (each kept entry drawn,
  uniformly: they all weigh 1), which differs on every one of these rows from what ranking the scaled logits keeps.
  A row with +inf logits draws among its kept +inf entries at T = +inf, never among its finite ones. Both routes
  (candidates; max_k=2, the whole-row search for k = 3 and 4) draw the same tokens."""
  blocks = len(ORDER_FILTERS)
  logits = np.tile(ORDER_ROWS, (blocks, 1))
  temperature = np.tile(ORDER_TEMPERATURES, blocks)
  k = np.repeat(np.array([f[0] for f in ORDER_FILTERS], np.int32), len(ORDER_ROWS))
  p = np.repeat(np.array([f[1] for f in ORDER_FILTERS], np.float32), len(ORDER_ROWS))
  keys = jax.random.split(jax.random.key(8), 2400)

  @jax.jit
  def draw(keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    def one(key: jax.Array, max_k: int | None) -> jax.Array:
      return S.sample(key, logits, temperature=temperature, top_k=k, top_p=p, max_k=max_k)

    return jax.vmap(lambda key: one(key, None))(keys), jax.vmap(lambda key: one(key, 2))(keys)

  tokens, searched = (np.asarray(t) for t in draw(keys))
  assert_bitwise_equal(searched, tokens)
  for row in range(len(logits)):
    top_k, top_p = ORDER_FILTERS[row // len(ORDER_ROWS)]
    args = (logits[row], float(temperature[row]), int(top_k), float(top_p))
    raw, by_scaled = ref.sampler_keep(*args), ref.sampler_keep(*args, ranking="scaled")
    counts = np.bincount(tokens[:, row], minlength=logits.shape[-1])
    assert np.all(counts[~raw] == 0), (row, counts, raw)
    assert np.all(counts[raw] > 0), (row, counts, raw)
    if raw.sum() > 1:
      assert stats.chisquare(counts[raw]).pvalue > 1e-4, (row, counts)
    if row % len(ORDER_ROWS) == 1:  # +inf logits: drawn among the kept +inf entries, not the finite ones
      assert np.all(np.isposinf(logits[row][raw])), (row, raw)
    else:
      assert not np.array_equal(raw, by_scaled), (row, raw, by_scaled)  # the row tells the two readings apart
  greedy = ref.greedy(logits)
  first = 2 * len(ORDER_ROWS)  # the top_k=1 block: the largest logit, whatever the temperature
  assert_bitwise_equal(
    tokens[:, first : first + len(ORDER_ROWS)], np.broadcast_to(greedy[first : first + 4], (len(keys), 4))
  )


def test_the_order_rows_make_the_scaled_values_tie() -> None:
  """What the rows above rely on: (x - m) / T is -0.0 or 0.0 for every finite entry of the first three rows (IEEE
  arithmetic, no flush), and subnormal in the fourth (which XLA:CPU flushes to zero, as the device's own quotient
  shows)."""
  for row, t in zip(ORDER_ROWS[[0, 2]], ORDER_TEMPERATURES[[0, 2]], strict=True):
    z = ref.scaled(row, float(t))
    assert np.all(z[np.isfinite(row)] == 0), z
  z = ref.scaled(ORDER_ROWS[3], float(ORDER_TEMPERATURES[3]))
  assert np.all((np.abs(z) < np.finfo(np.float32).tiny) & ((z != 0) | (ORDER_ROWS[3] == ORDER_ROWS[3].max()))), z
  device = jax.jit(lambda x, t: (x - jnp.max(x)) / t)(ORDER_ROWS[3], ORDER_TEMPERATURES[3])
  assert np.all(np.asarray(device) == 0), device
