"""Shapes whose dimensions may be symbolic: ``jax.export``'s shape polymorphism.

A program exported for ``jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 64"), ...)`` is traced once with
``b`` a symbolic dimension, and serves every batch size. dmljax's code reads shapes to choose how to compute
(a strategy, a block size, an index type) and to validate; with a symbolic dimension:

* a choice about speed that a symbolic dimension leaves open is made without it (:func:`decide`'s
  ``otherwise``), and a strategy runs on a symbolic shape only where it declares that it can;
* an index along a symbolic axis is an int32, as ``jax.lax`` indexes such an axis (its length is assumed to be
  at most 2**31 - 1);
* a size that must be concrete (``k``, ``depth``, a DirectML descriptor's sizes, the reduced axes of a
  strategy that blocks them) is an error that names the dimension and says why (:func:`require_static`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import export
from jax._src import core as _core  # InconclusiveDimensionOperation: no public name in any supported jax

Inconclusive = _core.InconclusiveDimensionOperation


def is_symbolic(d: Any) -> bool:
  """Whether ``d`` is a symbolic dimension (not a Python or NumPy integer)."""
  return bool(export.is_symbolic_dim(d))


def is_static(shape: Sequence[Any]) -> bool:
  """Whether every dimension of ``shape`` is an integer."""
  return not any(is_symbolic(d) for d in shape)


def decide(condition: Callable[[], bool], *, otherwise: bool) -> bool:
  """``condition()``, or ``otherwise`` where a symbolic dimension makes it inconclusive.

  ``condition`` compares dimensions (``n >= 1024``); JAX decides such a comparison where it holds for every value
  of the symbolic dimensions (``b >= 1`` always does) and raises otherwise.
  """
  try:
    return bool(condition())
  except Inconclusive:
    return otherwise


def known(d: Any, otherwise: int) -> int:
  """``d`` as an int, or ``otherwise`` where it is symbolic: a stand-in for a choice about speed only."""
  return otherwise if is_symbolic(d) else int(d)


def size(shape: Sequence[Any]) -> Any:
  """The number of elements of ``shape`` (symbolic where a dimension is)."""
  return math.prod(shape)


def constant(d: Any, dtype: Any) -> Any:
  """The dimension ``d`` as a scalar of ``dtype``: a NumPy constant, or a value the program computes where ``d`` is
  symbolic."""
  return jnp.asarray(d, dtype) if is_symbolic(d) else np.array(d, dtype)


def describe(shape: Sequence[Any]) -> str:
  """``shape`` as text, symbolic dimensions by name: ``(b, 64)``."""
  return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def static_message(what: str, why: str) -> str:
  """The message for a size that must be concrete, given one of jax.export's symbolic dimensions: what, why, and
  how to export instead."""
  return (
    f"{what} must be a concrete number, because {why}; export with that dimension concrete (as in "
    "jax.export.symbolic_shape('b, 64'), where only b is symbolic), or pass a number"
  )
