"""Independent NumPy reference implementation of the dmljax behaviour contract.

Written from the behaviour contract, ``docs/semantics.rst`` (and DirectML's pages it restates), alone,
independently of the library: this module imports only NumPy and the standard
library and must never import ``jax`` or ``dmljax``.  Clarity and exactness come
before speed; every function is vectorised along the operated axes so arrays of
some tens of thousands of elements are cheap.

Functions (all take and return plain ``numpy`` arrays):

* :func:`ref_top_k`        -- TOP_K1 / TOP_K
* :func:`ref_arg_reduce`   -- ARGMIN / ARGMAX
* :func:`ref_gather_nd`    -- GATHER_ND1 / GATHER_ND, TF/ONNX shapes
* :func:`ref_reduce`       -- REDUCE
* :func:`ref_extreme`      -- REDUCE's MAX / MIN, bit for bit
* :func:`ref_complex_extreme` -- the functional path's MAX / MIN of complex numbers
* :func:`ref_one_hot`      -- ONE_HOT, DML layout

Low-precision float types that NumPy does not know natively (``bfloat16`` and
friends from ``ml_dtypes``) are recognised by dtype name, so ``ml_dtypes`` need
not be imported here; NumPy can cast them to ``float32`` once ``ml_dtypes`` has
been imported by the caller (which is the only way to create such arrays).
"""

import numpy as np

__all__ = [
  "ref_arg_reduce",
  "ref_complex_extreme",
  "ref_extreme",
  "ref_gather_nd",
  "ref_one_hot",
  "ref_reduce",
  "ref_top_k",
]

# dtype names of ml_dtypes' floating types (bfloat16, float8_e4m3fn, ...) and of its sub-byte integers.
_EXTRA_FLOAT_PREFIXES = ("bfloat16", "float8", "float6", "float4")
_EXTRA_SIGNED = ("int2", "int4")
_EXTRA_UNSIGNED = ("uint2", "uint4")


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #
def _is_float(dtype) -> bool:
  dtype = np.dtype(dtype)
  return dtype.kind == "f" or dtype.name.startswith(_EXTRA_FLOAT_PREFIXES)


def _is_signed_int(dtype) -> bool:
  dtype = np.dtype(dtype)
  return dtype.kind == "i" or dtype.name in _EXTRA_SIGNED


def _is_unsigned_int(dtype) -> bool:
  dtype = np.dtype(dtype)
  return dtype.kind == "u" or dtype.name in _EXTRA_UNSIGNED


def _check_numeric(x: np.ndarray, op: str) -> None:
  if not (_is_float(x.dtype) or _is_signed_int(x.dtype) or _is_unsigned_int(x.dtype)):
    raise TypeError(f"{op}: unsupported dtype {x.dtype}")


def _comparable(x: np.ndarray) -> np.ndarray:
  """Values on which NumPy comparisons are exact.

  Floats (float16, bfloat16, float32, float64, ...) are widened to float64,
  which represents every one of them exactly: ml_dtypes' types (bfloat16, the
  float8, float6 and float4 variants) are decoded from their bits by ml_dtypes'
  own cast to float32, exact for all of them (NumPy keeps float32 subnormals,
  so float8_e8m0fnu's 2**-127 stays apart from zero).  Integers stay in their
  own type (uint64/int64 extremes compare exactly; nothing is negated); the
  sub-byte ones (int2, int4, uint2, uint4) are widened to int64.
  """
  if _is_float(x.dtype):
    if x.dtype.kind == "f" and x.dtype.itemsize > 8:  # longdouble: keep as is
      return x
    with np.errstate(invalid="ignore"):  # NumPy warns of a signalling NaN's cast
      if x.dtype.kind != "f":  # ml_dtypes types: go through float32
        return x.astype(np.float32).astype(np.float64)
      return x.astype(np.float64)
  if x.dtype.kind not in "iu":  # ml_dtypes' sub-byte integers
    return x.astype(np.int64)
  return x


def _nan_mask(x: np.ndarray) -> np.ndarray:
  if _is_float(x.dtype):
    return np.isnan(_comparable(x))
  return np.zeros(x.shape, dtype=bool)


