"""The programs the accelerator structure tests compile (issue 17's targets): dmljax's call and the native one.

top_k cases are the issue's table, the benchmark's shapes, and a fixed-seed sample of the product of types,
shapes, ``k`` and directions (:func:`sample`); the other operators are the benchmark's workloads.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

import dmljax as dml

WIDE = ("float64", "int64", "uint64")  # compiled with x64 on


@dataclasses.dataclass(frozen=True)
class TopK:
  """``dml.top_k(x, k)`` on ``dtype[shape]`` against ``jax.lax.top_k`` (INCREASING: on the negated or inverted x)."""

  dtype: str
  shape: tuple[int, int]
  k: int
  increasing: bool = False

  def __str__(self) -> str:
    direction = " INCREASING" if self.increasing else ""
    return f"top_k{direction} {self.dtype} {'x'.join(map(str, self.shape))} k={self.k}"

  @property
  def row(self) -> int:
    return self.shape[-1]

  @property
  def inputs(self) -> tuple[tuple[tuple[int, ...], str], ...]:
    return ((self.shape, self.dtype),)

  @property
  def x64(self) -> bool:
    return self.dtype in WIDE

  @property
  def floating(self) -> bool:
    return bool(jnp.issubdtype(jnp.dtype(self.dtype), jnp.floating))

  def dmljax(self) -> Callable[..., Any]:
    direction = "increasing" if self.increasing else "decreasing"
    return lambda x: dml.top_k(x, self.k, direction=direction, index_dtype=jnp.int32)

  def native(self) -> Callable[..., Any]:
    """What a JAX user writes: ``lax.top_k``; smallest first as ``-top_k(-x)`` (floats) or ``~top_k(~x)`` (integers)."""
    k = self.k
    if not self.increasing:
      return lambda x: lax.top_k(x, k)
    if self.floating:
      return lambda x: (lambda v, i: (-v, i))(*lax.top_k(-x, k))
    return lambda x: (lambda v, i: (~v, i))(*lax.top_k(~x, k))


@dataclasses.dataclass(frozen=True)
class Op:
  """Another operator's workload: dmljax's call and the native JAX form it is held to."""

  name: str
  group: str
  inputs: tuple[tuple[tuple[int, ...], str], ...]
  dml_fn: Callable[..., Any]
  native_fn: Callable[..., Any]
  x64: bool = False

  def __str__(self) -> str:
    return self.name

  @property
  def row(self) -> int | None:
    return None

  def dmljax(self) -> Callable[..., Any]:
    return self.dml_fn

  def native(self) -> Callable[..., Any]:
    return self.native_fn


# The table and the benchmark's full-size top_k workloads (rows of 1024 or more).
FIXED = (
  TopK("float32", (64, 131072), 8),
  TopK("bfloat16", (64, 131072), 8),
  TopK("float32", (1, 32000), 1),
  TopK("float32", (4, 128256), 16),
  TopK("float32", (16, 32000), 4),
  TopK("float32", (1024, 4096), 16, increasing=True),
  TopK("int32", (64, 131072), 8),
  TopK("float16", (64, 131072), 8),
  TopK("float32", (64, 131072), 64),
  TopK("float32", (64, 32768), 256),
  TopK("float32", (64, 32768), 1024),
  TopK("uint8", (64, 32768), 50),
  TopK("int16", (64, 32768), 50),
  TopK("uint32", (64, 32768), 50),
  TopK("float64", (64, 32768), 50),
  TopK("float32", (64, 32768), 50),
  TopK("bfloat16", (64, 32768), 50),
  TopK("float32", (16, 128000), 8),
  TopK("float32", (4, 256000), 1),
)
# The TPU compiler takes seconds per top_k program: the TPU table plus a smaller sample.
FIXED_TPU = (
  TopK("float32", (64, 131072), 8),
  TopK("bfloat16", (64, 131072), 8),
  TopK("int32", (64, 131072), 8),
  TopK("float32", (16, 32000), 4),
  TopK("float32", (1, 32000), 1),
  TopK("float32", (1024, 4096), 16, increasing=True),
  TopK("float16", (64, 32768), 50),
)
TYPES = ("float32", "bfloat16", "float16", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64")
SHAPES = ((1, 32000), (16, 32000), (64, 32768), (4, 128256), (1024, 4096), (64, 131072))
KS = (1, 2, 4, 8, 16, 50, 64, 256, 1024)


def sample(count: int, seed: int, types: tuple[str, ...] = TYPES) -> tuple[TopK, ...]:
  """``count`` top_k cases drawn with ``seed`` from types x shapes x k x direction (always the same ones)."""
  product = [TopK(t, s, k, inc) for t, s, k, inc in itertools.product(types, SHAPES, KS, (False, True))]
  return tuple(random.Random(seed).sample(product, count))


def _argmin_flip(x: jax.Array) -> jax.Array:
  flat = x.reshape(x.shape[0], -1)
  return flat.shape[1] - 1 - jnp.argmin(jnp.flip(flat, axis=1), axis=1)


OPS = (
  Op(
    "argmax 256x32768 axis 1",
    "argmax",
    (((256, 32768), "float32"),),
    lambda x: dml.argmax(x, 1, keepdims=True),
    lambda x: jnp.argmax(x, axis=1, keepdims=True),
  ),
  Op(
    "argmax 64x131072 axis 1",
    "argmax",
    (((64, 131072), "float32"),),
    lambda x: dml.argmax(x, 1),
    lambda x: jnp.argmax(x, axis=1),
  ),
  Op(
    "argmin 64x128x256 axes (1,2)",
    "argmin",
    (((64, 128, 256), "float32"),),
    lambda x: dml.argmin(x, (1, 2)),
    lambda x: jnp.argmin(x.reshape(64, -1), axis=1),
  ),
  Op(
    "argmin 64x128x256 axes (1,2) DECREASING",
    "argmin",
    (((64, 128, 256), "float32"),),
    lambda x: dml.argmin(x, (1, 2), ties="last"),
    _argmin_flip,
  ),
  Op(
    "one_hot 8192 indices, depth 1000",
    "one_hot",
    (((8192,), "int32"),),
    lambda i: dml.one_hot(i, 1000, dtype=jnp.float32),
    lambda i: jax.nn.one_hot(i, 1000),
  ),
  Op(
    "reduce SUM 4096x4096 axis 1",
    "reduce",
    (((4096, 4096), "float32"),),
    lambda x: dml.reduce(x, "sum", 1),
    lambda x: jnp.sum(x, axis=1),
  ),
  Op(
    "reduce LOG_SUM_EXP 4096x4096 axis 1",
    "reduce",
    (((4096, 4096), "float32"),),
    lambda x: dml.reduce(x, "log_sum_exp", 1),
    lambda x: jax.nn.logsumexp(x, axis=1),
  ),
  Op(
    "gather_nd embedding 50000x512, 8192 indices",
    "gather_nd",
    (((50000, 512), "float32"), ((8192, 1), "int32")),
    lambda x, i: dml.gather_nd(x, i),
    lambda x, i: x[i[:, 0]],
  ),
)
