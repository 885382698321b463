"""The static facts of one top-k selection, from which a strategy is chosen."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from dmljax._src import dtypes, value_bits


@dataclasses.dataclass(frozen=True)
class Case:
  """Top-``k`` along the last axis of an array of ``shape`` and ``dtype``; the largest first or the smallest."""

  dtype: np.dtype
  shape: tuple[int, ...]
  k: int
  largest_first: bool

  @classmethod
  def of(cls, x: jax.Array, k: int, largest_first: bool) -> Case:
    return cls(np.dtype(x.dtype), tuple(x.shape), k, largest_first)

  @property
  def n(self) -> int:
    """The row length."""
    return self.shape[-1]

  @property
  def size(self) -> int:
    return math.prod(self.shape)

  @property
  def is_float(self) -> bool:
    return dtypes.is_float(self.dtype)

  @property
  def bits(self) -> int:
    return self.dtype.itemsize * 8


Selected = tuple[jax.Array, jax.Array]
Select = Callable[[jax.Array, Case], Selected]


def gathered(select_indices: Callable[[jax.Array, Case], jax.Array]) -> Select:
  """A strategy from one that finds the indices: the values' bits are gathered at them (bit-exact)."""

  def select(x: jax.Array, case: Case) -> Selected:
    indices = select_indices(x, case)
    # The gather moves bits: XLA may carry a float gather through float arithmetic (a partitioned one is masked
    # gathers and an all-reduce SUM; narrow floats are converted), which changes NaN payloads and -0.0.
    bits = jnp.take_along_axis(value_bits.to_bits(x), indices, axis=-1, mode="promise_in_bounds")
    return value_bits.from_bits(bits, np.dtype(x.dtype)), indices

  select.__name__ = select_indices.__name__
  select.__doc__ = select_indices.__doc__
  return select


@dataclasses.dataclass(frozen=True)
class Strategy:
  """One row of a dispatch table: ``select`` (values and int32 indices in dmljax's order).

  ``handles`` is what the strategy declares: the cases (types, shapes, ``k``) where ``select`` is exact and
  runs. ``pays`` is the table's condition on top of it, about speed only: the row runs where both hold. A
  strategy forced by name must handle the case.
  """

  name: str
  select: Select
  handles: Callable[[Case], bool]
  pays: Callable[[Case], bool] = dataclasses.field(default=lambda case: True)

  def applies(self, case: Case) -> bool:
    return self.handles(case) and self.pays(case)