def _order_key(x: np.ndarray) -> np.ndarray:
  """Dense integer rank of every element of ``x`` (same shape, int64).

  key(a) < key(b)  iff  a orders before b, and key(a) == key(b) iff they tie,
  under the SPEC's total order: usual numeric order, -0.0 == +0.0, every NaN
  equal to every other NaN and above +inf.
  """
  a = _comparable(x).reshape(-1)
  if a.size == 0:
    return np.zeros(x.shape, dtype=np.int64)
  perm = np.argsort(a, kind="stable")  # NumPy sorts NaNs to the end
  s = a[perm]
  differ = s[1:] != s[:-1]  # -0.0 != +0.0 is False: they tie
  if _is_float(x.dtype):
    nan = np.isnan(s)
    differ &= ~(nan[1:] & nan[:-1])  # NaN != NaN is True; make NaNs tie
  ranks_sorted = np.concatenate([[0], np.cumsum(differ, dtype=np.int64)])
  key = np.empty(a.shape, dtype=np.int64)
  key[perm] = ranks_sorted
  return key.reshape(x.shape)


def _normalize_axis(axis: int, ndim: int, op: str) -> int:
  axis = int(axis)
  if not -ndim <= axis < ndim:
    raise ValueError(f"{op}: axis {axis} out of range for rank {ndim}")
  return axis % ndim


def _normalize_axes(axes, ndim: int, op: str) -> tuple:
  norm = [_normalize_axis(a, ndim, op) for a in axes]
  if len(set(norm)) != len(norm):
    raise ValueError(f"{op}: axes must hold distinct axes, got {tuple(axes)}")
  return tuple(sorted(norm))


def _to_last(x: np.ndarray, axes: tuple) -> np.ndarray:
  """Move ``axes`` (ascending) to the end and flatten them into one axis.

  The flattened position is the row-major flat index over the reduced axes,
  taken in ascending axis order.  With no axes a trailing axis of size 1 is
  added (each element reduced on its own, N = 1).
  """
  nd = x.ndim
  k = len(axes)
  moved = np.moveaxis(x, axes, tuple(range(nd - k, nd)))
  kept_shape = moved.shape[: nd - k]
  return moved.reshape((*kept_shape, -1) if k else (*kept_shape, 1))


def _keepdims_shape(shape: tuple, axes: tuple) -> tuple:
  return tuple(1 if i in axes else s for i, s in enumerate(shape))


# --------------------------------------------------------------------------- #
# SPEC section 2: TOP_K1
# --------------------------------------------------------------------------- #
def ref_top_k(x: np.ndarray, k: int, axis: int, direction: str):
  """K largest ("decreasing") or K smallest ("increasing") along ``axis``.

  Returns ``(values, indices)``: values are bit-exact copies of input elements
  (x's dtype), indices are int64 positions within the sequence.  Ties (equal
  values, including -0.0 vs +0.0 and NaN vs NaN) come in ascending index
  order in both directions; NaN ranks above +inf.
  """
  x = np.asarray(x)
  _check_numeric(x, "TOP_K")
  if x.ndim == 0:
    raise ValueError("TOP_K: input must have rank >= 1")
  axis = _normalize_axis(axis, x.ndim, "TOP_K")
  n = x.shape[axis]
  k = int(k)
  if not 1 <= k <= n:
    raise ValueError(f"TOP_K: k must satisfy 1 <= k <= {n}; got k={k}")
  direction = direction.lower()
  if direction not in ("decreasing", "increasing"):
    raise ValueError(f"TOP_K: bad direction {direction!r}")

  key = _order_key(x)  # small non-negative ints: negation cannot overflow
  if direction == "decreasing":
    key = -key
  # A stable ascending sort of the key keeps equal elements in index order.
  order = np.argsort(key, axis=axis, kind="stable")
  idx = np.take(order, np.arange(k), axis=axis)
  values = np.take_along_axis(x, idx, axis=axis)
  return values, idx.astype(np.int64)


# --------------------------------------------------------------------------- #
# SPEC section 3: ARGMIN / ARGMAX
# --------------------------------------------------------------------------- #
def ref_arg_reduce(x, axes, kind: str, direction: str) -> np.ndarray:
  """Index of the minimum ("min") or maximum ("max") over ``axes``.

  Output keeps x's rank with reduced axes of size 1 (int64).  The index is
  the row-major flat index over the reduced axes only, sizes in ascending
  axis order.  "increasing" returns the first extreme, "decreasing" the last.
  A NaN is the extreme for both min and max; -0.0 equals +0.0.
  """
  x = np.asarray(x)
  _check_numeric(x, "ARG_REDUCE")
  kind = kind.lower()
  direction = direction.lower()
  if kind not in ("min", "max"):
    raise ValueError(f"ARG_REDUCE: bad kind {kind!r}")
  if direction not in ("increasing", "decreasing"):
    raise ValueError(f"ARG_REDUCE: bad direction {direction!r}")
  axes = _normalize_axes(axes, x.ndim, "ARG_REDUCE")

  key = _order_key(x)  # NaN has the largest key
  if kind == "min":
    key = np.where(_nan_mask(x), np.int64(-1), key)  # NaN: smallest key
  flat = _to_last(key, axes)
  target = flat.min(axis=-1, keepdims=True) if kind == "min" else flat.max(axis=-1, keepdims=True)
  hits = flat == target
  n = flat.shape[-1]
  if direction == "increasing":
    idx = np.argmax(hits, axis=-1)  # first True
  else:
    idx = (n - 1) - np.argmax(hits[..., ::-1], axis=-1)  # last True
  return idx.astype(np.int64).reshape(_keepdims_shape(x.shape, axes))


