"""Axis, axes, direction and rank rules shared by every operator and both paths."""

from __future__ import annotations

import enum
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dmljax._src import enums, symbolic
from dmljax._src.errors import Problems
from dmljax._src.fields import Fields

MAX_RANK = 8


class AxisDirection(enum.IntEnum):
  """``DML_AXIS_DIRECTION``, with the numeric values of ``directml.h``.

  For TOP_K1, INCREASING selects the smallest elements and DECREASING the
  largest; for ARGMIN/ARGMAX, INCREASING returns the first extreme element and
  DECREASING the last. The functional ``top_k`` also takes ``"increasing"`` and
  ``"decreasing"``; the functional ``argmin``/``argmax`` name the tie rule
  ``ties="first"`` (INCREASING) or ``ties="last"`` (DECREASING).

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> x = jnp.array([3., 1., 2., 1.])
    >>> dml.top_k(x, 2, direction=dml.AxisDirection.INCREASING)[1].tolist()
    [1, 3]
    >>> dml.argmin(x, ties="last").tolist()
    3
  """

  INCREASING = 0
  DECREASING = 1


def canonical_direction(p: Problems, field: str, direction: Any) -> AxisDirection | None:
  """An :class:`AxisDirection`, its value, or its name (``"increasing"``)."""
  return enums.parse_enum(p, field, direction, AxisDirection)


def rank_in_range(p: Problems, f: Fields, role: str, shape: tuple[int, ...]) -> bool:
  """Rank 1 to 8 and no size-0 dimension, as DirectML tensors."""
  field = f.shape(role)
  ok = p.require(
    1 <= len(shape) <= MAX_RANK, f"{f[role]} must have rank 1 to {MAX_RANK}", f"{field}={shape} (rank {len(shape)})"
  )
  ok &= p.require(
    all(s >= 1 for s in shape), f"{f[role]} must have no size-0 dimension (DirectML has none)", f"{field}={shape}"
  )
  return ok


def functional_rank(p: Problems, field: str, shape: tuple[int, ...], *, least: int = 0) -> bool:
  """The functional path takes any rank JAX does (``least`` or more), size-0 dimensions included."""
  return p.require(
    len(shape) >= least,
    f"{field} must have rank {least} or more",
    f"{field}.shape={shape} (rank {len(shape)})",
  )


def nonempty_blocks(p: Problems, field: str, shape: tuple[int, ...], axes: tuple[int, ...], statement: str) -> bool:
  """Every reduced axis of size 1 or more, for an extreme or its index (of no elements, undefined, as in ``jnp``)."""
  empty = tuple(a for a in axes if shape[a] == 0)
  return p.require(not empty, statement, f"{field}.shape={shape} with axis {tuple(axes)} (size 0 on axis {empty})")


def output_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
  """A reduction's output shape: reduced axes kept with size 1, or removed."""
  return reduced_shape(shape, axes) if keepdims else tuple(s for d, s in enumerate(shape) if d not in axes)


def reduce_folded(
  x: jax.Array,
  axes: tuple[int, ...],
  out_shape: tuple[int, ...],
  reduction: Callable[[jax.Array, tuple[int, ...]], jax.Array],
) -> jax.Array:
  """``reduction(x, axes)`` for ``x`` of any rank, through an operator of rank 1 to 8, reshaped to ``out_shape``."""
  folded, folded_axes = _fold_reduction(x, axes)
  out = reduction(folded, folded_axes)
  return out if out.shape == out_shape else out.reshape(out_shape)


def _fold_reduction(x: jax.Array, axes: tuple[int, ...]) -> tuple[jax.Array, tuple[int, ...]]:
  """``x`` and ``axes`` as an operator of rank 1 to 8 takes them, for a reduction of any rank (reshape the result).

  Rank 0 becomes one element reduced over its axis; above rank 8, the kept axes are moved before the reduced
  ones (in ascending order, so a flat index over the reduced axes is unchanged) and each group flattened.
  """
  if x.ndim == 0:
    return x.reshape(1), (0,)
  if x.ndim <= MAX_RANK:
    return x, axes
  if not axes:
    return x.reshape(-1), ()
  kept = tuple(d for d in range(x.ndim) if d not in axes)
  moved = jnp.transpose(x, (*kept, *axes))
  count = math.prod(x.shape[a] for a in axes)
  if not kept:
    return moved.reshape(count), (0,)
  return moved.reshape(-1, count), (1,)


def is_int(value: Any) -> bool:
  """A Python or NumPy integer, not a bool: what counts, sizes and ``k`` must be."""
  return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _as_int(value: Any) -> int | None:
  if isinstance(value, (bool, jax.core.Tracer)):
    return None
  try:
    return operator.index(value)
  except TypeError:
    return None


