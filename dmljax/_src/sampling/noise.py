r"""Exponential noise from Threefry-2x32 at (key, row, index) counters, so the draws do not depend on a layout.

The generator is Threefry-2x32 with 20 rounds (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as
easy as 1, 2, 3", SC 2011), the block function behind JAX's default PRNG (``jax.random.key``), written here as
plain integer operations so that it fuses into the reductions that consume it: entry ``i`` of row ``r`` gets
the 64-bit block :math:`(h, l) = \mathrm{Threefry}_{k}(r, i)` under the key's 64-bit Threefry key :math:`k`
(its two data words; a key type with more words is first hashed to two by Threefry itself). Counters never
repeat within a call, and two keys give unrelated streams: Threefry is a keyed bijection of its counter,
designed to pass the BigCrush battery with 13 of these 20 rounds for any key and counter pattern.

The block becomes a uniform :math:`v \in (0, 1)` with 56 random bits, resolved near 0 as finely as a float
allows down to :math:`2^{-57}` (:math:`v = (h \gg 8) 2^{-24} + (l \gg 8) 2^{-48} + (l \bmod 2^8) 2^{-56} +
2^{-57}`, rounded to float32 once and clipped below 1), and the noise is :math:`E = -\log(1 - v)`
(``-log1p(-v)``), an exponential variate whose small values, where a low-probability token wins the race,
have their full probability: :math:`P(E < x) = x (1 + O(x))` to within :math:`2^{-56}`, where 23-bit
uniforms stop at :math:`6 \cdot 10^{-8}`.

It is computed wherever an entry lies, so a draw over a handful of candidates, over a whole row, or over a row
split across devices sees the same noise at the same index and picks the same token.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_PARITY = np.uint32(0x1BD11BDA)  # Threefry's key-schedule constant
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_FILL = np.uint32(0x9E3779B9)  # pairs a one-word key's word


def _rotate_left(x: jax.Array, bits: int) -> jax.Array:
  return (x << np.uint32(bits)) | (x >> np.uint32(32 - bits))


def threefry2x32(k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Threefry-2x32 with 20 rounds: the block of counter ``(x0, x1)`` under key ``(k0, k1)`` (uint32, broadcast)."""
  schedule = (k0, k1, k0 ^ k1 ^ _PARITY)
  x0, x1 = x0 + k0, x1 + k1
  for group in range(5):
    for bits in _ROTATIONS[group % 2]:
      x0 = x0 + x1
      x1 = _rotate_left(x1, bits) ^ x0
    x0 = x0 + schedule[(group + 1) % 3]
    x1 = x1 + schedule[(group + 2) % 3] + np.uint32(group + 1)
  return x0, x1


def key_words(key: jax.Array) -> jax.Array:
  """The uint32 data words of one PRNG key, at least two (a one-word key is paired with a constant)."""
  words = jax.random.key_data(key).reshape(-1).astype(jnp.uint32)
  if words.shape[0] < 2:
    words = jnp.concatenate([words, jnp.full((2 - words.shape[0],), _FILL, jnp.uint32)])
  return words


def threefry_key(words: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The 64-bit Threefry key of a PRNG key's words (..., W): its two words, or more words hashed to two."""
  k0, k1 = words[..., 0], words[..., 1]
  for w in range(2, words.shape[-1], 2):
    k0, k1 = threefry2x32(
      k0, k1, words[..., w], words[..., w + 1] if w + 1 < words.shape[-1] else jnp.full_like(k0, _FILL)
    )
  return k0, k1


def uniform(high: jax.Array, low: jax.Array) -> jax.Array:
  r"""float32 :math:`v \in (0, 1)` from a 64-bit block: 56 of its bits, every one of them kept near 0."""
  as_float = lambda bits: bits.astype(jnp.int32).astype(jnp.float32)  # noqa: E731  (below 2**24: exact)
  tail = as_float(low & np.uint32(0xFF)) * np.float32(2.0**-56) + np.float32(2.0**-57)
  middle = as_float(low >> np.uint32(8)) * np.float32(2.0**-48) + tail
  return jnp.minimum(as_float(high >> np.uint32(8)) * np.float32(2.0**-24) + middle, np.float32(1 - 2.0**-24))


def exponential_at(key: tuple[jax.Array, jax.Array], rows: jax.Array, index: jax.Array) -> jax.Array:
  """float32 exponential noise of entries ``index`` (int32, shape ``(..., n)``) of rows ``rows`` (shape ``(...)``)
  under the Threefry key ``key`` (two uint32 arrays of shape ``(...)``)."""
  k0, k1 = (k[..., None] for k in key)
  high, low = threefry2x32(k0, k1, rows.astype(jnp.uint32)[..., None], index.astype(jnp.uint32))
  return -jnp.log1p(-uniform(high, low))
