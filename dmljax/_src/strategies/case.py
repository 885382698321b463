"""The static facts of one top-k selection, from which a strategy is chosen.

A shape may hold symbolic dimensions (``jax.export``'s shape polymorphism): a strategy declares which of them it
runs with (:attr:`Strategy.shapes`), and a condition a symbolic dimension leaves open is decided without it
(:func:`symbolic.decide`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal

import jax
import numpy as np

from dmljax._src import dtypes, index_math, symbolic, value_bits


@dataclasses.dataclass(frozen=True)
class Case:
  """Top-``k`` along the last axis of an array of ``shape`` and ``dtype``; the largest first or the smallest."""

  dtype: np.dtype
  shape: tuple[Any, ...]  # ints, or jax.export's symbolic dimensions
  k: int
  largest_first: bool

  @classmethod
  def of(cls, x: jax.Array, k: int, largest_first: bool) -> Case:
    return cls(np.dtype(x.dtype), tuple(x.shape), k, largest_first)

  @property
  def n(self) -> Any:
    """The row length (symbolic where the row's dimension is)."""
    return self.shape[-1]

  @property
  def size(self) -> Any:
    return math.prod(self.shape)

  @property
  def symbolic(self) -> Shapes:
    """The least a strategy must run with: ``"static"`` shapes, a symbolic ``"batch"`` (leading dimensions) or
    ``"any"`` (the row's length symbolic too)."""
    if symbolic.is_symbolic(self.n):
      return "any"
    return "static" if symbolic.is_static(self.shape) else "batch"

  @property
  def is_float(self) -> bool:
    return dtypes.is_float(self.dtype)

  @property
  def bits(self) -> int:
    return self.dtype.itemsize * 8


Selected = tuple[jax.Array, jax.Array]
# The shapes a strategy runs with: static only, symbolic leading (batch) dimensions, or any symbolic dimension.
Shapes = Literal["static", "batch", "any"]
_SHAPES_ORDER: tuple[Shapes, ...] = ("static", "batch", "any")
Select = Callable[[jax.Array, Case], Selected]


def gathered(select_indices: Callable[[jax.Array, Case], jax.Array]) -> Select:
  """A strategy from one that finds the indices: the values' bits are gathered at them (bit-exact)."""

  def select(x: jax.Array, case: Case) -> Selected:
    indices = select_indices(x, case)
    # The gather moves bits: XLA may carry a float gather through float arithmetic (a partitioned one is masked
    # gathers and an all-reduce SUM; narrow floats are converted), which changes NaN payloads and -0.0.
    bits = index_math.take_along_last_axis(value_bits.to_bits(x), indices)
    return value_bits.from_bits(bits, np.dtype(x.dtype)), indices

  select.__name__ = select_indices.__name__
  select.__doc__ = select_indices.__doc__
  return select


@dataclasses.dataclass(frozen=True)
class Strategy:
  """One row of a dispatch table: ``select`` (values and int32 indices in dmljax's order).

  ``handles`` is what the strategy declares: the cases (types, shapes, ``k``) where ``select`` is exact and
  runs. ``shapes`` declares the symbolic dimensions ``select`` runs with (``jax.export``'s shape polymorphism):
  none (``"static"``), the leading ones (``"batch"``) or any (``"any"``, the row's length too). ``pays`` is the
  table's condition on top of them, about speed only: the row runs where all hold. Where a symbolic dimension
  leaves ``handles`` open the strategy does not handle the case, and where it leaves ``pays`` open the row pays.
  A strategy forced by name must handle the case.
  """

  name: str
  select: Select
  handles: Callable[[Case], bool]
  pays: Callable[[Case], bool] = dataclasses.field(default=lambda case: True)
  shapes: Shapes = "static"

  def handles_case(self, case: Case) -> bool:
    """Whether the strategy runs ``case``: its shapes, then its own declaration."""
    if _SHAPES_ORDER.index(case.symbolic) > _SHAPES_ORDER.index(self.shapes):
      return False
    return symbolic.decide(lambda: self.handles(case), otherwise=False)

  def applies(self, case: Case) -> bool:
    return self.handles_case(case) and symbolic.decide(lambda: self.pays(case), otherwise=True)
