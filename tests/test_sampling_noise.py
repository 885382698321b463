"""dmljax.sampling's generator: Threefry-2x32 at (key, row, index) counters and its exponential noise.

The block function is checked against Threefry's published known answers and against JAX's own primitive;
the uniform built from a block is checked to keep its resolution near 0 (where a rare token wins the race);
streams are checked for independence where a weak generator fails first: structured keys (``key(0)``,
``key(1)``, ...), neighbouring rows and neighbouring indices; and a row whose tail of 2**20 tokens each weighs
2**-26 of its top token draws the tail as often as its probability says.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry2x32_p
from scipy import stats

import dmljax as dml
from dmljax._src.sampling import noise

S = dml.sampling
_RNG = np.random.default_rng(3303)

# Random123's known answers for Threefry-2x32 with 20 rounds: (key, counter) -> block.
KNOWN_ANSWERS = [
  ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
  ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
  ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("key, counter, block", KNOWN_ANSWERS)
def test_threefry_gives_the_published_answers(key: tuple[int, int], counter: tuple[int, int], block: tuple[int, int]):
  u32 = lambda v: jnp.uint32(v)  # noqa: E731
  got = noise.threefry2x32(u32(key[0]), u32(key[1]), u32(counter[0]), u32(counter[1]))
  assert [int(g) for g in got] == list(block)


def test_threefry_is_jaxs_block_function() -> None:
  """Bit for bit JAX's own ``threefry2x32`` primitive (the block behind ``jax.random.key``), on random keys and
  counters, under jit."""
  k0, k1, x0, x1 = (jnp.asarray(_RNG.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)) for _ in range(4))
  ours = jax.jit(noise.threefry2x32)(k0, k1, x0, x1)
  jaxs = jax.jit(lambda *a: threefry2x32_p.bind(*a))(k0, k1, x0, x1)
  for a, b in zip(ours, jaxs, strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.asarray(a).dtype == np.uint32


def test_the_uniform_keeps_56_bits_down_to_zero() -> None:
  """``v`` from a block is ``(N + 1/2) / 2**56`` (``N`` the block's top 56 bits) to float32's relative precision,
  down to the smallest ``N``: so ``P(E < x) = 1 - exp(-x)`` holds down to ``x`` near 2**-56, far below the
  2**-24 where 23-bit uniforms stop (and where a token of weight 2**-24 of the row's top stops being drawn)."""
  n = np.concatenate(
    [
      np.arange(0, 4096, dtype=np.uint64),  # the smallest: v = (n + 1/2) 2**-56
      _RNG.integers(0, 2**56, 20000, dtype=np.uint64),
      (np.uint64(1) << _RNG.integers(8, 56, 2000).astype(np.uint64)) + _RNG.integers(0, 256, 2000, dtype=np.uint64),
    ]
  )
  n.sort()
  high = (n >> np.uint64(32)).astype(np.uint32) << np.uint32(8) | _RNG.integers(0, 256, n.size).astype(np.uint32)
  low = (n & np.uint64(0xFFFFFFFF)).astype(np.uint32)
  v = np.asarray(jax.jit(noise.uniform)(jnp.asarray(high), jnp.asarray(low))).astype(np.float64)
  exact = (n.astype(np.float64) + 0.5) * 2.0**-56
  assert np.all(np.abs(v - exact) <= 2.0**-24 * exact), "v is (N + 1/2) 2**-56 to float32 precision"
  assert np.all(np.diff(v) >= 0), "v is monotone in N"
  assert v.min() == 2.0**-57 and v.max() < 1
  e = np.asarray(jax.jit(lambda v: -jnp.log1p(-v))(jnp.asarray(v, jnp.float32))).astype(np.float64)
  small = v < 2.0**-30
  assert np.all(np.abs(e[small] - v[small]) <= 2.0**-22 * v[small]), "E = v near 0: no floor"


def _noise(keys: np.ndarray, rows: np.ndarray, index: np.ndarray) -> np.ndarray:
  k = (jnp.asarray(keys[:, 0]), jnp.asarray(keys[:, 1]))
  e = jax.jit(noise.exponential_at)(k, jnp.asarray(rows), jnp.asarray(index))
  return 1 - np.exp(-np.asarray(e, np.float64))  # back to uniforms on (0, 1)


def _independent(a: np.ndarray, b: np.ndarray) -> None:
  """Pairs of uniforms: uniform marginals and no dependence (a 16 x 16 chi-square and a rank correlation)."""
  for u in (a, b):
    assert stats.kstest(u, "uniform").pvalue > 1e-4
  joint = np.histogram2d(a, b, bins=16, range=((0, 1), (0, 1)))[0]
  expected = a.size / 256
  chi_square = float(((joint - expected) ** 2 / expected).sum())
  assert chi_square < 225 + 6 * np.sqrt(2 * 225), chi_square  # 225 degrees of freedom
  assert abs(stats.spearmanr(a, b).statistic) < 6 / np.sqrt(a.size)


@pytest.mark.parametrize("neighbour", ["key", "row", "index"])
def test_streams_are_independent_for_structured_neighbours(neighbour: str) -> None:
  """Keys ``jax.random.key(0), key(1), ...`` (their data words differ in one low bit), rows ``r`` and ``r + 1``,
  entries ``i`` and ``i + 1``: the noise of each pair is independent."""
  count = 2**15
  seeds = np.arange(count, dtype=np.uint32)
  keys = np.asarray(jax.vmap(lambda s: jax.random.key_data(jax.random.key(s)))(jnp.asarray(seeds)))
  rows = np.zeros(count, np.uint32)
  index = np.zeros((count, 1), np.int32)
  if neighbour == "key":
    a, b = _noise(keys[:-1], rows[:-1], index[:-1]), _noise(keys[1:], rows[1:], index[1:])
  elif neighbour == "row":
    fixed = np.broadcast_to(keys[7], keys.shape)
    step = np.arange(count, dtype=np.uint32)
    a, b = _noise(fixed, step, index), _noise(fixed, step + 1, index)
  else:
    fixed = np.broadcast_to(keys[7], keys.shape)
    step = np.arange(count, dtype=np.int32)[:, None]
    a, b = _noise(fixed, rows, step), _noise(fixed, rows, step + 1)
  _independent(a[:, 0], b[:, 0])


def test_draws_are_independent_across_structured_keys() -> None:
  """2**15 keys ``key(0), key(1), ...`` each draw from 12 uniform 16-entry rows: no two keys draw the same 12
  tokens (48 bits: about 2**-19 such pairs expected from independent draws), and the tokens of neighbouring
  keys are uncorrelated."""
  count = 2**15
  keys = jax.vmap(jax.random.key)(jnp.arange(count))
  logits = jnp.zeros((12, 16), jnp.float32)
  tokens = np.asarray(jax.jit(jax.vmap(lambda key: S.sample(key, logits)))(keys))
  packed = np.zeros(count, np.uint64)
  for row in range(12):
    packed = packed << np.uint64(4) | tokens[:, row].astype(np.uint64)
  assert np.unique(packed).size == count
  joint = np.bincount(tokens[:-1, 0] * 16 + tokens[1:, 0], minlength=256).reshape(16, 16)
  expected = (count - 1) / 256
  chi_square = float(((joint - expected) ** 2 / expected).sum())
  assert chi_square < 225 + 6 * np.sqrt(2 * 225)


@pytest.mark.long  # 3.4e9 noise values: about 40 s on 2 cores
def test_a_tail_of_tiny_weights_is_drawn_as_often_as_its_probability() -> None:
  """One token of logit 0 and 2**20 tokens of logit -26 log 2 (each 2**-26 of the top): the tail holds
  2**-6 / (1 + 2**-6) of the probability, 49.2 of 3,200 draws (standard deviation 7). With 23-bit uniforms
  (``E >= 2**-24``) a tail token could only win when the top token's noise is above 4: about 4 draws."""
  tail = 2**20
  logits = jnp.concatenate([jnp.zeros(1), jnp.full(tail, -26 * np.log(2))]).astype(jnp.float32)
  draws = 3200
  keys = jax.random.split(jax.random.key(20), draws)
  tokens = np.asarray(jax.jit(jax.vmap(lambda key: S.sample(key, logits)))(keys))
  probability = 2.0**-6 / (1 + 2.0**-6)
  mean, sd = draws * probability, np.sqrt(draws * probability * (1 - probability))
  hits = int(np.sum(tokens > 0))
  assert abs(hits - mean) <= 4 * sd, (hits, mean, sd)


def _block(words: tuple[int, int], rows: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Threefry-2x32 blocks at counters (row, index) under a 64-bit key, by JAX's own primitive."""
  rows, index = np.broadcast_arrays(np.asarray(rows, np.uint32), np.asarray(index, np.uint32))
  k0, k1 = (jnp.full(rows.shape, w, jnp.uint32) for w in words)
  high, low = jax.jit(lambda *a: threefry2x32_p.bind(*a))(k0, k1, jnp.asarray(rows), jnp.asarray(index))
  return np.asarray(high), np.asarray(low)


def _stream(seed: int) -> tuple[int, int]:
  """The documented stream key of ``jax.random.key(seed)``: the block at counter ("samp", "ling") under its data."""
  data = np.asarray(jax.random.key_data(jax.random.key(seed)))
  high, low = _block((int(data[0]), int(data[1])), np.uint32(0x73616D70), np.uint32(0x6C696E67))
  return int(high), int(low)


def _documented_noise(high: np.ndarray, low: np.ndarray) -> np.ndarray:
  """E = -log1p(-v), v = (N + 1/2) 2**-56 for N the block's top 56 bits, rounded to float32, at most 1 - 2**-24."""
  n = (high.astype(np.uint64) >> np.uint64(8)) << np.uint64(32) | low.astype(np.uint64)
  v = np.minimum(((n.astype(np.float64) + 0.5) * 2.0**-56).astype(np.float32), np.float32(1 - 2.0**-24))
  return -np.log1p(-v.astype(np.float64))


def test_the_stream_is_separate_from_jax_random_and_as_documented() -> None:
  """The noise is Threefry under the stream key (the block at counter ("samp", "ling") under the key's data), not
  under the key itself: row 0's blocks are neither ``jax.random.split(key)``'s keys nor ``jax.random.bits(key)``,
  and they are the keys ``jax.random.split`` makes from the stream key, as the docs state."""
  key = jax.random.key(11)
  stream = _stream(11)
  assert np.asarray(noise.stream_key(key)).tolist() == list(stream)
  index = np.arange(64, dtype=np.uint32)
  high, low = (np.asarray(a) for a in jax.jit(noise.threefry2x32)(*(jnp.uint32(w) for w in stream), 0, index))
  ours = np.stack([high, low], axis=-1)
  split = np.asarray(jax.random.key_data(jax.random.split(key, 64)))
  bits = np.asarray(jax.random.bits(key, (64, 2), jnp.uint32))
  assert not np.any(np.all(ours == split, axis=-1)) and not np.any(np.all(ours == bits, axis=-1))
  assert not np.any(np.isin(ours, split)), "no word of the noise is a word of split(key)'s keys"
  stream_split = np.asarray(
    jax.random.key_data(jax.random.split(jax.random.wrap_key_data(jnp.asarray(stream, jnp.uint32)), 64))
  )
  np.testing.assert_array_equal(ours, stream_split)


def test_sample_is_the_race_over_the_documented_stream() -> None:
  """Tokens from the whole-row reference: argmax of exp((x - m) / T) / E over the row, E from the documented
  stream (JAX's own Threefry primitive under the stream key, at counters (row_offset + row, index))."""
  logits = (_RNG.standard_normal((6, 500)) * 2).astype(np.float32)
  temperature, offset = 0.7, 1000
  got = np.asarray(S.sample(jax.random.key(12), logits, temperature=temperature, row_offset=offset))
  rows = offset + np.arange(6, dtype=np.uint32)[:, None]
  e = _documented_noise(*_block(_stream(12), rows, np.arange(500, dtype=np.uint32)[None, :]))
  z = (logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)) / temperature
  assert got.tolist() == np.argmax(np.exp(z) / e, axis=-1).tolist()


# A row whose noise at index 0, under jax.random.key(41)'s stream, is a block within 2**-25 of the top: its uniform
# rounds to 1 (E = inf) unless clipped (found by a search over the first 2**27 rows; the test checks it is one).
CLIPPED_SEED, CLIPPED_ROW = 41, 76848366


def test_the_uniform_is_clipped_below_one_where_it_would_round_to_one() -> None:
  """Blocks whose top 56 bits lie within 2**-25 of 2**56 give v = 1 - 2**-24 (the largest float32 below 1), so E is
  24 log 2 = 16.64, never inf; the blocks just below them give the same v."""
  top = 0xFFFFFF00
  high = np.array([0xFFFFFFFF, top, top, top, 0xFFFFFEFF], np.uint32)
  low = np.array([0xFFFFFFFF, 0x80000000, 0xFFFFFFFF, 0x7FFFFFFF, 0xFFFFFFFF], np.uint32)
  exact = ((high.astype(np.uint64) >> np.uint64(8) << np.uint64(32) | low).astype(np.float64) + 0.5) * 2.0**-56
  assert np.all(exact[:3].astype(np.float32) == 1), "these would round to 1"
  v = np.asarray(jax.jit(noise.uniform)(jnp.asarray(high), jnp.asarray(low)))
  assert v.tolist() == [1 - 2.0**-24] * 5
  e = np.asarray(jax.jit(lambda hi, lo: -jnp.log1p(-noise.uniform(hi, lo)))(jnp.asarray(high), jnp.asarray(low)))
  np.testing.assert_allclose(e, 24 * np.log(2), rtol=2.0**-22)


def test_a_clipped_entry_still_wins_the_race_it_should() -> None:
  """At (CLIPPED_ROW, 0) the uniform is clipped (the block is checked here): the entry of weight 1 there, against one
  of weight 2**-30, must win (its noise is 16.64, the other's 0.88); were the clip removed its noise would be inf and
  it could never be drawn."""
  high, low = _block(_stream(CLIPPED_SEED), np.uint32(CLIPPED_ROW), np.arange(2, dtype=np.uint32))
  assert high[0] >> 8 == 0xFFFFFF and low[0] >> 31 == 1, "the row's block at index 0 lies in the clipped range"
  e = _documented_noise(high, low)
  logits = np.array([[0.0, -30 * np.log(2)]] * 2, np.float32)
  assert np.argmax(np.exp(logits[0].astype(np.float64)) / e) == 0
  key = jax.random.key(CLIPPED_SEED)
  assert int(S.sample(key, logits, row_offset=CLIPPED_ROW - 1)[1]) == 0  # the second row is row CLIPPED_ROW
  assert S.sample(key, logits[:1], row_offset=jnp.uint32(CLIPPED_ROW)).tolist() == [0]
