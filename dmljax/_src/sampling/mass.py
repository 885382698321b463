r"""Probability mass as exact integers, fine enough for the float32 softmax at any vocabulary size.

A row's *weights* are :math:`w_i = \exp(z_i)` with :math:`z_i = x_i - m` (or :math:`(x_i - m) / T` when a
temperature divides the logits), :math:`m` the row's largest logit, in float32 (float64 for float64 logits), and
:math:`z_i = 0` wherever :math:`x_i = m` (so the largest entry weighs 1, a row whose largest logit is +inf weighs
only its +inf entries, equally, and an all -inf row weighs every entry equally). The softmax is
:math:`w_i / \sum_j w_j`.

Each weight is counted in *units* of :math:`2^{-F}`, rounded down, with :math:`F = f + \lceil\log_2 V\rceil + 2`
(:math:`f` = 24 for float32 weights, 53 for float64): the units of a whole row miss at most
:math:`V \cdot 2^{-F} \le 2^{-f-2}` of its weight, and its weight is at least 1, so the probability any set of
entries is given differs from the softmax's by less than :math:`2^{-f-2}`. Sums of units are exact integers held
as int32 *limbs* of ``bits`` bits, lowest first, with room for a carry (``V * 2**bits <= 2**30``): no 64-bit
integers are needed, with x64 on or off, and every split of a row over devices, every reduction order, gives the
same sums.

``p`` is taken to 24 fractional bits, rounded up (:math:`\pi = \lceil p \cdot 2^{24} \rceil`): a set of :math:`K`
units *reaches* ``p`` of a row's :math:`T` when :math:`K \ge 1` and :math:`K \cdot 2^{24} \ge \pi \cdot T`,
compared exactly. Altogether the nucleus found is the float32 softmax's unless ``p`` lies within
:math:`2^{-21}` of the cumulative probability at the cut (the docs' sampling page states the bound).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

P_BITS = 24  # p's fractional bits
Limbs = tuple[jax.Array, ...]


@dataclasses.dataclass(frozen=True)
class Units:
  """The fixed-point layout for rows of ``length`` entries and weights of type ``dtype``."""

  length: int
  dtype: np.dtype

  @property
  def fraction_bits(self) -> int:
    """:math:`F`: a unit is :math:`2^{-F}` of the largest weight."""
    mantissa = 53 if np.dtype(self.dtype).itemsize == 8 else 24
    return mantissa + max(1, math.ceil(math.log2(self.length))) + 2

  @property
  def bits(self) -> int:
    """Bits per limb: a divisor of 24 (``P_BITS``) with ``length * 2**bits <= 2**30`` (a sum plus its carry fits)."""
    for bits in (12, 8, 6, 4, 3, 2, 1):
      if self.length * (1 << bits) <= 2**30:
        return bits
    raise ValueError(f"rows of {self.length} entries are too long for exact probability sums (at most 2**29)")

  @property
  def entry_limbs(self) -> int:
    return -(-(self.fraction_bits + 1) // self.bits)

  @property
  def sum_limbs(self) -> int:
    """Limbs enough for a row's sum, and for that sum times :math:`2^{24}` or :math:`\\pi`."""
    return -(-(self.fraction_bits + math.ceil(math.log2(self.length + 1)) + P_BITS + 2) // self.bits)


def weights(z: jax.Array) -> jax.Array:
  """:math:`\\exp(z)` of relative logits (:func:`relative`): exactly 1 at the row's largest entries."""
  return jnp.exp(z)


def relative(x: jax.Array, top: jax.Array, divisor: jax.Array | None = None) -> jax.Array:
  """:math:`z = (x - m) / T` in ``x``'s (work) type, 0 where ``x == m`` (also for infinite ``m``), and -inf where
  ``x - m`` is (so an infinite temperature gives every finite entry weight 1 and a -inf entry weight 0)."""
  difference = x - top
  z = difference if divisor is None else jnp.where(difference == -np.inf, difference, difference / divisor)
  return jnp.where(x == top, np.array(0, x.dtype), z)


def entry_limbs(w: jax.Array, units: Units) -> Limbs:
  """The units :math:`\\lfloor w \\cdot 2^F \\rfloor` of each weight as limbs (int32), lowest first.

  Computed in ``w``'s float type, exactly: scaling by a power of two is exact, a scaled weight below 1 floors to 0
  (an underflow cannot lift it), and each limb is an integer of at most the weight's significant bits.
  """
  bits = units.bits
  out = []
  below = jnp.floor(w * np.array(2.0**units.fraction_bits, w.dtype))
  for j in range(units.entry_limbs):
    above = jnp.floor(w * np.array(2.0 ** (units.fraction_bits - bits * (j + 1)), w.dtype))
    out.append((below - above * np.array(2.0**bits, w.dtype)).astype(jnp.int32))
    below = above
  return tuple(out)


def normalize(limbs: Limbs, bits: int, count: int) -> Limbs:
  """Non-negative limbs, each below ``2**30``, carried into ``count`` limbs each below ``2**bits``."""
  mask = np.int32((1 << bits) - 1)
  out = []
  carry = jnp.zeros_like(limbs[0])
  for j in range(count):
    value = carry + limbs[j] if j < len(limbs) else carry
    out.append(value & mask)
    carry = value >> np.int32(bits)
  return tuple(out)


def sums(limbs: Limbs, mask: jax.Array | None, units: Units, axis: int = -1) -> Limbs:
  """Each limb summed along ``axis`` over the entries of ``mask`` (all when ``None``), normalized.

  One variadic reduction for all limbs: XLA:CPU fuses the limbs' computation into it and keeps no array of them
  (separate sums were split into tree reductions over materialized limbs: 4x the memory of the row, 9x the time).
  """
  zero = np.int32(0)
  operands = tuple(limb if mask is None else jnp.where(mask, limb, zero) for limb in limbs)
  raw = lax.reduce(
    operands,
    (zero,) * len(operands),
    lambda a, b: tuple(x + y for x, y in zip(a, b, strict=True)),
    (axis % limbs[0].ndim,),
  )
  return normalize(tuple(raw), units.bits, units.sum_limbs)


def at_least(a: Limbs, b: Limbs) -> jax.Array:
  """``a >= b`` for normalized limbs of equal count."""
  result = jnp.ones(jnp.broadcast_shapes(a[0].shape, b[0].shape), jnp.bool_)
  for x, y in zip(a, b, strict=True):  # lowest first: the highest differing limb decides
    result = jnp.where(x > y, True, jnp.where(x < y, False, result))
  return result


def _shifted(total: Limbs, units: Units) -> Limbs:
  """``total * 2**24``: a shift by whole limbs (``bits`` divides 24)."""
  zeros = (jnp.zeros_like(total[0]),) * (P_BITS // units.bits)
  return (zeros + total)[: units.sum_limbs]


def numerator(p: jax.Array) -> jax.Array:
  """:math:`\\pi = \\lceil p \\cdot 2^{24} \\rceil` (int32) of float32 ``p``, clipped to [0, 1] first."""
  return jnp.ceil(jnp.clip(p, np.float32(0), np.float32(1)) * np.float32(2.0**P_BITS)).astype(jnp.int32)


def required(total: Limbs, p: jax.Array, units: Units) -> Limbs:
  """:math:`\\pi \\cdot T` (normalized limbs) for float32 ``p`` in [0, 1]: what :math:`K \\cdot 2^{24}` must reach."""
  pi = numerator(p)
  bits = units.bits
  pi_limbs = normalize((pi,), bits, -(-(P_BITS + 1) // bits))
  count = units.sum_limbs
  product = [jnp.zeros_like(total[0]) for _ in range(count)]
  for i, t in enumerate(total):
    for j, s in enumerate(pi_limbs):
      if i + j < count:
        product[i + j] = product[i + j] + t * s  # each term below 2**(2 * bits) <= 2**24, a few per limb
  return normalize(tuple(product), bits, count)


def reaches(mass: Limbs, need: Limbs, units: Units) -> jax.Array:
  """Whether ``mass`` units reach the target :math:`\\pi T` (and hold at least one unit)."""
  some = mass[0] != 0
  for limb in mass[1:]:
    some = some | (limb != 0)
  return some & at_least(_shifted(mass, units), need)


def inclusive_prefix(limbs: Limbs, units: Units, axis: int = -1) -> Limbs:
  """Normalized units of every prefix that ends with each entry (cumulative sums along ``axis``)."""
  return normalize(tuple(lax.cumsum(limb, axis=axis % limb.ndim) for limb in limbs), units.bits, units.sum_limbs)
