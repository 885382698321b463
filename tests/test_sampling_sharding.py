"""dmljax.sampling over several CPU devices: the vocabulary split (issue 23, point 4) and the batch split (issue 41).

tests/conftest.py splits the host into 8 devices. A 4-device mesh splits the last (vocabulary) axis, on
automatic axes (``jax.sharding.Mesh`` with ``jax.jit``'s shardings) and on explicit ones
(``jax.make_mesh``): every filter and ``sample`` must give the one-device result bit for bit (same key,
same tokens), and the collectives of the compiled programs must move O(batch) bytes: a few int32 per row
per search pass, never the logits (an all-gather of the logits is the comparison).

Meshes of 2 and 4 devices split the batch: where JAX partitions the program (automatic axes) the tokens are the
one-device ones; inside ``jax.shard_map`` with a replicated key, ``row_offset`` = the block's
global first row gives them exactly, and without it no two devices holding different blocks draw the same noise
(identical blocks on every device draw different tokens), while devices holding the same logits (replicated along
a mesh axis, as JAX's types show) draw the same tokens.
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
  if kind.startswith("explicit"):
    return jax.make_mesh((4,), ("v",), axis_types=(AxisType.Explicit,), devices=list(devices))
  return Mesh(devices, ("v",))


def _all(x: jax.Array, k: jax.Array, p: jax.Array) -> tuple[jax.Array, ...]:
  return tuple(fn(x, k, p) for fn in _calls().values())


_ALL = jax.jit(_all)  # the one-device program, compiled once for both meshes


@pytest.mark.parametrize("kind", ["auto", "explicit", "explicit without a mesh context"])
def test_split_vocabulary_gives_the_unsharded_bits_and_moves_o_batch_bytes(kind: str) -> None:
  """On explicit axes with ``jax.set_mesh`` and without it (the arrays' types alone carry the mesh: a value the
  whole-row loop computes from constants then has no mesh, and must be given its batch array's)."""
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


# ---- the batch split over 2 and 4 devices ------------------------------------------------------------------------

ROWS, WIDTH = 8, 384
BATCH_LOGITS = (_RNG.standard_normal((ROWS, WIDTH)) * 2).astype(np.float32)
BATCH_LOGITS[3, ::5] = np.nan


def _draw(key: jax.Array, x: jax.Array, row_offset: Any = None) -> jax.Array:
  return S.sample(key, x, temperature=0.9, top_k=200, top_p=0.95, max_k=16, row_offset=row_offset)


_ONE_DEVICE = jax.jit(_draw)


def _batch_mesh(devices: int) -> Mesh:
  return Mesh(np.array(jax.devices()[:devices]), ("b",))


def _placed(mesh: Mesh, key: jax.Array, x: np.ndarray, spec: P) -> tuple[jax.Array, jax.Array]:
  return jax.device_put(key, NamedSharding(mesh, P())), jax.device_put(x, NamedSharding(mesh, spec))


def _shard_map(mesh: Mesh, body: Any, out: P, check_vma: bool = True) -> Any:
  return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P("b")), out_specs=out, check_vma=check_vma))


@pytest.mark.parametrize("devices", [2, 4])
def test_a_batch_split_by_jax_gives_the_one_device_tokens(devices: int) -> None:
  """``jax.jit`` with the batch sharded over automatic mesh axes: every row has its global number, the tokens are the
  one-device ones."""
  key = jax.random.key(41)
  mesh = _batch_mesh(devices)
  got = jax.jit(_draw)(*_placed(mesh, key, BATCH_LOGITS, P("b")))
  assert_bitwise_equal(np.asarray(got), np.asarray(_ONE_DEVICE(key, BATCH_LOGITS)))


@pytest.mark.parametrize("devices", [2, 4])
def test_shard_map_with_the_global_row_offset_gives_the_one_device_tokens(devices: int) -> None:
  """``row_offset = axis_index * local rows`` (the documented recipe) under ``shard_map`` over the batch with a
  replicated key: exactly the one-device tokens, for every key."""
  mesh = _batch_mesh(devices)
  local = ROWS // devices

  def body(key: jax.Array, x: jax.Array) -> jax.Array:
    return _draw(key, x, row_offset=jax.lax.axis_index("b") * local)

  fn = _shard_map(mesh, body, P("b"))
  for seed in (0, 41, 7):
    key = jax.random.key(seed)
    assert_bitwise_equal(
      np.asarray(fn(*_placed(mesh, key, BATCH_LOGITS, P("b")))), np.asarray(_ONE_DEVICE(key, BATCH_LOGITS))
    )