def _traced(value: Any) -> bool:
  if isinstance(value, (tuple, list)):
    return any(_traced(v) for v in value)
  return isinstance(value, jax.core.Tracer)


def _traced_type(value: jax.core.Tracer) -> str:
  aval = jax.typeof(value)
  return f"{np.dtype(aval.dtype).name}{list(aval.shape)}"


def _static_hint(p: Problems, field: str, value: Any, traced_advice: str = "") -> bool:
  """Records why a traced or non-integer ``field`` cannot be used; returns whether it did."""
  if _traced(value):
    p.add(
      f"{field} must be a static Python int, because it sets the output's shape; under jax.jit, pass it as a "
      f"static argument (jax.jit(f, static_argnames='{field}') or static_argnums){traced_advice}",
      f"{field}=traced {_traced_type(value)}" if isinstance(value, jax.core.Tracer) else f"{field}={value!r}",
      traced=True,
    )
    return True
  values = value if isinstance(value, (tuple, list)) else (value,)
  if any(symbolic.is_symbolic(v) for v in values):
    p.add(
      symbolic.static_message(field, "it sets the output's shape, which a program has once for all sizes"),
      f"{field}={value!r}",
    )
    return True
  if any(isinstance(v, (float, np.floating)) for v in values):
    p.add(f"{field} must be a Python int (not a float), because it sets the output's shape", f"{field}={value!r}")
    return True
  return False


def static_int(
  p: Problems,
  field: str,
  value: Any,
  statement: str,
  in_range: Callable[[int], bool],
  *,
  traced_advice: str = "",
) -> int | None:
  """``value`` as an int satisfying ``in_range``; else the problem (``statement`` or a static-int hint).

  ``traced_advice`` follows the static-argument hint when ``value`` is traced (what else to do).
  """
  if _static_hint(p, field, value, traced_advice):
    return None
  number = _as_int(value)
  if not p.require(number is not None and in_range(number), statement, f"{field}={value!r}"):
    return None
  return number


def from_tensor(p: Problems, field: str, value: Any, *, scalar: bool) -> Any:
  """A static parameter given as a concrete array (ONNX's ``K``, ``axes`` and ``depth`` inputs) in the form
  :func:`static_int` and :func:`canonical_axes` judge.

  A one-element array gives its element (``scalar``), a 1-D array the tuple of its elements, each as the Python
  number of its type, so a float or a bool is refused there as it would be given directly. Anything else is
  returned unchanged for those parsers (a tracer gets their ``jax.jit`` hint); a wrong-shaped array is recorded
  in ``p`` and gives ``None``.
  """
  if isinstance(value, jax.core.Tracer) or not isinstance(value, (np.ndarray, np.generic, jax.Array)):
    return value
  array = np.asarray(value)
  if scalar:
    if not p.require(array.size == 1, f"{field} must hold exactly one value", f"{field}.shape={array.shape}"):
      return None
    return array.reshape(-1)[0].item()
  if not p.require(array.ndim <= 1, f"{field} must be a 1-D tensor of axes", f"{field}.shape={array.shape}"):
    return None
  return tuple(array.reshape(-1).tolist())


def canonical_axis(p: Problems, field: str, axis: Any, rank: int, *, allow_negative: bool, of: str = "") -> int | None:
  """A single axis in ``[0, rank)``, or ``[-rank, rank)`` where negative axes are allowed.

  ``of`` names what the rank belongs to where it is not the input's (``"the output's "``).
  """
  lo = -rank if allow_negative else 0
  statement = f"{field} must be an integer in [{lo}, {rank - 1}] for {of}rank {rank}"
  value = static_int(p, field, axis, statement, lambda v: lo <= v < rank)
  return None if value is None else value % rank


def canonical_axes(
  p: Problems, field: str, axes: Any, rank: int, *, allow_negative: bool, allow_empty: bool
) -> tuple[int, ...] | None:
  """Distinct axes in range, returned ascending. ``None`` means every axis."""
  if axes is None:
    return tuple(range(rank))
  if _static_hint(p, field, axes):
    return None
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
    f"{field} must hold integers in [{lo}, {rank - 1}] for rank {rank}"
    if rank
    else f"{field} must name no axis for rank 0 (pass None)",
    f"{field}={tuple(axes)}",
  )
  if not ok:
    return None
  normalized = [v % rank for v in values if v is not None]
  ok = p.require(len(set(normalized)) == len(normalized), f"{field} must hold distinct axes", f"{field}={tuple(axes)}")
  ok &= p.require(allow_empty or len(normalized) > 0, f"{field} must name at least one axis", f"{field}={tuple(axes)}")
  return tuple(sorted(normalized)) if ok else None


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
  """``shape`` with size 1 on every axis in ``axes`` (a reduction's output, keeping dims)."""
  return tuple(1 if d in axes else s for d, s in enumerate(shape))
