r"""Exponential noise addressed by (key, row, vocabulary index), so the draws do not depend on a layout.

Each row has a 64-bit *stream*: the key's first two data words :math:`(k_0, k_1)` (a further word, where a key
type has more, is folded in) passed through a Feistel network whose round keys are made from the row number.
A Feistel network is a bijection of its 64-bit state whatever its round function, so for a given row two keys
give the same stream only if their first two words are equal: no two (key, row) pairs share noise unless their
keys do, and across rows streams coincide with probability :math:`2^{-64}` per pair. The noise of entry
:math:`i` is three more rounds keyed by :math:`i`, then 23 bits of one half as :math:`u \in (0, 1)` and
:math:`E = -\log u`, an exponential variate (:math:`-\log E` is a Gumbel one). The round function is
MurmurHash3's 32-bit finalizer (a few integer operations, where a Threefry block costs 20 rounds).

It is computed wherever an entry lies, so a draw over a handful of candidates, over a whole row, or over a row
split across devices sees the same noise at the same index and picks the same token.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_GOLDEN = np.uint32(0x9E3779B9)
_ROW_ROUNDS = (0x7F4A7C15, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F)
_INDEX_ROUNDS = (0x165667B1, 0xD3A2646C, 0xFD7046C5)


def _fmix(h: jax.Array) -> jax.Array:
  """MurmurHash3's fmix32: a bijection of uint32 with full avalanche."""
  h = h ^ (h >> np.uint32(16))
  h = h * np.uint32(0x85EBCA6B)
  h = h ^ (h >> np.uint32(13))
  h = h * np.uint32(0xC2B2AE35)
  return h ^ (h >> np.uint32(16))


def _feistel(a: jax.Array, b: jax.Array, round_keys: list[jax.Array]) -> tuple[jax.Array, jax.Array]:
  """Feistel rounds :math:`(a, b) \\to (b, a \\oplus f(b \\oplus k_r))`: a bijection of (a, b) for fixed keys."""
  for k in round_keys:
    a, b = b, a ^ _fmix(b ^ k)
  return a, b


def key_words(key: jax.Array) -> jax.Array:
  """The uint32 data words of one PRNG key, at least two (a one-word key is paired with a constant)."""
  words = jax.random.key_data(key).reshape(-1).astype(jnp.uint32)
  if words.shape[0] < 2:
    words = jnp.concatenate([words, jnp.full((2 - words.shape[0],), _GOLDEN, jnp.uint32)])
  return words


def streams(words: jax.Array, rows: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The 64-bit stream (two uint32 halves) of each row: ``words`` (..., W) of its key, ``rows`` (...) its number."""
  a, b = words[..., 0], words[..., 1]
  extra = [words[..., w] * _GOLDEN + np.uint32(w) for w in range(2, words.shape[-1])]
  if extra:
    a, b = _feistel(a, b, extra)
  r = rows.astype(jnp.uint32)
  return _feistel(a, b, [_fmix(r * _GOLDEN + np.uint32(c)) for c in _ROW_ROUNDS])


def exponential_at(stream: tuple[jax.Array, jax.Array], index: jax.Array) -> jax.Array:
  """float32 exponential noise of the entries at ``index`` (int32, shape ``(..., n)``) of rows with ``stream``."""
  a, b = (s[..., None] for s in stream)
  i = index.astype(jnp.uint32)
  a, b = _feistel(a, b, [i * _GOLDEN + np.uint32(c) for c in _INDEX_ROUNDS])
  # 23 random mantissa bits: u in [1, 2) minus 1, then moved off 0 by half a step.
  u = lax.bitcast_convert_type((b >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32) - np.float32(1)
  u = u + np.float32(2.0**-24)
  return -jnp.log(u)