@pytest.mark.parametrize("check_vma", [True, False])
@pytest.mark.parametrize("devices", [2, 4])
def test_shard_map_without_an_offset_never_gives_two_shards_the_same_noise(devices: int, check_vma: bool) -> None:
  """Every device holds the same block (the batch is that block tiled): by default each draws its own tokens, no two
  alike (64 rows of 384 entries: equal tokens by chance have probability far below 2**-100). The default numbers the
  blocks in mesh order, which for this layout (the batch's leading axis split over the mesh) is the one-device
  numbering, as the docs say."""
  mesh = _batch_mesh(devices)
  block = (_RNG.standard_normal((64, WIDTH)) * 3).astype(np.float32)
  tiled = np.tile(block, (devices, 1))
  key = jax.random.key(5)
  got = np.asarray(_shard_map(mesh, _draw, P("b"), check_vma)(*_placed(mesh, key, tiled, P("b"))))
  shards = got.reshape(devices, 64)
  for a in range(devices):
    for b in range(a):
      assert not np.array_equal(shards[a], shards[b]), (a, b)
  assert_bitwise_equal(got, np.asarray(_ONE_DEVICE(key, tiled)))


def test_shard_map_replicas_of_the_logits_draw_the_same_tokens() -> None:
  """A 2 x 2 mesh, the batch split over "b" and the logits replicated over "m" (as after an all-gather over a
  model axis): with JAX's varying-axes types (``check_vma=True``, the default) the two "m" replicas of each block
  draw the same tokens, the one-device ones. With ``check_vma=False`` JAX cannot say the logits are replicated:
  every device gets its own numbers (no shared noise), and ``row_offset`` restores the one-device tokens."""
  mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("b", "m"))
  key = jax.random.key(9)
  placed = _placed(mesh, key, BATCH_LOGITS, P("b"))
  want = np.asarray(_ONE_DEVICE(key, BATCH_LOGITS))
  every = P(("b", "m"))  # each device's own tokens, stacked

  def smap(body: Any, out: P, check_vma: bool) -> Any:
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P("b")), out_specs=out, check_vma=check_vma))

  assert_bitwise_equal(np.asarray(smap(_draw, P("b"), True)(*placed)), want)  # out_specs P("b"): invariant over "m"
  apart = np.asarray(smap(_draw, every, False)(*placed)).reshape(4, ROWS // 2)
  for a in range(4):
    for b in range(a):
      assert not np.array_equal(apart[a], apart[b]), (a, b)
  offset = lambda key, x: _draw(key, x, row_offset=jax.lax.axis_index("b") * (ROWS // 2))  # noqa: E731
  same = np.asarray(smap(offset, every, False)(*placed)).reshape(2, 2, ROWS // 2)
  assert_bitwise_equal(same, np.stack([want.reshape(2, ROWS // 2)] * 2, axis=1))


def test_a_batch_split_over_explicit_axes_is_refused_with_the_alternatives() -> None:
  """Explicit sharding in types refuses the filters' mix of the logits' sharding and their per-row values': every
  function refuses such logits at trace time with a DescriptorError that names the layouts that work."""
  mesh = jax.make_mesh((2,), ("b",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:2])
  key, logits = _placed(mesh, jax.random.key(0), BATCH_LOGITS, P("b"))
  calls = (
    lambda x: S.top_k_mask(x, 3),
    lambda x: S.top_p_mask(x, 0.9),
    lambda x: S.min_p_mask(x, 0.1),
    lambda x: S.sample(key, x),
  )
  with jax.set_mesh(mesh):
    for call in calls:
      with pytest.raises(
        dml.DescriptorError, match=r"split only the vocabulary .* inside jax\.shard_map; got logits sharded as"
      ):
        jax.jit(call)(logits)
