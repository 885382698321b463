"""Exact sums of float32 values in [0, 1], in integer limbs: no rounding, so no dependence on the order of additions.

A float32 ``v`` in ``[0, 1]`` is an integer number of *units* of ``2**-149`` (the smallest subnormal):
``v = m * 2**s`` units with a 24-bit ``m`` and ``0 <= s <= 126``, below ``2**150`` in all. A sum of ``n``
such values is held as limbs of ``bits`` bits each (``limbs[..., j]`` weighs ``2**(j * bits)`` units), summed
in int32: ``bits`` is chosen from ``n`` so that ``n`` limb terms never overflow. Integer addition is
associative, so a sum split across devices, or reduced in any order, gives the same limbs bit for bit.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# Largest number of terms a sum may have: limbs of 6 bits or more (31 - 25), 25 limbs for a float32 sum.
MAX_TERMS = (1 << 25) - 1
# Units of 2**-149: a float32 in [0, 1] has at most this many bits.
_VALUE_BITS = 150
# A float32 mantissa with its implicit bit.
_MANTISSA_BITS = 24


@dataclasses.dataclass(frozen=True)
class Layout:
  """How sums of up to ``terms`` values are held: ``count`` limbs of ``bits`` bits each."""

  bits: int
  count: int

  @property
  def mask(self) -> np.int32:
    return np.int32((1 << self.bits) - 1)


def layout(terms: int) -> Layout:
  """The limbs for sums of at most ``terms`` (``1 <= terms <= MAX_TERMS``) float32 values in ``[0, 1]``.

  ``terms * (2**bits - 1)`` fits int32, and at most 14 bits, so that a 24-bit multiplier split into
  ``bits``-bit digits times a limb, two or three products to a limb, fits int32 too (:func:`scaled_ceil`).
  """
  if not 1 <= terms <= MAX_TERMS:
    raise ValueError(f"exact sums take 1 to {MAX_TERMS} terms; got {terms}")
  bits = min(14, 31 - terms.bit_length())
  return Layout(bits, math.ceil((_VALUE_BITS + terms.bit_length()) / bits))


def _mantissa_and_shift(v: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(m, s)`` with ``v == m * 2**s`` units, for float32 ``v >= 0``: int32 arrays."""
  bits = lax.bitcast_convert_type(v.astype(np.float32), np.int32)
  field = bits >> np.int32(23)
  fraction = bits & np.int32((1 << 23) - 1)
  normal = field > 0
  m = jnp.where(normal, fraction | np.int32(1 << 23), fraction)
  s = jnp.where(normal, field - np.int32(1), np.int32(0))
  return m, s


def limb_terms(v: jax.Array, lay: Layout) -> jax.Array:
  """Each element's share of every limb: int32 ``(*v.shape, count)`` (``v`` float32 in ``[0, 1]``)."""
  m, s = _mantissa_and_shift(v)
  m, s = m[..., None], s[..., None]
  down = jnp.arange(0, lay.count * lay.bits, lay.bits, dtype=np.int32) - s  # m's lowest bit below the limb's
  right = m >> jnp.clip(down, 0, 31)
  # Shifted left by up to `bits`: bits pushed past 32 lie beyond the limb and the mask drops them anyway.
  left = lax.shift_left(m, jnp.clip(-down, 0, lay.bits))
  return jnp.where(down >= 0, right, left) & lay.mask


def masked_sum(terms: jax.Array, keep: jax.Array, lay: Layout) -> jax.Array:
  """The normalized limbs ``(..., count)`` of the sum, over the last axis of ``keep``, of the kept elements' terms."""
  return normalize(jnp.sum(jnp.where(keep[..., None], terms, np.int32(0)), axis=-2, dtype=np.int32), lay)


def _carry_once(limbs: jax.Array, lay: Layout) -> jax.Array:
  """Every limb keeps its low ``bits`` bits and passes the rest to the limb above (the top limb keeps all)."""
  carry = limbs >> np.int32(lay.bits)
  low = jnp.concatenate([limbs[..., :-1] & lay.mask, limbs[..., -1:]], axis=-1)
  return low + jnp.concatenate([jnp.zeros_like(carry[..., :1]), carry[..., :-1]], axis=-1)


