"""Sampling's inputs: validated at trace time, then mapped once to the values the filters compute with.

Validation (every failing input named in one :class:`~dmljax.DescriptorError`) and the mapping of each
parameter's out-of-range values to rules live here and nowhere else:

* ``k``: any integer type and width; clipped to ``[0, V]`` in its own type *before* it is narrowed to int32
  (so ``2**40`` or ``np.int64(2**32 + 1)`` keeps every entry rather than wrapping), and ``0`` (from ``k <= 0``)
  means every entry, like ``k >= V``;
* ``p``: float32; NaN and ``p >= 1`` keep every entry, ``p <= 0`` the first;
* ``min_p``: float32; NaN or ``<= 0`` keeps every entry, above 1 counts as 1;
* ``temperature``: float32; ``> 0`` samples, anything else (0, a traced negative value, NaN) is greedy;
* ``row_offset``: one integer, uint32 (a concrete value in ``[0, 2**32)``, a traced one taken modulo 2**32).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dmljax._src import dtypes, shardings, symbolic
from dmljax._src.errors import Problems

_BATCH = "logits.shape[:-1]"


def logits_array(p: Problems, logits: Any) -> jax.Array | None:
  """``logits`` as a float array of rank >= 1 with a non-empty last axis, or ``None`` after recording why not."""
  array = dtypes.as_array(p, "logits", logits)
  if array is None:
    return None
  ok = p.require(
    dtypes.is_float(array.dtype),
    "logits must be a floating-point array (float16, bfloat16, float32 or float64)",
    f"logits.dtype={dtypes.dtype_name(array.dtype)}",
  )
  ok &= p.require(
    array.ndim >= 1, "logits must have rank >= 1 (the last axis is the vocabulary)", f"logits.shape={array.shape}"
  )
  if array.ndim >= 1 and symbolic.is_symbolic(array.shape[-1]):
    why = "the candidates and the exact top-p sums are sized by it (a symbolic batch exports)"
    p.add(
      symbolic.static_message("logits' last axis (the vocabulary)", why),
      f"logits.shape={symbolic.describe(array.shape)}",
    )
    return None
  ok &= p.require(
    array.ndim == 0 or array.shape[-1] >= 1, "logits' last axis must not be empty", f"logits.shape={array.shape}"
  )
  ok &= p.require(
    array.ndim == 0 or not shardings.splits_explicitly(array, tuple(range(array.ndim - 1))),
    "logits split along a batch axis over explicit mesh axes are not supported yet: split only the vocabulary "
    "(the last axis) there, or split the batch over automatic axes or inside jax.shard_map",
    f"logits sharded as {jax.typeof(array).sharding.spec}" if ok else "",
  )
  return array if ok else None


MASS_ENTRIES = 2**29  # the longest row whose exact probability sums fit int32 limbs (top-p: .mass)


def require_mass_length(p: Problems, array: jax.Array | None, field: str) -> None:
  """Top-p sums a row's probability exactly in int32 limbs: rows of at most :data:`MASS_ENTRIES` entries."""
  if array is not None:
    p.require(
      array.shape[-1] <= MASS_ENTRIES,
      f"{field} needs rows of at most 2**29 = {MASS_ENTRIES} entries (its exact probability sums); split the "
      "vocabulary over devices or apply top_k_mask first and pass the kept candidates",
      f"logits.shape={array.shape}",
    )


def batch_of(array: jax.Array | None) -> tuple[int, ...] | None:
  return None if array is None else tuple(array.shape[:-1])


def _per_row_shape(shape: tuple[int, ...], batch: tuple[int, ...]) -> tuple[int, ...] | None:
  """The shape a parameter is read as: itself if it broadcasts to the rows, the rows' shape for one value per row
  with a trailing axis of 1 (``(B, 1)`` for ``(B,)`` rows, as ``keepdims`` leaves it), else ``None``."""
  if shape == (*batch, 1):
    return batch
  try:
    return shape if jnp.broadcast_shapes(shape, batch) == batch else None
  except ValueError:
    return None


def _shape_fits(p: Problems, field: str, shape: tuple[int, ...], batch: tuple[int, ...]) -> bool:
  return p.require(
    _per_row_shape(shape, batch) is not None,
    f"{field} must be a scalar, an array that broadcasts to the batch shape {_BATCH} (= {batch}), or one value "
    f"per row with a trailing axis of 1 (shape {(*batch, 1)}); reshape it, e.g. {field}.reshape({batch})",
    f"{field}.shape={shape}",
  )


def _as_rows(value: Any, dtype: Any, batch: tuple[int, ...]) -> jax.Array:
  array = jnp.asarray(value, dtype)
  return jnp.broadcast_to(array.reshape(_per_row_shape(tuple(array.shape), batch)), batch)


def _kind_error(p: Problems, field: str, value: Any, integer: bool) -> bool:
  """Records a parameter of the wrong kind (``True`` when one was recorded)."""
  kind = (
    "an integer (a Python int or an integer array)" if integer else "a real number (a Python float or a float array)"
  )
  if isinstance(value, (bool, np.bool_)):
    p.add(f"{field} must be {kind}", f"{field}={value!r}")
    return True
  dtype = getattr(value, "dtype", None)
  if dtype is None:
    if integer and not isinstance(value, (int, np.integer)):
      floating = isinstance(value, (float, np.floating))
      p.add(f"{field} must be {kind}{', not a float' if floating else ''}", f"{field}={value!r}")
      return True
    if not integer and not isinstance(value, (int, float, np.integer, np.floating)):
      p.add(f"{field} must be {kind}", f"{field} of type {type(value).__name__}")
      return True
    return False
  # A real parameter may be given as an integer array, as it may be given as a Python int.
  good = dtypes.is_integer(dtype) if integer else dtypes.is_float(dtype) or dtypes.is_integer(dtype)
  return not p.require(good, f"{field} must be {kind}", f"{field}.dtype={dtypes.dtype_name(dtype)}")


