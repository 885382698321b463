r"""Exponential noise from Threefry-2x32 at (row, index) counters under the sampling stream's key.

The generator is Threefry-2x32 with 20 rounds (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as
easy as 1, 2, 3", SC 2011), the block function behind JAX's default PRNG (``jax.random.key``), written here as
plain integer operations so that it fuses into the reductions that consume it.

*The stream's key.* The caller's key is first reduced to a 64-bit Threefry key :math:`k` (its two data words; a key
type with more words is hashed to two by Threefry itself), and the sampling stream's key is the block :math:`s =
\mathrm{Threefry}_k(D)` at the fixed counter :math:`D` = :data:`DOMAIN` (the ASCII words "samp" and "ling": :math:`D
= (0x73616D70, 0x6C696E67)`). Entry ``i`` of row ``r`` gets the 64-bit block :math:`(h, l) = \mathrm{Threefry}_s(r,
i)`. ``jax.random`` never evaluates the block at :math:`D` under :math:`k`: ``fold_in`` uses counters :math:`(0,
d)`; ``split``, ``bits`` and every sampler built on them use the flat positions of their outputs (a high word of
0x73616D70 is a position past :math:`8 \cdot 10^{18}`); and the older scheme (``jax_threefry_partitionable`` off)
uses counters :math:`(i, i + n)`, whose second word is the larger one short of arrays of :math:`2^{32}` elements. So
the noise is no key or bits that ``jax.random`` derives from the caller's key (a program may split the same key for
its other randomness), while it is plain Threefry under :math:`s`: row 0's block at index ``i`` is the data of
``jax.random.split(jax.random.wrap_key_data(s), n)[i]`` (partitionable Threefry, JAX's default). Counters never
repeat within a call (rows are numbered modulo :math:`2^{32}`), and two keys give unrelated streams: Threefry is a
keyed bijection of its counter, designed to pass the BigCrush battery with 13 of these 20 rounds for any key and
counter pattern.

The block becomes a uniform :math:`v \in (0, 1)` with 56 random bits, resolved near 0 as finely as a float
allows down to :math:`2^{-57}` (:math:`v = (h \gg 8) 2^{-24} + (l \gg 8) 2^{-48} + (l \bmod 2^8) 2^{-56} +
2^{-57}`, rounded to float32 once and clipped to :data:`TOP` :math:`= 1 - 2^{-24}`, the largest float32 below 1:
a sum within :math:`2^{-25}` of 1 rounds to 1, about one entry in :math:`2^{25}`),
and the noise is :math:`E = -\log(1 - v)` (``-log1p(-v)``, at most 16.64), an exponential variate whose small
values, where a low-probability token wins the race, have their full probability: :math:`P(E < x) = x (1 +
O(x))` to within :math:`2^{-56}`, where 23-bit uniforms stop at :math:`6 \cdot 10^{-8}`.

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
DOMAIN = (np.uint32(0x73616D70), np.uint32(0x6C696E67))  # "samp", "ling": the counter of the stream's key
TOP = np.float32(1 - 2.0**-24)  # the largest float32 below 1: where the uniform is clipped


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


def stream_key(key: jax.Array) -> jax.Array:
  """uint32[2]: the sampling stream's Threefry key, the block at counter :data:`DOMAIN` under the key's own."""
  k0, k1 = threefry_key(key_words(key))
  return jnp.stack(threefry2x32(k0, k1, *(jnp.full_like(k0, d) for d in DOMAIN)))


def uniform(high: jax.Array, low: jax.Array) -> jax.Array:
  r"""float32 :math:`v \in (0, 1)` from a 64-bit block: 56 of its bits, every one of them kept near 0."""
  as_float = lambda bits: bits.astype(jnp.int32).astype(jnp.float32)  # noqa: E731  (below 2**24: exact)
  tail = as_float(low & np.uint32(0xFF)) * np.float32(2.0**-56) + np.float32(2.0**-57)
  middle = as_float(low >> np.uint32(8)) * np.float32(2.0**-48) + tail
  return jnp.minimum(as_float(high >> np.uint32(8)) * np.float32(2.0**-24) + middle, TOP)


def exponential_at(key: tuple[jax.Array, jax.Array], rows: jax.Array, index: jax.Array) -> jax.Array:
  """float32 exponential noise of entries ``index`` (int32, shape ``(..., n)``) of rows ``rows`` (shape ``(...)``)
  under the Threefry key ``key`` (two uint32 arrays of shape ``(...)``)."""
  k0, k1 = (k[..., None] for k in key)
  high, low = threefry2x32(k0, k1, rows.astype(jnp.uint32)[..., None], index.astype(jnp.uint32))
  return -jnp.log1p(-uniform(high, low))