def normalize(limbs: jax.Array, lay: Layout) -> jax.Array:
  """Carries propagated, every limb but the top in ``[0, 2**bits)`` (limbs non-negative, below ``2**31``).

  All limbs carry at once until no carry exceeds 1 (``ceil(31 / bits)`` rounds); a carry of 1 that
  ripples through limbs equal to ``2**bits - 1`` is then resolved in one step (carry lookahead): it
  reaches limb ``j`` when the last limb below ``j`` holding ``2**bits`` lies above the last one below
  ``2**bits - 1``.
  """
  for _ in range(math.ceil(31 / lay.bits)):
    limbs = _carry_once(limbs, lay)
  position = jnp.arange(limbs.shape[-1], dtype=np.int32)
  none = np.int32(-1)
  last_generate = lax.cummax(jnp.where(limbs > lay.mask, position, none), axis=limbs.ndim - 1)
  last_stop = lax.cummax(jnp.where(limbs < lay.mask, position, none), axis=limbs.ndim - 1)
  carry_out = (last_generate > last_stop).astype(np.int32)
  carry_in = jnp.concatenate([jnp.zeros_like(carry_out[..., :1]), carry_out[..., :-1]], axis=-1)
  total = limbs + carry_in
  return jnp.concatenate([total[..., :-1] & lay.mask, total[..., -1:]], axis=-1)


def greater_equal(a: jax.Array, b: jax.Array) -> jax.Array:
  """``a >= b`` for normalized limbs of the same layout: the highest limb where they differ decides."""
  position = jnp.arange(1, a.shape[-1] + 1, dtype=np.int32)
  top = jnp.max(jnp.where(a != b, position, np.int32(0)), axis=-1, keepdims=True)
  deciding = position == top
  return ~jnp.any(deciding & (a < b), axis=-1)


def scaled_ceil(total: jax.Array, p: jax.Array, lay: Layout) -> jax.Array:
  """``ceil(p * total)`` exactly, as normalized limbs of ``lay``: ``total`` normalized limbs ``(..., count)``,
  ``p`` float32 in ``[0, 1)`` shaped as ``total``'s batch.

  ``p = m * 2**(s - 149)``: the product ``m * total`` is formed limb by limb (``m`` cut into ``bits``-bit
  digits), then shifted right by ``149 - s`` bits, rounding up when any bit shifted out is set.
  """
  m, s = _mantissa_and_shift(p)
  digits = math.ceil(_MANTISSA_BITS / lay.bits)
  width = lay.count + digits + 1
  product = jnp.zeros((*total.shape[:-1], width), np.int32)
  for d in range(digits):
    digit = (m >> np.int32(d * lay.bits)) & lay.mask
    product = product.at[..., d : d + lay.count].add(digit[..., None] * total)
  x = normalize(product, lay)
  shift = np.int32(_VALUE_BITS - 1) - s
  whole, part = (shift // np.int32(lay.bits))[..., None], (shift % np.int32(lay.bits))[..., None]
  padded = jnp.concatenate([x, jnp.zeros((*x.shape[:-1], 1), np.int32)], axis=-1)
  positions = jnp.arange(width, dtype=np.int32)
  source = jnp.minimum(whole + positions, np.int32(width))
  low = jnp.take_along_axis(padded, source, axis=-1)
  high = jnp.take_along_axis(padded, jnp.minimum(source + np.int32(1), np.int32(width)), axis=-1)
  shifted = ((low >> part) | lax.shift_left(high, np.int32(lay.bits) - part)) & lay.mask
  below_part = x & (lax.shift_left(np.int32(1), part) - np.int32(1))
  lost = ((positions < whole) & (x != 0)) | ((positions == whole) & (below_part != 0))
  rounded = shifted.at[..., 0].add(jnp.any(lost, axis=-1).astype(np.int32))
  return normalize(rounded, lay)[..., : lay.count]
