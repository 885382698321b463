"""The one order key: every supported type's bits to a signed integer in dmljax's value order, and back.

dmljax orders values so that NaN ranks above +inf and all NaNs are equal, -0.0 equals +0.0, and integers are
ordered exactly (no negation, so INT_MIN is safe). Every element maps to a signed integer *rank key* (int32 for
types of up to 32 bits, int64 for 64-bit types) whose integer order is that value order; equal values get
equal keys, so index tie-breaks can be exact. This module is the only place that knows how a type's bits
encode its order; every strategy, kernel key and inverse is written in terms of it.

Floats are sign and magnitude, and for every float type JAX has the magnitude bits are ordered as the
magnitudes. Their layouts differ in what the top patterns mean (:class:`Layout`, read off the type itself):

* IEEE-like types (float16/32/64, bfloat16, float8_e5m2, float8_e4m3, float8_e3m4): +inf is the largest
  magnitude, every pattern above it is a NaN;
* ``fn`` types (float8_e4m3fn): no infinity, the all-ones magnitude is the NaN;
* ``fnuz`` types (float8_e4m3fnuz, e4m3b11fnuz, e5m2fnuz): no infinity and no -0.0; the pattern of -0.0
  (the sign bit alone) is the only NaN;
* float8_e8m0fnu: no sign bit (only positive powers of two) and the all-ones pattern is the NaN;
* float4_e2m1fn: no infinity and no NaN.

The key of a float with magnitude bits ``m`` is ``m``, ``-m`` when it is negative (so both zeros are 0), and
``top + 1`` for every NaN, where ``top`` is the largest magnitude that is not a NaN. Integer keys are the
value (unsigned ones of the key's width with the top bit flipped, which maps unsigned order onto signed
order). The key is computed from the bits with integer arithmetic alone (no select: XLA's TPU compiler
fuses such a pass into the TopK that consumes it, where a select makes it copy the input into another
layout first), so it is the same on every platform, under ``--xla_gpu_ftz``, and inside Pallas kernels
(:func:`key_of_bits`).

:func:`value_of_key` is the inverse: the input a key came from, and whether no other input has that key
(every integer; every float but the classes the key merges: the two zeros and the NaNs, where a type has
more than one of them).

Views of the same bits for other orders: :func:`unsigned_ascending_key` (the ascending order as unsigned
integers, for bisections over a key's bits), :func:`key_as_total_order_float` (a float whose IEEE total order is
the key's), and :func:`ieee_maximum_key`, where nothing is merged (-0.0 below +0.0, every NaN its own key):
the order of IEEE 754-2019 ``maximum`` and ``minimum``, which REDUCE's MAX and MIN return an element of.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import dtypes


@dataclasses.dataclass(frozen=True)
class Layout:
  """How a type's bits encode its order.

  Attributes:
    width: bits of one element (2, 4, 8, 16, 32 or 64).
    kind: ``"float"``, ``"signed"`` or ``"unsigned"``.
    key: the key's integer type, int32 or int64.
    signed: floats: whether the top bit is a sign bit.
    top: floats: the largest magnitude bits that are not a NaN (+inf's, or the largest finite's).
    nan_above_top: floats: whether magnitudes above ``top`` are NaNs (otherwise there are none up there).
    nan_at_sign: floats: whether the sign bit alone (-0.0's pattern) is the NaN (the ``fnuz`` types).
  """

  width: int
  kind: str
  key: np.dtype
  signed: bool = True
  top: int = 0
  nan_above_top: bool = False
  nan_at_sign: bool = False

  @property
  def has_nan(self) -> bool:
    return self.nan_above_top or self.nan_at_sign

  @property
  def nan_key(self) -> int:
    """The key of every NaN (floats with a NaN)."""
    return self.top + 1

  @property
  def merges(self) -> bool:
    """Whether some key stands for several bit patterns: both zeros, or several NaNs."""
    if self.kind != "float":
      return False
    several_nans = self.nan_above_top and (self.signed or self.top + 2 < 1 << self.width)
    return (self.signed and not self.nan_at_sign) or several_nans


def _width(dtype: np.dtype) -> int:
  """Bits of one element: 4 for float4/int4 (stored in a byte), 2 for int2."""
  if dtypes.is_float(dtype):
    return int(jnp.finfo(dtype).bits)
  return int(jnp.iinfo(dtype).bits)


def bits_dtype(dtype: np.dtype) -> np.dtype:
  """The unsigned integer type of ``dtype``'s width (uint4 for float4_e2m1fn): what its bits are read as."""
  width = _width(np.dtype(dtype))
  return np.dtype(getattr(jnp, f"uint{width}"))


@functools.cache
def layout(dtype: np.dtype) -> Layout:
  """The :class:`Layout` of ``dtype``, read off the type's own bit patterns (every float, every integer)."""
  dtype = np.dtype(dtype)
  width = _width(dtype)
  key = np.dtype(np.int64) if width > 32 else np.dtype(np.int32)
  if not dtypes.is_float(dtype):
    return Layout(width, "signed" if dtypes.is_signed_integer(dtype) else "unsigned", key)
  if width > 16:  # float32, float64: IEEE
    inf_bits = int(np.array(np.inf, dtype).view(f"uint{width}"))
    return Layout(width, "float", key, top=inf_bits, nan_above_top=True)
  # Narrow floats: decode every pattern.
  patterns: np.ndarray = np.arange(1 << width, dtype=np.uint16 if width == 16 else np.uint8)
  # A 4-bit float is held in a byte, its pattern in the low bits.
  with np.errstate(invalid="ignore"):
    decoded = patterns.view(dtype).astype(np.float64)
  sign = 1 << (width - 1)
  signed = bool(np.any(decoded < 0))
  magnitude_mask = sign - 1 if signed else (1 << width) - 1
  nan = np.isnan(decoded)
  nan_at_sign = signed and bool(nan[sign]) and int(nan.sum()) == 1
  ordinary = ~nan & ((patterns & (sign if signed else 0)) == 0)
  top = int(patterns[ordinary].max()) & magnitude_mask
  nan_above_top = bool(np.any(nan & ((patterns.astype(np.int64) & magnitude_mask) > top)))
  return Layout(width, "float", key, signed=signed, top=top, nan_above_top=nan_above_top, nan_at_sign=nan_at_sign)


def key_dtype(dtype: np.dtype) -> np.dtype:
  """int32 for types of up to 32 bits, int64 for 64-bit types."""
  return layout(np.dtype(dtype)).key


def int_constant(value: int, dtype: np.dtype) -> np.ndarray:
  """``value`` as a scalar of the integer ``dtype``, wrapping (two's complement)."""
  width = np.dtype(dtype).itemsize * 8
  value &= (1 << width) - 1
  if value >= 1 << (width - 1) and np.issubdtype(dtype, np.signedinteger):
    value -= 1 << width
  return np.array(value, dtype)


def mask_where(condition: jax.Array, dtype: np.dtype) -> jax.Array:
  """All ones where ``condition`` holds, zero elsewhere (arithmetic, not a select)."""
  return -condition.astype(dtype)


def raw_bits(x: jax.Array) -> jax.Array:
  """``x``'s bit pattern, zero-extended into the key's integer type."""
  dtype = np.dtype(x.dtype)
  lay = layout(dtype)
  unsigned = lax.bitcast_convert_type(x, bits_dtype(dtype)) if lay.width >= 8 else _sub_byte_bits(x)
  if lay.width == lay.key.itemsize * 8:
    return lax.bitcast_convert_type(unsigned, lay.key)
  return unsigned.astype(lay.key)


def _sub_byte_bits(x: jax.Array) -> jax.Array:
  dtype = np.dtype(x.dtype)
  if dtypes.is_float(dtype):
    return lax.bitcast_convert_type(x, bits_dtype(dtype))
  # int4/int2 and their unsigned twins: the value's low bits are the pattern.
  return x.astype(np.int32).astype(np.uint32) & np.uint32((1 << layout(dtype).width) - 1)


def key_of_bits(bits: jax.Array, dtype: np.dtype) -> jax.Array:
  """The ascending key of the ``dtype`` elements whose patterns are the low bits of the integer array ``bits``.

  ``bits`` may be of any integer type of at least the key's width (higher bits are ignored); the result has
  the key's type. Integer operations only, so it lowers everywhere, Pallas kernels included.
  """
  dtype = np.dtype(dtype)
  lay = layout(dtype)
  kdt = lay.key
  key_width = kdt.itemsize * 8
  if bits.dtype != kdt:
    same_width = bits.dtype.itemsize == kdt.itemsize
    bits = lax.bitcast_convert_type(bits, kdt) if same_width else bits.astype(kdt)
  if lay.kind == "signed":
    shift = int_constant(key_width - lay.width, kdt)
    return lax.shift_right_arithmetic(lax.shift_left(bits, shift), shift) if lay.width < key_width else bits
  if lay.kind == "unsigned":
    if lay.width < key_width:
      return bits & int_constant((1 << lay.width) - 1, kdt)
    return bits ^ int_constant(1 << (key_width - 1), kdt)
  pattern = bits & int_constant((1 << lay.width) - 1, kdt) if lay.width < key_width else bits
  if not lay.signed:
    return pattern  # float8_e8m0fnu: the bits are the order, the NaN (all ones) the largest
  sign_bit = int_constant(1 << (lay.width - 1), kdt)
  magnitude = pattern & int_constant((1 << (lay.width - 1)) - 1, kdt)
  negative = mask_where(pattern & sign_bit != 0, kdt)
  key = (magnitude ^ negative) - negative  # m, or -m for negative values
  nans = [magnitude > int_constant(lay.top, kdt)] if lay.nan_above_top else []
  nans += [pattern == sign_bit] if lay.nan_at_sign else []
  if not nans:
    return key
  is_nan = mask_where(nans[0] if len(nans) == 1 else nans[0] | nans[1], kdt)
  return (key & ~is_nan) | (int_constant(lay.nan_key, kdt) & is_nan)


def ascending_key(x: jax.Array) -> jax.Array:
  """A signed integer key, ordered as ``x`` in dmljax's value order (NaN largest, -0 == +0).

  int32 for types of up to 32 bits, int64 for 64-bit types; computed without selects.
  """
  dtype = np.dtype(x.dtype)
  lay = layout(dtype)
  if lay.kind == "signed" and lay.width >= 8:
    return x.astype(lay.key)
  if lay.kind == "unsigned" and 8 <= lay.width < lay.key.itemsize * 8:
    return x.astype(lay.key)
  return key_of_bits(raw_bits(x), dtype)


def unsigned_ascending_key(x: jax.Array) -> jax.Array:
  """:func:`ascending_key` as an unsigned integer of the same width and the same order (top bit flipped).

  Bisections over a key's bits (the sampling filters' whole-row search) want the order as unsigned integers,
  where the smallest key is 0 and the largest all ones.
  """
  key = ascending_key(x)
  unsigned = np.dtype(np.uint64) if key.dtype.itemsize == 8 else np.dtype(np.uint32)
  return lax.bitcast_convert_type(key, unsigned) ^ np.array(1 << (8 * unsigned.itemsize - 1), unsigned)


def descending_key(x: jax.Array) -> jax.Array:
  """The reverse order: bitwise not reverses a two's-complement order exactly."""
  return ~ascending_key(x)


def selection_key(x: jax.Array, largest_first: bool) -> jax.Array:
  """The key whose largest values come first: :func:`ascending_key`, or :func:`descending_key` for the smallest."""
  return ascending_key(x) if largest_first else descending_key(x)


def extreme_key(x: jax.Array, find_max: bool) -> jax.Array:
  """The key whose largest value is argmax's (``find_max``) or argmin's answer: NaN is the extreme either way.

  For argmin the key is :func:`descending_key` with every NaN moved to the largest key (an xor, not a select).
  """
  if find_max:
    return ascending_key(x)
  key = descending_key(x)
  lay = layout(np.dtype(x.dtype))
  if lay.kind != "float" or not lay.has_nan:
    return key
  largest = np.array(np.iinfo(key.dtype).max, key.dtype)
  nan = mask_where(key == ~int_constant(lay.nan_key, key.dtype), key.dtype)
  return key ^ ((key ^ largest) & nan)


def key_range(dtype: np.dtype) -> tuple[int, int]:
  """The smallest and the largest ascending key of ``dtype`` (Python ints)."""
  lay = layout(np.dtype(dtype))
  if lay.kind == "signed":
    return -(1 << (lay.width - 1)), (1 << (lay.width - 1)) - 1
  if lay.kind == "unsigned":
    if lay.width == lay.key.itemsize * 8:
      return -(1 << (lay.width - 1)), (1 << (lay.width - 1)) - 1
    return 0, (1 << lay.width) - 1
  largest = lay.nan_key if lay.has_nan else lay.top
  if not lay.signed:
    return 0, largest
  return -lay.top, largest


def value_of_key(key: jax.Array, dtype: np.dtype) -> tuple[jax.Array, jax.Array]:
  """The ``dtype`` input whose :func:`ascending_key` is ``key``, and where no other input has that key.

  Integers: every key. Floats: every key but the zero's (+0.0 and -0.0, where the type has both) and the
  NaN's (where it has several NaNs); there the value is one of the inputs with that key (+0.0, or a NaN).
  """
  dtype = np.dtype(dtype)
  lay = layout(dtype)
  kdt = lay.key
  key = key.astype(kdt)
  key_width = kdt.itemsize * 8
  if lay.kind == "unsigned" and lay.width == key_width:
    pattern = key ^ int_constant(1 << (key_width - 1), kdt)
  elif lay.kind != "float" or not lay.signed:
    pattern = key
  else:
    sign_bit = int_constant(1 << (lay.width - 1), kdt)
    negative = mask_where(key < 0, kdt)
    pattern = ((key ^ negative) - negative) | (sign_bit & negative)
    if lay.nan_at_sign:
      is_nan = mask_where(key == int_constant(lay.nan_key, kdt), kdt)
      pattern = (pattern & ~is_nan) | (sign_bit & is_nan)
  exact = jnp.ones(key.shape, bool)
  if lay.merges:
    exact = key != int_constant(0, kdt) if lay.signed and not lay.nan_at_sign else exact
    if lay.has_nan:
      exact = exact & (key != int_constant(lay.nan_key, kdt))
  return _from_pattern(pattern, dtype), exact


def _from_pattern(pattern: jax.Array, dtype: np.dtype) -> jax.Array:
  """The ``dtype`` elements whose bits are the low bits of the key-typed ``pattern``."""
  lay = layout(dtype)
  if lay.kind == "signed":
    return pattern.astype(dtype)
  if lay.width < 8:
    unsigned = (pattern & int_constant((1 << lay.width) - 1, pattern.dtype)).astype(bits_dtype(dtype))
    return unsigned.astype(dtype) if lay.kind == "unsigned" else lax.bitcast_convert_type(unsigned, dtype)
  if lay.width == pattern.dtype.itemsize * 8:
    unsigned = lax.bitcast_convert_type(pattern, bits_dtype(dtype))
  else:
    unsigned = (pattern & int_constant((1 << lay.width) - 1, pattern.dtype)).astype(bits_dtype(dtype))
  return unsigned if lay.kind == "unsigned" else lax.bitcast_convert_type(unsigned, dtype)


def extreme_bits(dtype: np.dtype, *, largest: bool) -> np.ndarray:
  """The bits (as :func:`raw_bits` gives them, a NumPy scalar of the key's type) of an element with the largest or
  the smallest key of ``dtype``: what a kernel pads a row with so the padding ranks last."""
  lay = layout(np.dtype(dtype))
  low, high = key_range(dtype)
  key = high if largest else low
  if lay.kind == "signed":
    return int_constant(key, lay.key)
  if lay.kind == "unsigned":
    return int_constant(key ^ (1 << (lay.width - 1)) if lay.width == lay.key.itemsize * 8 else key, lay.key)
  if not lay.signed or key >= 0:
    return int_constant(key, lay.key)
  return int_constant((1 << (lay.width - 1)) | -key, lay.key)


def canonical_float(x: jax.Array) -> jax.Array:
  """A float ``x`` widened to float32 (float64 for 64-bit types), -0.0 made +0.0 and every NaN the positive NaN.

  Equal values then have equal bits, and the IEEE total order of the result is the library's order. Every
  narrower float converts to float32 exactly (its values, its NaNs as NaNs).
  """
  work = np.dtype(np.float64) if key_dtype(np.dtype(x.dtype)) == np.int64 else np.dtype(np.float32)
  f = x.astype(work)
  f = jnp.where(f == 0, np.array(0, work), f)
  return jnp.where(jnp.isnan(f), np.array(np.nan, work), f)


def has_ieee_maximum_key(dtype: np.dtype) -> bool:
  """Float types with a sign bit, both zeros and their NaNs above the largest magnitude (float16, bfloat16,
  float32, float64 and the float8 types with a -0.0): those :func:`ieee_maximum_key` orders."""
  lay = layout(np.dtype(dtype))
  return lay.kind == "float" and lay.signed and not lay.nan_at_sign and lay.width >= 8


def nan_magnitudes(dtype: np.dtype) -> int:
  """How many magnitude patterns of the float ``dtype`` are NaNs above its largest magnitude (``top``)."""
  lay = layout(np.dtype(dtype))
  return (1 << (lay.width - 1)) - 1 - lay.top


def ieee_maximum_key(bits: jax.Array, dtype: np.dtype, *, find_max: bool) -> jax.Array:
  r"""A key of ``bits``'s type (the bits of ``dtype`` elements, as a signed integer of their width) whose order is
  IEEE 754-2019 ``maximum``'s (``find_max``) or ``minimum``'s, every bit pattern with a key of its own.

  For the types of :func:`has_ieee_maximum_key`. With ``w`` the width, ``b`` the bits (MIN: with the sign bit
  flipped, as :math:`\min(x) = -\max(-x)`) and ``C`` the number of NaN magnitudes (:func:`nan_magnitudes`),

  .. math:: t = b \oplus ((b \gg (w - 1)) \land (2^{w-1} - 1)), \qquad k = t - C \pmod{2^w}

  :math:`t` is the magnitude :math:`m` for a positive sign and :math:`-1 - m` for a negative one (the view
  :func:`key_as_total_order_float` inverts), so -0.0 < +0.0 and the order is IEEE 754's total order;
  subtracting :math:`C` (wrapping) moves the negative NaNs, which that order puts below -inf, to the top,
  above the positive NaNs. The maximum is then one element, with no tie to break; the positive NaNs keep the
  order of their bits, the negative NaNs' order is reversed. :func:`bits_of_ieee_maximum_key` inverts it.
  """
  w = layout(np.dtype(dtype)).width
  if not find_max:
    bits = bits ^ int_constant(1 << (w - 1), bits.dtype)
  return _flip_negative(bits) - int_constant(nan_magnitudes(dtype), bits.dtype)


def bits_of_ieee_maximum_key(key: jax.Array, dtype: np.dtype, *, find_max: bool) -> jax.Array:
  """The bits (a signed integer of the width) of the element whose :func:`ieee_maximum_key` is ``key``."""
  w = layout(np.dtype(dtype)).width
  bits = _flip_negative(key + int_constant(nan_magnitudes(dtype), key.dtype))
  return bits if find_max else bits ^ int_constant(1 << (w - 1), key.dtype)


def _flip_negative(bits: jax.Array) -> jax.Array:
  """Sign-magnitude bits <-> two's-complement order (an involution)."""
  width = bits.dtype.itemsize * 8
  magnitude = np.array((1 << (width - 1)) - 1, bits.dtype)
  return bits ^ (lax.shift_right_arithmetic(bits, np.array(width - 1, bits.dtype)) & magnitude)


def key_as_total_order_float(key: jax.Array) -> jax.Array:
  """The float of the key's width whose IEEE total order equals the key's order.

  The bit patterns that are NaNs, subnormals or -0.0 as floats are keys like any other, so only a
  comparison in the total order (``lax.sort``'s and ``lax.top_k``'s comparator) keeps them apart.
  """
  fdt = np.float64 if key.dtype.itemsize == 8 else np.float32
  return lax.bitcast_convert_type(_flip_negative(key), fdt)


def key_of_total_order_float(view: jax.Array) -> jax.Array:
  """The key :func:`key_as_total_order_float` made ``view`` from (its inverse)."""
  idt = np.int64 if view.dtype.itemsize == 8 else np.int32
  return _flip_negative(lax.bitcast_convert_type(view, idt))
