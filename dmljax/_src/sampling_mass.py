r"""Probability mass as exact integers, so that top-p's decisions do not depend on a summation order.

A row's weights are :math:`w_i = \exp(x_i - m)` in float32 (float64 for float64 logits), with
:math:`m` the row's largest logit (NaN dropped beforehand) and :math:`w_i = 1` where
:math:`x_i = m` (so a row whose largest logit is +inf weighs only its +inf entries, and an all
-inf row weighs every entry equally). Each weight is counted in *units* of :math:`2^{-24}`,
rounded to the nearest unit (ties to even): :math:`q_i = \mathrm{round}(w_i \cdot 2^{24})`, an
integer in :math:`[0, 2^{24}]`. Sums of units are exact integers, held as a few int32 *limbs* of
``bits`` bits each (no 64-bit integers needed, whether x64 is on or off), so any split of a row
over devices, any reduction order, gives the same sums.

``p`` is taken to 24 fractional bits, rounded up: :math:`\pi = \lceil p \cdot 2^{24} \rceil`. A
set of entries *reaches* ``p`` when its units :math:`K` satisfy
:math:`K \cdot 2^{24} \ge \pi \cdot T` (:math:`T`: the row's total units), i.e.
:math:`K \ge \tau = \lceil \pi T / 2^{24} \rceil`, compared exactly.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

UNIT_BITS = 24
Limbs = tuple[jax.Array, ...]


def limb_bits(length: int) -> int:
  """Bits per limb such that a row's sum of ``length`` limbs fits an int32."""
  for bits in (12, 8, 6):
    if length * ((1 << bits) - 1) < 2**31:
      return bits
  raise ValueError(f"rows of {length} entries are too long for exact probability sums")


def limb_count(length: int, bits: int) -> int:
  """Limbs enough for any sum of ``length`` weights of up to ``2**UNIT_BITS`` units, and the target."""
  return -(-(UNIT_BITS + 2 + math.ceil(math.log2(length + 1))) // bits)


def weights(work: jax.Array) -> jax.Array:
  """The units :math:`q_i` (int32) of every entry of NaN-free float rows ``work``."""
  top = jnp.max(work, axis=-1, keepdims=True)
  one = np.array(1, work.dtype)
  w = jnp.where(work == top, one, jnp.exp(work - top))
  return jnp.round(w * np.array(2.0**UNIT_BITS, work.dtype)).astype(jnp.int32)


def split(q: jax.Array, bits: int) -> Limbs:
  """``q`` (at most ``2**UNIT_BITS``) as ``ceil((UNIT_BITS + 1) / bits)`` limbs, lowest first."""
  mask = np.int32((1 << bits) - 1)
  count = -(-(UNIT_BITS + 1) // bits)
  return tuple((q >> np.int32(bits * j)) & mask for j in range(count))


def normalize(limbs: Limbs, bits: int, count: int) -> Limbs:
  """Non-negative limbs (each below 2**31) carried into ``count`` limbs each below ``2**bits``."""
  mask = np.int32((1 << bits) - 1)
  out = []
  carry = jnp.zeros_like(limbs[0])
  for j in range(count):
    value = carry + limbs[j] if j < len(limbs) else carry
    out.append(value & mask)
    carry = value >> np.int32(bits)
  return tuple(out)


def at_least(a: Limbs, b: Limbs) -> jax.Array:
  """``a >= b`` for normalized limbs of equal count."""
  result = jnp.ones(a[0].shape, jnp.bool_)
  for x, y in zip(a, b, strict=True):  # lowest first: the highest differing limb decides
    result = jnp.where(x > y, True, jnp.where(x < y, False, result))
  return result


def masked_sums(limbs: Limbs, mask: jax.Array) -> Limbs:
  """Each limb summed over the entries of ``mask`` along the last axis."""
  zero = np.int32(0)
  return tuple(jnp.sum(jnp.where(mask, limb, zero), axis=-1, dtype=jnp.int32) for limb in limbs)


def target(total: Limbs, p: jax.Array, bits: int, count: int) -> Limbs:
  r""":math:`\max(1, \lceil \pi T / 2^{24} \rceil)` for normalized total limbs and float ``p`` in [0, 1]."""
  scaled = jnp.ceil(p * np.array(2.0**UNIT_BITS, p.dtype)).astype(jnp.int32)  # exact: a power-of-two scaling
  pi = normalize((scaled,), bits, -(-(UNIT_BITS + 1) // bits))
  product = [jnp.zeros_like(total[0]) for _ in range(count + len(pi))]
  for i, t in enumerate(total):
    for j, s in enumerate(pi):
      product[i + j] = product[i + j] + t * s  # each term below 2**(2 * bits) <= 2**24
  product_limbs = normalize(tuple(product), bits, len(product))
  dropped = UNIT_BITS // bits  # bits divides UNIT_BITS
  inexact = jnp.zeros(total[0].shape, jnp.bool_)
  for limb in product_limbs[:dropped]:
    inexact = inexact | (limb != 0)
  kept = list(product_limbs[dropped:]) + [jnp.zeros_like(total[0])] * dropped
  kept[0] = kept[0] + inexact.astype(jnp.int32)
  tau = normalize(tuple(kept), bits, count)
  one = normalize((jnp.ones_like(total[0]),), bits, count)
  below_one = ~at_least(tau, one)
  return tuple(jnp.where(below_one, o, t) for t, o in zip(tau, one, strict=True))


def prefix_units(limbs: Limbs, bits: int, count: int) -> Limbs:
  """Normalized units of every prefix that ends before each entry (exclusive cumulative sums along the last axis)."""
  sums = tuple(lax.cumsum(limb, axis=limb.ndim - 1) - limb for limb in limbs)
  return normalize(sums, bits, count)
