"""dmljax.sampling under JAX's transformations: vmap over each argument alone and jax.export, bit for bit.

``jax.vmap`` over one argument with the others shared (keys with shared logits, the usual way to draw several
samples; ``k``, ``p``, the temperature, the logits) must give, for each mapped value, the bits of the unmapped
call. Rows are chosen so that every route runs: rows decided on their candidates, greedy rows, rows with every
filter off (drawn whole), and rows whose top-k or top-p needs the whole-row search (``max_k=4``). ``jax.export``
round-trips the compiled programs, x64 off and on. On CPU both routes are mapped: the compiled kernels' (the
default) and the XLA composition (``cpu_kernel=False``, what a build without a compiler runs), each against the
unmapped call on the kernels' route.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from _helpers import assert_bitwise_equal

import dmljax as dml
from dmljax._src import platform

S = dml.sampling
_RNG = np.random.default_rng(3333)
ROWS = (_RNG.standard_normal((4, 300)) * 2).astype(np.float32)
ROWS[1, ::7] = np.nan
K = np.array([3, 0, 50, 300], np.int32)  # candidates decide, off, search (max_k=4), off
P = np.array([0.9, 1.0, 0.5, 0.99], np.float32)
T = np.array([0.7, 1.0, 0.0, 2.0], np.float32)  # row 2 greedy
M = 4


def _sample(key: jax.Array, x: jax.Array, k: jax.Array, p: jax.Array, t: jax.Array) -> jax.Array:
  return S.sample(key, x, temperature=t, top_k=k, top_p=p, min_p=0.001, max_k=M)


def _masks(x: jax.Array, k: jax.Array, p: jax.Array) -> tuple[jax.Array, ...]:
  return S.top_k_mask(x, k, max_k=M), S.top_p_mask(x, p, max_k=M), S.min_p_mask(x, p * np.float32(0.01))


MAPPED = {
  "keys": (jax.random.split(jax.random.key(1), 5), 0),
  "logits": (np.stack([ROWS * s for s in (1.0, 0.5, 2.0)]).astype(np.float32), 1),
  "k": (np.stack([K, K // 2, K + 1]), 2),
  "p": (np.stack([P, P * np.float32(0.5), np.ones_like(P)]), 3),
  "temperature": (np.stack([T, T * 2, np.zeros_like(T)]), 4),
}


@pytest.mark.parametrize("route", ["kernel", "composition"])
@pytest.mark.parametrize(
  "mapped", [m if m in ("keys", "k") else pytest.param(m, marks=pytest.mark.long) for m in MAPPED]
)
def test_vmap_over_each_argument_alone_gives_the_unmapped_bits(mapped: str, route: str) -> None:
  values, position = MAPPED[mapped]
  args: list[Any] = [jax.random.key(0), ROWS, K, P, T]
  axes = [None] * 5
  args[position], axes[position] = values, 0
  with platform.choosing(cpu_kernel=route == "kernel"):
    got = jax.jit(jax.vmap(_sample, in_axes=tuple(axes)))(*args)
  for i in range(len(values)):
    one = list(args)
    one[position] = values[i]
    assert_bitwise_equal(got[i], jax.jit(_sample)(*one))
  if mapped in ("logits", "k", "p"):
    mask_args: list[Any] = [ROWS, K, P]
    mask_axes = [None] * 3
    where = {"logits": 0, "k": 1, "p": 2}[mapped]
    mask_args[where], mask_axes[where] = values, 0
    with platform.choosing(cpu_kernel=route == "kernel"):
      masks = jax.jit(jax.vmap(_masks, in_axes=tuple(mask_axes)))(*mask_args)
    for i in range(len(values)):
      one = list(mask_args)
      one[where] = values[i]
      for a, b in zip(masks, jax.jit(_masks)(*one), strict=True):
        assert_bitwise_equal(a[i], b)


@pytest.mark.parametrize("x64", [False, pytest.param(True, marks=pytest.mark.long)])
def test_exported_programs_give_the_same_bits(x64: bool) -> None:
  with jax.enable_x64(x64):
    key = jax.random.key(3)
    logits = ROWS.astype(np.float64) if x64 else ROWS

    def both(key: jax.Array, x: jax.Array, k: jax.Array, p: jax.Array, t: jax.Array) -> tuple[jax.Array, ...]:
      return (_sample(key, x, k, p, t), *_masks(x, k, p))

    exported = jax.export.export(jax.jit(both))(key, logits, K, P, T)
    restored = jax.export.deserialize(exported.serialize())
    for a, b in zip(restored.call(key, logits, K, P, T), jax.jit(both)(key, logits, K, P, T), strict=True):
      assert_bitwise_equal(a, b)