# --------------------------------------------------------------------------- #
# SPEC section 4: GATHER_ND1
# --------------------------------------------------------------------------- #
def ref_gather_nd(x, indices, batch_dims: int) -> np.ndarray:
  """TF/ONNX-style gather_nd with the SPEC's out-of-range policy.

  Output shape = indices.shape[:-1] + x.shape[batch_dims + q:], where
  q = indices.shape[-1].  The first ``batch_dims`` dims of x and indices are
  batch dims.  A negative signed coordinate has the dim size added once; then
  every coordinate is clamped to [0, size - 1] (huge unsigned values, uint64
  above 2**63 included, clamp to size - 1).
  """
  x = np.asarray(x)
  indices = np.asarray(indices)
  b = int(batch_dims)
  if indices.ndim < 1:
    raise ValueError("GATHER_ND: indices must have rank >= 1")
  q = indices.shape[-1]
  if b < 0 or b >= indices.ndim or b > x.ndim:
    raise ValueError(f"GATHER_ND: bad batch_dims {b}")
  if x.shape[:b] != indices.shape[:b]:
    raise ValueError(f"GATHER_ND: batch sizes differ: {x.shape[:b]} vs {indices.shape[:b]}")
  if not 1 <= q <= x.ndim - b:
    raise ValueError(f"GATHER_ND: tuple length q={q} must be in [1, {x.ndim - b}]")
  if not (_is_signed_int(indices.dtype) or _is_unsigned_int(indices.dtype)):
    raise TypeError(f"GATHER_ND: indices must be integers, got {indices.dtype}")

  lead_shape = indices.shape[:-1]
  index_arrays = []
  # Batch coordinates: the position of each index tuple in the batch dims.
  for d in range(b):
    shape = [1] * len(lead_shape)
    shape[d] = lead_shape[d]
    index_arrays.append(np.broadcast_to(np.arange(lead_shape[d], dtype=np.int64).reshape(shape), lead_shape))
  # Indexed coordinates, made safe without ever overflowing.
  for j in range(q):
    size = x.shape[b + j]
    c = indices[..., j]
    if _is_unsigned_int(c.dtype):
      # Compare in the index's own unsigned type: exact even above 2**63.
      c = np.minimum(c, np.array(size - 1, dtype=c.dtype)).astype(np.int64)
    else:
      c = c.astype(np.int64)
      c = np.where(c < 0, c + size, c)  # wrap once (c + size cannot overflow)
      c = np.clip(c, 0, size - 1)
    index_arrays.append(c)
  out = x[tuple(index_arrays)]
  expected = lead_shape + x.shape[b + q :]
  assert out.shape == expected, (out.shape, expected)
  return out


# --------------------------------------------------------------------------- #
# SPEC section 5: REDUCE
# --------------------------------------------------------------------------- #
_REDUCE_FUNCTIONS = (
  "argmax",
  "argmin",
  "average",
  "l1",
  "l2",
  "log_sum",
  "log_sum_exp",
  "max",
  "min",
  "multiply",
  "sum",
  "sum_square",
)
_FLOAT_ONLY = ("average", "l2", "log_sum", "log_sum_exp")


def _float_compute_dtype(dtype):
  dtype = np.dtype(dtype)
  if dtype.itemsize <= 2:  # float16, bfloat16, float8...: accumulate in float32
    return np.float32
  if dtype.itemsize == 4:  # float32: float64 is at least as accurate
    return np.float64
  return dtype  # float64 (and wider): itself


