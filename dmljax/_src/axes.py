"""Axis, axes, direction and rank rules shared by every operator and both paths."""

from __future__ import annotations

import enum
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from dmljax._src.errors import Problems

MAX_RANK = 8


class AxisDirection(enum.IntEnum):
  """``DML_AXIS_DIRECTION``, with the numeric values of ``directml.h``.

  For TOP_K1, INCREASING selects the smallest elements and DECREASING the
  largest; for ARGMIN/ARGMAX, INCREASING returns the first extreme element and
  DECREASING the last. The functional path also takes ``"increasing"`` and
  ``"decreasing"``.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> x = jnp.array([3., 1., 2., 1.])
    >>> dml.top_k(x, 2, direction=dml.AxisDirection.INCREASING)[1].tolist()
    [1, 3]
    >>> dml.argmin(x, direction="decreasing").tolist()
    [3]
  """

  INCREASING = 0
  DECREASING = 1


def canonical_direction(p: Problems, field: str, direction: Any) -> AxisDirection | None:
  """An :class:`AxisDirection`, its value, or its lower-case name (``"increasing"``)."""
  if isinstance(direction, str):
    member = AxisDirection.__members__.get(direction.upper())
    if member is not None:
      return member
  elif not isinstance(direction, bool):
    try:
      return AxisDirection(direction)
    except (ValueError, TypeError):
      pass
  p.add(
    f"{field} must be dml.AxisDirection.INCREASING/DECREASING or 'increasing'/'decreasing'", f"{field}={direction!r}"
  )
  return None


def rank_in_range(p: Problems, field: str, shape: tuple[int, ...]) -> bool:
  """Rank 1 to 8 and no size-0 dimension, as DirectML tensors."""
  ok = p.require(
    1 <= len(shape) <= MAX_RANK, f"{field} must have rank 1 to {MAX_RANK}", f"shape {shape} (rank {len(shape)})"
  )
  ok &= p.require(
    all(s >= 1 for s in shape), f"{field} must have no size-0 dimension (DirectML has none)", f"shape {shape}"
  )
  return ok


def is_int(value: Any) -> bool:
  """A Python or NumPy integer, not a bool: what counts, sizes and ``k`` must be."""
  return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _as_int(value: Any) -> int | None:
  if isinstance(value, bool):
    return None
  try:
    return operator.index(value)
  except TypeError:
    return None


def canonical_axis(p: Problems, field: str, axis: Any, rank: int, *, allow_negative: bool) -> int | None:
  """A single axis in ``[0, rank)``, or ``[-rank, rank)`` where negative axes are allowed."""
  value = _as_int(axis)
  lo = -rank if allow_negative else 0
  if not p.require(
    value is not None and lo <= value < rank,
    f"{field} must be an integer in [{lo}, {rank - 1}] for rank {rank}",
    f"{field}={axis!r}",
  ):
    return None
  assert value is not None
  return value % rank


def canonical_axes(
  p: Problems, field: str, axes: Any, rank: int, *, allow_negative: bool, allow_empty: bool
) -> tuple[int, ...] | None:
  """Distinct axes in range, returned ascending. ``None`` means every axis."""
  if axes is None:
    return tuple(range(rank))
  if _as_int(axes) is not None:
    axes = (axes,)
  if not p.require(
    isinstance(axes, Sequence) and not isinstance(axes, str),
    f"{field} must be an integer, a sequence of integers or None",
    f"{field}={axes!r}",
  ):
    return None
  values = [_as_int(a) for a in axes]
  lo = -rank if allow_negative else 0
  ok = p.require(
    all(v is not None and lo <= v < rank for v in values),
    f"{field} must all be integers in [{lo}, {rank - 1}] for rank {rank}",
    f"{field}={tuple(axes)}",
  )
  if not ok:
    return None
  normalized = [v % rank for v in values if v is not None]
  ok = p.require(len(set(normalized)) == len(normalized), f"{field} must be distinct", f"{field}={tuple(axes)}")
  ok &= p.require(allow_empty or len(normalized) > 0, f"{field} must name at least one axis", f"{field}={tuple(axes)}")
  return tuple(sorted(normalized)) if ok else None


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
  """``shape`` with size 1 on every axis in ``axes`` (a reduction's output, keeping dims)."""
  return tuple(1 if d in axes else s for d, s in enumerate(shape))
