"""An independent NumPy statement of the sampling filters' semantics (no dmljax import).

Order: descending value, ties by ascending index, -0.0 equal to +0.0, NaN dropped (as -inf).
Probabilities: weights exp(x - max) in float32 (1 where x is the max), counted in units of 2**-24
(rounded to nearest, ties to even); the nucleus is the shortest prefix whose units K satisfy
K * 2**24 >= ceil(p * 2**24) * T, and at least one entry. All integer sums are Python ints.
"""

from __future__ import annotations

import math

import numpy as np

UNITS = 2**24


def _clean64(row: np.ndarray) -> np.ndarray:
  v = np.asarray(row).astype(np.float64)
  v = np.where(np.isnan(v), -np.inf, v)
  return np.where(v == 0, 0.0, v)


def order(row: np.ndarray) -> np.ndarray:
  """The row's indices in dmljax's order with NaN as -inf."""
  v = _clean64(row)
  return np.lexsort((np.arange(v.size), -v))


def _work(row: np.ndarray) -> np.ndarray:
  wide = np.float64 if np.asarray(row).dtype == np.float64 else np.float32
  v = np.asarray(row).astype(wide)
  return np.where(np.isnan(v), np.array(-np.inf, wide), v)


def relative_weights(row: np.ndarray) -> np.ndarray:
  v = _work(row)
  top = v.max()
  with np.errstate(invalid="ignore", over="ignore"):
    return np.where(v == top, np.array(1, v.dtype), np.exp(v - top)).astype(v.dtype)


def units(row: np.ndarray) -> list[int]:
  w = relative_weights(row).astype(np.float64)  # exact: float32 values, scaled by a power of two
  return [int(u) for u in np.round(w * UNITS)]


def keep_top_k(row: np.ndarray, k: int) -> np.ndarray:
  size = row.shape[-1]
  keep = np.zeros(size, bool)
  if k <= 0 or k >= size:
    keep[:] = True
  else:
    keep[order(row)[:k]] = True
  return keep


def keep_top_p(row: np.ndarray, p: float) -> np.ndarray:
  size = row.shape[-1]
  p32 = np.float32(p)
  if np.isnan(p32) or p32 >= 1:
    return np.ones(size, bool)
  scaled = math.ceil(float(max(p32, np.float32(0))) * UNITS)
  q = units(row)
  total = sum(q)
  target = max(1, -(-scaled * total // UNITS))
  keep = np.zeros(size, bool)
  reached = 0
  for i in order(row):
    keep[i] = True
    reached += q[i]
    if reached >= target:
      break
  return keep


def keep_min_p(row: np.ndarray, min_p: float) -> np.ndarray:
  bound = np.float32(min_p)
  if np.isnan(bound):
    bound = np.float32(0)
  bound = min(bound, np.float32(1))
  w = relative_weights(row)
  return w >= np.asarray(bound).astype(w.dtype)


def masked(row: np.ndarray, keep: np.ndarray) -> np.ndarray:
  row = np.asarray(row)
  return np.where(keep & ~np.isnan(row), row, np.array(-np.inf, row.dtype))


def apply_rows(fn, logits: np.ndarray, params: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
  """``masked(row, fn(row, param))`` for every row, params broadcast to the rows."""
  logits = np.asarray(logits)
  batch = logits.shape[:-1]
  params = np.broadcast_to(np.asarray(params), batch)
  out = np.empty_like(logits)
  for index in np.ndindex(batch):
    out[index] = masked(logits[index], fn(logits[index], params[index].item()))
  return out


def greedy(logits: np.ndarray) -> np.ndarray:
  logits = np.asarray(logits)
  out = np.zeros(logits.shape[:-1], np.int32)
  for index in np.ndindex(logits.shape[:-1]):
    out[index] = order(logits[index])[0]
  return out