def _reduce_float(v: np.ndarray, function: str) -> np.ndarray:
  """Reduce the last axis of ``v`` (already in its compute dtype)."""
  n = v.shape[-1]
  if function == "sum":
    return np.sum(v, axis=-1)
  if function == "average":
    return np.sum(v, axis=-1) / v.dtype.type(n)
  if function == "l1":
    return np.sum(np.abs(v), axis=-1)
  if function == "sum_square":
    return np.sum(v * v, axis=-1)
  if function == "l2":
    return np.sqrt(np.sum(v * v, axis=-1))
  if function == "log_sum":
    return np.log(np.sum(v, axis=-1))  # sum < 0 -> NaN, sum == 0 -> -inf
  if function == "log_sum_exp":
    m = np.max(v, axis=-1, keepdims=True)  # NaN if any NaN
    # Shift by the maximum when it is finite; an all -inf sequence gives
    # log(0) = -inf, a +inf element gives log(inf) = +inf, NaN propagates.
    shift = np.where(np.isfinite(m), m, v.dtype.type(0))
    return (shift + np.log(np.sum(np.exp(v - shift), axis=-1, keepdims=True)))[..., 0]
  if function == "multiply":
    return np.prod(v, axis=-1)
  if function == "max":
    return np.max(v, axis=-1)  # np.max propagates NaN
  if function == "min":
    return np.min(v, axis=-1)
  raise AssertionError(function)


def _reduce_int(v: np.ndarray, function: str) -> np.ndarray:
  """Reduce the last axis of integer ``v`` in its own type, wrapping."""
  dt = v.dtype
  if function == "sum":
    return np.add.reduce(v, axis=-1, dtype=dt)
  if function == "l1":
    return np.add.reduce(np.abs(v), axis=-1, dtype=dt)  # abs(INT_MIN) wraps to INT_MIN
  if function == "sum_square":
    return np.add.reduce(np.multiply(v, v, dtype=dt), axis=-1, dtype=dt)
  if function == "multiply":
    return np.multiply.reduce(v, axis=-1, dtype=dt)
  if function == "max":
    return np.max(v, axis=-1)
  if function == "min":
    return np.min(v, axis=-1)
  raise AssertionError(function)


def ref_reduce(x, function: str, axes) -> np.ndarray:
  """DML_REDUCE with the given lower-case function name over ``axes``.

  Output keeps x's rank (reduced axes size 1).  Empty ``axes`` applies the
  function to every element alone (N = 1).  argmax/argmin return int64 flat
  indices (first on ties, NaN is the extreme).  float16/bfloat16 accumulate
  in float32 and round once to the input dtype; float32 is computed in
  float64 and rounded to float32; float64 in float64.  Integers accumulate
  in their own type and wrap (two's complement); result dtype = input dtype.
  """
  x = np.asarray(x)
  _check_numeric(x, "REDUCE")
  function = function.lower()
  if function not in _REDUCE_FUNCTIONS:
    raise ValueError(f"REDUCE: unknown function {function!r}")
  axes = _normalize_axes(axes, x.ndim, "REDUCE")
  out_shape = _keepdims_shape(x.shape, axes)

  if function in ("argmax", "argmin"):
    return ref_arg_reduce(x, axes, function[3:], "increasing")

  flat = _to_last(x, axes)
  if _is_float(x.dtype):
    v = flat.astype(_float_compute_dtype(x.dtype))
    with np.errstate(all="ignore"):
      r = _reduce_float(v, function)
    r = np.asarray(r)
    if x.dtype.kind == "f":
      r = r.astype(x.dtype)
    else:  # ml_dtypes types: computed in float32, rounded once to the type
      r = r.astype(np.float32).astype(x.dtype)
  else:
    if function in _FLOAT_ONLY:
      raise TypeError(f"REDUCE: {function} is not defined for integer dtype {x.dtype}")
    with np.errstate(all="ignore"):
      r = np.asarray(_reduce_int(flat, function)).astype(x.dtype)
  return r.reshape(out_shape)


def ref_extreme(x, function: str, axes) -> np.ndarray:
  """REDUCE's MAX or MIN (``function`` "max"/"min") over ``axes``, bit for bit, keeping dims.

  The result is one of the block's elements: where the block holds a NaN, the NaN whose bits read as an
  unsigned integer are the largest; else the largest (MAX) or smallest (MIN) value, and where that value is
  zero, +0.0 for MAX if the block holds one and -0.0 for MIN if it holds one (IEEE 754-2019
  maximum/minimum). Subnormals are the numbers they are.  Integers: the plain extreme.
  """
  x = np.asarray(x)
  axes = _normalize_axes(axes, x.ndim, "REDUCE")
  flat = _to_last(x, axes)
  out_shape = _keepdims_shape(x.shape, axes)
  find_max = function.lower() == "max"
  if not _is_float(x.dtype):
    return (flat.max(axis=-1) if find_max else flat.min(axis=-1)).astype(x.dtype).reshape(out_shape)
  rows = flat.reshape(-1, flat.shape[-1])
  bits = rows.view(f"u{x.dtype.itemsize}")
  with np.errstate(invalid="ignore"):
    values = rows.astype(np.float64)
  chosen = np.empty(rows.shape[0], np.int64)
  for r in range(rows.shape[0]):
    nan = np.isnan(values[r])
    if nan.any():
      candidates = np.flatnonzero(nan)
      chosen[r] = candidates[np.argmax(bits[r, candidates])]
      continue
    extreme = values[r].max() if find_max else values[r].min()
    candidates = np.flatnonzero(values[r] == extreme)
    if extreme == 0:
      wanted = ~np.signbit(values[r, candidates]) if find_max else np.signbit(values[r, candidates])
      if wanted.any():
        candidates = candidates[wanted]
    chosen[r] = candidates[0]
  return rows[np.arange(rows.shape[0]), chosen].reshape(out_shape)


