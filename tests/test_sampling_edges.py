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

import dmljax as dml
from dmljax._src.sampling import noise

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


def test_noise_streams_are_a_bijection_of_the_key() -> None:
  """Per row, the 64-bit stream is a bijection of the key's two words: 2**17 keys, 2**17 distinct streams,
  also for keys that share their first word (a 32-bit hash of the key would collide about twice here)."""
  count = 2**17
  words = _RNG.integers(0, 2**32, (count, 2), dtype=np.uint64).astype(np.uint32)
  words[: count // 2, 0] = 7  # half the keys share their first word
  for row in (0, 5):
    a, b = jax.jit(noise.streams)(jnp.asarray(words), jnp.full((count,), row, jnp.uint32))
    joined = np.asarray(a).astype(np.uint64) << np.uint64(32) | np.asarray(b).astype(np.uint64)
    assert np.unique(joined).size == count


def test_draws_are_independent_across_keys() -> None:
  """2**17 keys each draw from 12 uniform 16-entry rows: no two keys draw the same 12 tokens (48 bits: about
  2**-15 such pairs expected from independent draws, about 2 if streams were 32-bit), and the tokens of
  neighbouring keys are uncorrelated."""
  count = 2**17
  keys = jax.random.split(jax.random.key(34), count)
  logits = jnp.zeros((12, 16), jnp.float32)
  tokens = np.asarray(jax.jit(jax.vmap(lambda key: S.sample(key, logits)))(keys))
  packed = np.zeros(count, np.uint64)
  for row in range(12):
    packed = packed << np.uint64(4) | tokens[:, row].astype(np.uint64)
  assert np.unique(packed).size == count
  joint = np.bincount(tokens[:-1, 0] * 16 + tokens[1:, 0], minlength=256).reshape(16, 16)
  expected = (count - 1) / 256
  chi_square = float(((joint - expected) ** 2 / expected).sum())
  assert chi_square < 400  # 225 degrees of freedom: mean 225, sd 21


def test_the_candidates_decision_stays_scalar_under_vmap() -> None:
  """Under jax.vmap the whole-row search stays behind a cond (not a select that always runs it)."""
  x = jnp.zeros((4, 2, 300), jnp.float32)
  for fn in (
    lambda row: S.top_k_mask(row, 5),
    lambda row: S.top_p_mask(row, 0.9),
    lambda row: S.sample(jax.random.key(0), row, top_k=5, top_p=0.9),
  ):
    jaxpr = jax.make_jaxpr(jax.vmap(fn))(x)
    text = str(jaxpr)
    assert "cond[" in text, text[:2000]