def real_parameter(p: Problems, field: str, value: Any, batch: tuple[int, ...] | None) -> jax.Array | None:
  """A float parameter (``p``, ``min_p``, ``temperature``) as float32 of the batch shape, or ``None``."""
  if _kind_error(p, field, value, integer=False):
    return None
  shape = tuple(np.shape(value))
  if batch is None or not _shape_fits(p, field, shape, batch):
    return None
  return _as_rows(value, jnp.float32, batch)


def k_parameter(p: Problems, field: str, value: Any, batch: tuple[int, ...] | None, length: int) -> jax.Array | None:
  """``k`` as int32 of the batch shape with every value in ``[1, V]`` (``V``: every entry), or ``None``.

  The clipping happens in ``k``'s own type (Python ints exactly, NumPy arrays in NumPy, JAX arrays in their
  dtype), so no width of integer wraps on the way to int32.
  """
  if _kind_error(p, field, value, integer=True):
    return None
  shape = tuple(np.shape(value))
  if batch is None or not _shape_fits(p, field, shape, batch):
    return None
  if isinstance(value, (int, np.integer)):
    clipped: Any = np.int32(min(max(int(value), 0), length))
  elif isinstance(value, np.ndarray):
    clipped = np.where(value <= 0, 0, np.where(value >= length, length, value)).astype(np.int32)
  else:
    array = jnp.asarray(value)
    top = np.array(length, np.int64).astype(array.dtype) if length <= np.iinfo(array.dtype).max else None
    clipped = jnp.where(array <= 0, 0, array if top is None else jnp.minimum(array, top)).astype(jnp.int32)
  k = _as_rows(clipped, jnp.int32, batch)
  return jnp.where(k == 0, np.int32(length), k)


def prng_key(p: Problems, key: Any) -> jax.Array | None:
  """One PRNG key (a new-style key, or a raw ``jax.random.PRNGKey``), or ``None`` after recording why not."""
  dtype = getattr(key, "dtype", None)
  if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
    if p.require(
      np.shape(key) == (),
      "key must be one PRNG key (for a batch of keys, jax.vmap over sample)",
      f"key.shape={np.shape(key)}",
    ):
      return jnp.asarray(key)
    return None
  if dtype is not None and np.dtype(dtype) == np.uint32 and np.shape(key) == (2,):
    return jax.random.wrap_key_data(jnp.asarray(key))  # a raw key of jax.random.PRNGKey
  if dtype is None:
    p.add("key must be a PRNG key, as jax.random.key(seed) makes", f"key={type(key).__name__}")
  else:
    p.add(
      "key must be a PRNG key, as jax.random.key(seed) makes",
      f"key.dtype={dtypes.dtype_name(dtype)} (shape {np.shape(key)})",
    )
  return None


def require_non_negative(p: Problems, field: str, value: Any) -> None:
  """A concrete negative temperature is an error (a traced one is greedy: it cannot be checked at trace time)."""
  if isinstance(value, jax.core.Tracer):
    return
  try:
    concrete = np.asarray(value, np.float64)
  except (TypeError, ValueError):
    return
  if concrete.size:
    p.require(
      bool(np.all(~(concrete < 0))),
      f"{field} must be >= 0 (0 is greedy)",
      f"{field}={value!r}" if concrete.ndim == 0 else f"{field} with minimum {np.nanmin(concrete)!r}",
    )


ROW_NUMBERS = 2**32  # rows are numbered modulo this (the noise counter's first word)


def row_offset(p: Problems, value: Any) -> Any:
  """``row_offset`` as one uint32 (NumPy when concrete, else a uint32 array), or ``None`` after recording why not."""
  if _kind_error(p, "row_offset", value, integer=True):
    return None
  if not p.require(
    np.shape(value) == (),
    "row_offset must be one integer (the global row number of the first row of logits), not one per row",
    f"row_offset.shape={np.shape(value)}",
  ):
    return None
  if isinstance(value, jax.core.Tracer):
    return jnp.asarray(value).astype(jnp.uint32)
  number = int(np.asarray(value))
  if not p.require(
    0 <= number < ROW_NUMBERS,
    "row_offset must be in [0, 2**32) (rows are numbered modulo 2**32)",
    f"row_offset={number}",
  ):
    return None
  return np.uint32(number)


def candidate_count(p: Problems, max_k: Any) -> int | None:
  """The static ``max_k`` (candidates looked at first), or ``None`` for the default."""
  if max_k is None:
    return None
  ok = isinstance(max_k, (int, np.integer)) and not isinstance(max_k, (bool, np.bool_)) and max_k >= 1
  p.require(ok, "max_k must be None or a static Python int >= 1 (the candidates looked at first)", f"max_k={max_k!r}")
  return int(max_k) if ok else None


def probability(p: jax.Array) -> jax.Array:
  """Top-p's ``p`` with NaN as 1 (keep every entry)."""
  return jnp.where(jnp.isnan(p), np.float32(1), p)


def ratio(min_p: jax.Array) -> jax.Array:
  """Min-p's bound: NaN and values <= 0 as 0 (keep every entry), values above 1 as 1."""
  return jnp.clip(jnp.where(jnp.isnan(min_p), np.float32(0), min_p), np.float32(0), np.float32(1))
