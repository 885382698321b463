"""An independent NumPy statement of the sampling filters' semantics (no dmljax import).

Order: descending value, ties by ascending index, -0.0 equal to +0.0, NaN dropped (as -inf).
Probabilities: the float32 softmax: weights exp(x - max) in float32 (1 where x is the max), each probability
the float32 rounding of weight / (exact sum of the weights); the nucleus is the shortest prefix whose exact
(float64) cumulative probability is >= p, and at least one entry. The implementation may differ only where p
lies within TOLERANCE of a cumulative probability: :func:`top_p_counts` lists the kept counts allowed.
"""

from __future__ import annotations

import math

import numpy as np

TOLERANCE = 2.0**-21  # the documented bound


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


def probabilities(row: np.ndarray) -> np.ndarray:
  """The float32 softmax of the row (float64 for float64 rows), as float64 values."""
  w = relative_weights(row)
  total = math.fsum(w.astype(np.float64).tolist())
  return (w.astype(np.float64) / total).astype(w.dtype).astype(np.float64)


def _cumulative(row: np.ndarray) -> np.ndarray:
  return np.cumsum(probabilities(row)[order(row)])


def keep_top_k(row: np.ndarray, k: int) -> np.ndarray:
  size = row.shape[-1]
  keep = np.zeros(size, bool)
  if k <= 0 or k >= size:
    keep[:] = True
  else:
    keep[order(row)[:k]] = True
  return keep


def _prefix(row: np.ndarray, count: int) -> np.ndarray:
  keep = np.zeros(row.shape[-1], bool)
  keep[order(row)[:count]] = True
  return keep


def keep_top_p(row: np.ndarray, p: float) -> np.ndarray:
  """The exact nucleus."""
  size = row.shape[-1]
  p32 = np.float32(p)
  if np.isnan(p32) or p32 >= 1:
    return np.ones(size, bool)
  reached = np.nonzero(_cumulative(row) >= float(p32))[0]
  return _prefix(row, int(reached[0]) + 1 if reached.size else size)


def top_p_counts(row: np.ndarray, p: float) -> set[int]:
  """Every kept count allowed: the exact one, and any whose cut lies within TOLERANCE of p."""
  size = row.shape[-1]
  p32 = np.float32(p)
  if np.isnan(p32) or p32 >= 1:
    return {size}
  exact = int(np.sum(keep_top_p(row, p)))
  c = _cumulative(row)
  before = np.concatenate([[-np.inf], c[:-1]])
  near = (c >= float(p32) - TOLERANCE) & (before < float(p32) + TOLERANCE)
  return {exact} | {int(i) + 1 for i in np.nonzero(near)[0]}


def expected_top_p(logits: np.ndarray, p: np.ndarray, got: np.ndarray) -> np.ndarray:
  """``top_p_mask``'s expected output: per row, the masked prefix of an allowed count (:func:`top_p_counts`)
  that equals ``got`` bit for bit if there is one, else the exact nucleus (so a wrong answer fails a bitwise
  comparison)."""
  logits, got = np.asarray(logits), np.asarray(got)
  batch = logits.shape[:-1]
  p = np.broadcast_to(np.asarray(p), batch)
  out = np.empty_like(logits)
  for index in np.ndindex(batch):
    row = logits[index]
    out[index] = masked(row, keep_top_p(row, p[index].item()))
    for count in sorted(top_p_counts(row, p[index].item())):
      candidate = masked(row, _prefix(row, count))
      if np.array_equal(candidate.view(np.uint8), np.asarray(got[index]).view(np.uint8)):
        out[index] = candidate
        break
  return out


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


# ---- sample's kept set: the filters rank the raw logits; the probabilities are those of z = (x - max x) / T ----


def scaled(row: np.ndarray, temperature: float, *, flush: bool = False) -> np.ndarray:
  """z = (x - max x) / T in the work type: 0 at the row's largest entries (+inf ones included), -inf where
  x - max x is -inf (NaN entries count as -inf). ``flush``: subnormal quotients flushed to zero, as XLA:CPU
  computes them."""
  v = _work(row)
  top = v.max()
  with np.errstate(invalid="ignore", over="ignore", under="ignore"):
    difference = np.where(v == top, np.array(0, v.dtype), v - top)
    z = np.where(difference == -np.inf, difference, difference / np.array(temperature, v.dtype))
  if flush:
    z = np.where(np.abs(z) < np.finfo(v.dtype).tiny, np.array(0, v.dtype) * np.sign(z), z)
  return np.where(v == top, np.array(0, v.dtype), z).astype(v.dtype)


def sampler_keep(
  row: np.ndarray,
  temperature: float,
  k: int | None = None,
  p: float | None = None,
  min_p: float | None = None,
  *,
  ranking: str = "raw",
) -> np.ndarray:
  """The entries ``sample`` may draw from ``row`` (temperature > 0): top-k, then top-p on what top-k kept, then
  min-p, each keeping a prefix of the order of the raw logits (``ranking="raw"``, the documented rule) or of the
  scaled ones as the device computes them (``ranking="scaled"``, the other reading, for the tests that must tell the
  two apart); the probabilities are softmax(z) in either reading, and an entry of weight 0 is never drawn."""
  z = scaled(row, temperature, flush=True)
  weights = np.exp(z)
  ranked = order(row) if ranking == "raw" else np.lexsort((np.arange(z.size), -z.astype(np.float64)))
  size = row.shape[-1]
  keep = np.zeros(size, bool)
  count = size if k is None or k <= 0 or k >= size else k
  keep[ranked[:count]] = True
  if p is not None and np.float32(p) < 1:
    kept_weights = np.where(keep, weights, 0).astype(np.float64)
    total = math.fsum(kept_weights.tolist())
    probability = (kept_weights / total).astype(weights.dtype).astype(np.float64)
    reached = np.nonzero(np.cumsum(probability[ranked]) >= float(np.float32(p)))[0]
    keep[:] = False
    keep[ranked[: max(int(reached[0]) + 1 if reached.size else count, 1)]] = True
  if min_p is not None:
    keep &= weights >= np.asarray(min(np.float32(min_p), np.float32(1))).astype(weights.dtype)
  return keep & (weights > 0) & ~np.isnan(np.asarray(row))
