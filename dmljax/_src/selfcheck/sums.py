"""The self-check's REDUCE SUM and LOG_SUM_EXP checks.

A float sum's last bits depend on the order of summation, which no platform fixes, so each function has two checks:

* ``sum exact`` / ``logsumexp exact``: inputs whose exact result is a value of the type, where every order gives
  it: sums of values that cancel in pairs, plus one more (all of them multiples of 1/16 of at most 64, so every
  partial sum is exact in float32); NaN, ±inf and -inf rows; log-sum-exp of one finite value among -inf, and of
  rows of one element. Compared by value: either zero, any NaN. Integers sum bit for bit, wrapping in their own
  width (two's complement).
* ``sum tol`` / ``logsumexp tol``: random rows against the float64 result, within
  ``2 ulp(result) + N eps sum|x|`` (SUM) and ``2 ulp(result) + (N + 8) eps`` (LOG_SUM_EXP), ``ulp`` the type's
  spacing at the result and ``eps`` the accumulator's (float32 for 32-bit and narrower types, float64 for float64).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

import dmljax as dml
from dmljax._src.selfcheck import inputs, reference
from dmljax._src.selfcheck.checks import NotApplicable, Plan

ROWS, LENGTH = 8, 256


def _floats_only(dtype: np.dtype) -> None:
  if not reference.is_float(dtype):
    raise NotApplicable("LOG_SUM_EXP takes floats only (DirectML: no integer LOG_SUM_EXP)")


def _values_of(dtype: np.dtype) -> np.ndarray:
  """The multiples of 1/16 in [-64, 64] that ``dtype`` holds exactly, as float64 (no -0.0)."""
  candidates = np.arange(-1024, 1025) / 16.0
  with np.errstate(invalid="ignore", over="ignore"):
    back = candidates.astype(dtype).astype(np.float64)
  return candidates[back == candidates]


def _has(dtype: np.dtype, value: float) -> bool:
  with np.errstate(invalid="ignore", over="ignore"):
    back = np.array([value]).astype(dtype).astype(np.float64)[0]
  return bool(back == value or (np.isnan(value) and np.isnan(back)))


def _exact_sum_rows(dtype: np.dtype, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """(rows, exact sums): values cancelling in pairs plus one, then rows with NaN and infinities where the type
  has them."""
  rng = np.random.default_rng(seed)
  values = _values_of(dtype)
  rows = np.zeros((ROWS, LENGTH))
  if values.min() >= 0:  # no negative values (float8_e8m0fnu): one power of two, LENGTH times
    for r in range(ROWS):
      rows[r] = values[rng.integers(len(values))]
  else:
    for r in range(ROWS):
      halves = rng.choice(values, (LENGTH - 2) // 2)
      extra = [rng.choice(values), 0.0][: LENGTH - 2 * len(halves)]  # the sum: a value of the type
      rows[r] = rng.permutation(np.concatenate([halves, -halves, extra]))
  specials = [[np.nan], [np.inf, 1.0], [np.inf, -np.inf], [-np.inf, 1.0], [np.nan, np.inf]]
  for r, special in enumerate(s for s in specials if all(_has(dtype, v) for v in s)):
    rows[r % ROWS, rng.choice(LENGTH, len(special), replace=False)] = special
  x = rows.astype(dtype)
  with np.errstate(invalid="ignore"):
    return x, reference.decoded(x).sum(axis=-1)


def _random_rows(dtype: np.dtype, seed: int, positive: bool) -> np.ndarray:
  """Random finite rows that cannot overflow the type when summed."""
  rng = np.random.default_rng(seed)
  largest = float(ml_dtypes.finfo(dtype).max)
  raw = rng.standard_normal((ROWS, LENGTH)) * min(3.0, largest / (4 * LENGTH))
  raw = np.clip(np.abs(raw) if positive else raw, -largest / LENGTH, largest / LENGTH)
  return raw.astype(dtype)


def _judge_values(
  what: str, x: np.ndarray, want: np.ndarray, tolerance: np.ndarray | None
) -> Callable[[Any], str | None]:
  def judge(got: Any) -> str | None:
    got = np.asarray(got)
    if got.dtype != x.dtype or got.shape != x.shape[:-1]:
      return f"{what}: {got.dtype}{list(got.shape)} returned, {x.dtype}{list(x.shape[:-1])} expected"
    value = reference.decoded(got)
    with np.errstate(invalid="ignore"):
      if tolerance is None:
        good = np.where(np.isnan(want), np.isnan(value), value == want)
      else:
        good = np.abs(value - want) <= tolerance
    bad = np.flatnonzero(~good)
    if not len(bad):
      return None
    r = int(bad[0])
    allowed = "" if tolerance is None else f" within {float(tolerance[r]):.3g}"
    return f"{what}, row {r}: {value[r]!r} (bits 0x{int(reference.bits_of(got)[r]):x}); expected {want[r]!r}{allowed}"

  return judge


def sum_exact(dtype: np.dtype, seed: int) -> Plan:
  """SUM where every order of summation gives the same result: integers (wrapping) and exactly summable floats."""
  if not reference.is_float(dtype):
    x = inputs.rows(dtype, (ROWS, LENGTH), True, seed)
    want = reference.integer_sum(x)

    def judge(got: Any) -> str | None:
      got = np.asarray(got)
      if got.dtype != dtype or got.shape != want.shape:
        return f"reduce sum: {got.dtype}{list(got.shape)} returned, {dtype}{list(want.shape)} expected"
      bits = reference.bits_of(got).astype(np.uint64)
      bad = np.flatnonzero(bits != want)
      if len(bad):
        r = int(bad[0])
        return f"reduce sum, row {r}: bits 0x{int(bits[r]):x}; expected 0x{int(want[r]):x} (wrapped)"
      return None

    # DirectML's rule (the input's type, wrapping); the functional default widens as jnp.sum does.
    return Plan((x,), lambda x: dml.reduce(x, "sum", -1, promote_integers=False), judge)
  x, want = _exact_sum_rows(dtype, seed)
  return Plan((x,), lambda x: dml.reduce(x, "sum", -1), _judge_values("reduce sum (exactly summable)", x, want, None))


def sum_within(dtype: np.dtype, seed: int) -> Plan:
  """SUM of random floats within 2 ulp(result) + N eps sum|x| of the exact sum."""
  if not reference.is_float(dtype):
    raise NotApplicable("integer sums are exact: see the sum exact column")
  x = _random_rows(dtype, seed, positive=_values_of(dtype).min() >= 0)
  exact, magnitude = reference.float_sum(x)
  tolerance = 2 * reference.ulp(exact, dtype) + LENGTH * reference.accumulator_epsilon(dtype) * magnitude
  return Plan((x,), lambda x: dml.reduce(x, "sum", -1), _judge_values("reduce sum", x, exact, tolerance))


def _exact_log_sum_exp_rows(dtype: np.dtype, seed: int) -> np.ndarray | None:
  """Rows whose log-sum-exp is a value of the type: one finite value among -inf (or NaN), all -inf, with +inf or
  NaN; ``None`` for a type with neither -inf nor NaN."""
  if not (_has(dtype, -np.inf) or _has(dtype, np.nan)):
    return None
  rng = np.random.default_rng(seed)
  values = _values_of(dtype)
  rows = np.full((ROWS, LENGTH), -np.inf if _has(dtype, -np.inf) else np.nan)
  for r in range(ROWS):
    rows[r, rng.integers(LENGTH)] = values[rng.integers(len(values))]
  if _has(dtype, np.inf):
    rows[1, rng.integers(LENGTH)] = np.inf
    rows[2] = -np.inf
    rows[3, :5] = [np.inf, np.nan, 1.0, -np.inf, np.inf]
  return rows.astype(dtype)


def log_sum_exp_exact(dtype: np.dtype, seed: int) -> Plan:
  """LOG_SUM_EXP where the exact result is a value of the type (every special bit pattern alone in a row too)."""
  _floats_only(dtype)
  # One element alone: the element itself; but not one that is subnormal in float32, the accumulator of the
  # narrow types (float8_e8m0fnu's 2**-127), which a platform may flush to zero.
  pool = reference.from_bits(inputs.special_bits(dtype), dtype)
  with np.errstate(invalid="ignore"):
    tiny = np.abs(reference.decoded(pool)) < float(np.finfo(np.float32).smallest_normal)
  alone = pool[~tiny | (reference.decoded(pool) == 0) | (np.dtype(dtype).itemsize == 8)][:, None]
  arrays = [a for a in (_exact_log_sum_exp_rows(dtype, seed), alone) if a is not None]
  judges = [
    _judge_values(f"reduce logsumexp of {a.shape[-1]} element(s), exact cases", a, reference.log_sum_exp(a), None)
    for a in arrays
  ]

  def judge(outputs: Any) -> str | None:
    return next((problem for one, got in zip(judges, outputs, strict=True) if (problem := one(got))), None)

  return Plan(tuple(arrays), lambda *a: [dml.reduce(x, "logsumexp", -1) for x in a], judge)


def log_sum_exp_within(dtype: np.dtype, seed: int) -> Plan:
  """LOG_SUM_EXP of random floats within 2 ulp(result) + (N + 8) eps of the float64 result."""
  _floats_only(dtype)
  x = _random_rows(dtype, seed, positive=_values_of(dtype).min() >= 0)
  want = reference.log_sum_exp(x)
  tolerance = 2 * reference.ulp(want, dtype) + (LENGTH + 8) * reference.accumulator_epsilon(dtype)
  return Plan((x,), lambda x: dml.reduce(x, "logsumexp", -1), _judge_values("reduce logsumexp", x, want, tolerance))
