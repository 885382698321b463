"""dmljax.sampling on a vocabulary split over 4 CPU devices (issue 23, point 4).

tests/conftest.py splits the host into 8 devices; a 4-device mesh splits the last (vocabulary) axis, on
automatic axes (``jax.sharding.Mesh`` with ``jax.jit``'s shardings) and on explicit ones
(``jax.make_mesh``). Every filter and ``sample`` must give the one-device result bit for bit (same key,
same tokens), and the collectives of the compiled programs must move O(batch) bytes: a few int32 per row
per search pass, never the logits (an all-gather of the logits is the comparison).
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import assert_bitwise_equal, load_example
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import dmljax as dml

S = dml.sampling
collective_bytes = load_example("local_cluster").collective_bytes
BATCH, VOCAB = 4, 32768
_RNG = np.random.default_rng(2324)
LOGITS = _RNG.integers(-40, 40, (BATCH, VOCAB)).astype(np.float32) / np.float32(4)  # ties everywhere
LOGITS[1, ::7] = np.nan
K = np.array([1, 50, 3000, 0], np.int32)
P_ = np.array([0.9, 0.5, 0.99, 1.0], np.float32)


def _calls() -> dict[str, Any]:
  key = jax.random.key(42)
  return {
    "top_k_mask": lambda x, k, p: S.top_k_mask(x, k),
    "top_p_mask": lambda x, k, p: S.top_p_mask(x, p),
    "min_p_mask": lambda x, k, p: S.min_p_mask(x, p * np.float32(0.1)),
    "sample": lambda x, k, p: S.sample(key, x, temperature=0.7, top_k=k, top_p=p, min_p=0.01),
    "sample max_k": lambda x, k, p: S.sample(key, x, top_k=jnp.minimum(k, 16), top_p=p, max_k=16),
  }


CALLS = tuple(_calls())


def _mesh(kind: str) -> Mesh:
  devices = np.array(jax.devices()[:4])
  if kind == "explicit":
    return jax.make_mesh((4,), ("v",), axis_types=(AxisType.Explicit,), devices=list(devices))
  return Mesh(devices, ("v",))


def _all(x: jax.Array, k: jax.Array, p: jax.Array) -> tuple[jax.Array, ...]:
  return tuple(fn(x, k, p) for fn in _calls().values())


_ALL = jax.jit(_all)  # the one-device program, compiled once for both meshes


@pytest.mark.parametrize("kind", ["auto", "explicit"])
def test_split_vocabulary_gives_the_unsharded_bits_and_moves_o_batch_bytes(kind: str) -> None:
  mesh = _mesh(kind)
  split = NamedSharding(mesh, P(None, "v"))
  whole = NamedSharding(mesh, P())
  logits = jax.device_put(LOGITS, split)
  k, p = jax.device_put(K, whole), jax.device_put(P_, whole)
  expected = _ALL(LOGITS, K, P_)
  with jax.set_mesh(mesh) if kind == "explicit" else contextlib.nullcontext():
    compiled = jax.jit(_all).lower(logits, k, p).compile()
    got = compiled(logits, k, p)
  for name, a, b in zip(CALLS, got, expected, strict=True):
    assert_bitwise_equal(np.asarray(a), np.asarray(b)), name
  # Each collective of the program counted once: a search pass's sums (a few int32 per row; the passes of the
  # guided threshold's correction and of a cut between two equal entries add their keys and index), and the candidates
  # each call all-gathers per shard and row (value and index, 8 bytes): 64 for top_k_mask, top_p_mask and
  # sample, 16 for sample with max_k=16, 1 for min_p_mask (the row's largest). Independent of the vocabulary:
  # an all-gather of the logits moves BATCH * VOCAB * 4 bytes.
  moved = collective_bytes(compiled)
  per_row_search, per_row_candidates = 8 * 64, 4 * 8 * (3 * 64 + 16 + 1)
  assert moved <= 1.25 * BATCH * (per_row_search + per_row_candidates), moved
  assert moved < LOGITS.nbytes // 10
