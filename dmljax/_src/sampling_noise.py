r"""Gumbel noise addressed by (row, vocabulary index), for Gumbel-max draws that do not depend on a layout.

The noise of entry :math:`i` of row :math:`r` (rows numbered row-major over the leading axes) is
:math:`g = -\log(-\log u)`, with :math:`u` uniform in :math:`(0, 1)` from 23 bits of a hash of the
key's data words, :math:`r` and :math:`i` (three rounds of MurmurHash3's 32-bit finalizer, each
folding in one more word: a few integer operations per entry, where a Threefry block costs 20
rounds and dominates the compile time of a whole-row draw). It is computed wherever the entry
lies, so a draw over a handful of candidates, over a whole row, or over a row split across devices
sees the same noise at the same index and picks the same token.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def _finalize(h: jax.Array) -> jax.Array:
  """MurmurHash3's fmix32: a bijection of uint32 with full avalanche."""
  h = h ^ (h >> np.uint32(16))
  h = h * np.uint32(0x85EBCA6B)
  h = h ^ (h >> np.uint32(13))
  h = h * np.uint32(0xC2B2AE35)
  return h ^ (h >> np.uint32(16))


def gumbel_at(key: jax.Array, index: jax.Array) -> jax.Array:
  """float32 Gumbel noise for the entries at ``index`` (int32, shape ``(*batch, n)``) of each row."""
  batch = index.shape[:-1]
  words = jax.random.key_data(key).reshape(-1).astype(jnp.uint32)
  seed = words[0]
  for word in words[1:]:
    seed = _finalize(seed ^ (word * np.uint32(0x9E3779B1)))
  row = jnp.arange(math.prod(batch), dtype=jnp.uint32).reshape(*batch, 1)
  per_row = _finalize(seed ^ _finalize(row * np.uint32(0x9E3779B1) + np.uint32(0x7F4A7C15)))
  bits = _finalize(per_row ^ _finalize(index.astype(jnp.uint32) * np.uint32(0x85EBCA77) + np.uint32(0x165667B1)))
  # 23 random mantissa bits: u in [1, 2) minus 1, then moved off 0 by half a step.
  u = lax.bitcast_convert_type((bits >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32) - np.float32(1)
  u = u + np.float32(2.0**-24)
  return -jnp.log(-jnp.log(u))