def ref_complex_extreme(x, function: str, axes) -> np.ndarray:
  """MAX or MIN of complex numbers over ``axes`` in the lexicographic order (real part, then imaginary part).

  The real part is :func:`ref_extreme` of the real parts (NaN propagating, +0.0 above -0.0); the imaginary
  part is :func:`ref_extreme` of the imaginary parts of the elements whose real part equals it (for a NaN
  real part: the elements whose real part is NaN). Keeps dims.
  """
  x = np.asarray(x)
  if x.dtype.kind != "c":
    raise TypeError(f"ref_complex_extreme: complex input expected, got {x.dtype}")
  real, imag = x.real, x.imag
  peak = ref_extreme(real, function, axes)
  tie = (real == peak) | (np.isnan(real) & np.isnan(peak))
  fill = -np.inf if function.lower() == "max" else np.inf
  out = np.empty(peak.shape, x.dtype)
  out.real = peak
  out.imag = ref_extreme(np.where(tie, imag, imag.dtype.type(fill)), function, axes)
  return out


# --------------------------------------------------------------------------- #
# SPEC section 6: ONE_HOT
# --------------------------------------------------------------------------- #
def ref_one_hot(indices, values, depth: int, axis: int) -> np.ndarray:
  """DML-layout one-hot.

  ``indices`` has size 1 on ``axis``; the output has ``indices.shape`` with
  ``depth`` on ``axis`` and dtype ``values.dtype``.  values.flat[0] is the off
  value and values.flat[1] the on value.  An index in [0, depth) sets that
  position, a signed index in [-depth, -1] counts from the end, anything else
  (>= depth, < -depth, huge unsigned values) leaves the sequence off.
  """
  indices = np.asarray(indices)
  values = np.asarray(values)
  depth = int(depth)
  axis = int(axis)
  if not 0 <= axis < indices.ndim:
    raise ValueError(f"ONE_HOT: axis {axis} out of range for rank {indices.ndim}")
  if indices.shape[axis] != 1:
    raise ValueError(f"ONE_HOT: indices must have size 1 on axis {axis}, got {indices.shape}")
  if values.size < 2:
    raise ValueError("ONE_HOT: values needs at least two elements")
  if depth < 1:
    raise ValueError(f"ONE_HOT: depth must be >= 1, got {depth}")

  if _is_unsigned_int(indices.dtype):
    # Compare in the index's own unsigned type: exact even above 2**63.
    limit = np.array(depth - 1, dtype=indices.dtype) if depth - 1 <= np.iinfo(indices.dtype).max else None
    valid = np.ones(indices.shape, bool) if limit is None else indices <= limit
    pos = np.where(valid, indices, np.zeros((), indices.dtype)).astype(np.int64)
  elif _is_signed_int(indices.dtype):
    i = indices.astype(np.int64)
    valid = (i >= -depth) & (i < depth)
    pos = np.where(i < 0, i + depth, i)  # i + depth cannot overflow for i < 0
  else:
    raise TypeError(f"ONE_HOT: indices must be integers, got {indices.dtype}")

  out_shape = (*indices.shape[:axis], depth, *indices.shape[axis + 1 :])
  iota_shape = [1] * indices.ndim
  iota_shape[axis] = depth
  iota = np.arange(depth, dtype=np.int64).reshape(iota_shape)
  on_mask = np.broadcast_to((iota == pos) & valid, out_shape)

  flat_values = values.reshape(-1)
  out = np.empty(out_shape, dtype=values.dtype)
  out[...] = flat_values[0]  # off value (bit-exact copy)
  out[on_mask] = flat_values[1]  # on value (bit-exact copy)
  return out
