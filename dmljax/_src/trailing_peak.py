"""The first (or last) peak over several trailing axes, as one top-1 selection per device, sharded or not.

argmin/argmax over trailing axes on CPU select the peak of the flattened axes (XLA:CPU's vectorised
top-1 selection of one long row is several times faster than one per short row, and than a variadic
reduction). Flattening a sharded array, though, would gather it wherever an inner axis is split. So
the flattening happens per device: each device flattens its own block, selects its peak and turns the
position into the global flat index (its block's offset along every split axis added), and only those
candidates are all-gathered and merged, keys first, then the lowest (``last``: highest) flat index.

As in :mod:`selection`: automatic mesh axes go through :func:`jax.experimental.custom_partitioning`
(its rule sees the operand's sharding), explicit ones through :func:`jax.shard_map`, and ``jax.vmap``
through a :func:`jax.custom_batching.custom_vmap` rule (any number of leading axes). CPU only: other
platforms reduce (key, index) pairs instead (:func:`strategies.peak.peak_index`).
"""

from __future__ import annotations

import functools
import math
import string
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from dmljax._src import dtypes, selection, shardings
from dmljax._src.strategies import peak

Peak = tuple[jax.Array, jax.Array]


def _local(block: jax.Array, count: int, last: bool) -> Peak:
  """The peak key over the ``count`` trailing axes of ``block`` and its flat index (int32) there."""
  rows = block.reshape(*block.shape[: block.ndim - count], math.prod(block.shape[block.ndim - count :]))
  values, indices = selection.local_top_k(rows, 1, True, last)
  return values[..., 0], indices[..., 0]


def _per_shard(block: jax.Array, count: int, last: bool, names: tuple[shardings.AxisNames, ...], sizes: Any) -> Peak:
  """Inside a manual context: this block's peak, its global flat index, then the peak of every block's."""
  value, local = _local(block, count, last)
  block_sizes = block.shape[block.ndim - count :]
  coordinates = []
  rest = local
  for size in reversed(block_sizes):
    coordinates.append(rest % np.int32(size))
    rest = rest // np.int32(size)
  flat = jnp.zeros(local.shape, np.int32)
  for coordinate, axis_names, block_size, size in zip(reversed(coordinates), names, block_sizes, sizes, strict=True):
    if axis_names:
      coordinate = coordinate + lax.axis_index(axis_names).astype(np.int32) * np.int32(block_size)
    flat = flat * np.int32(size) + coordinate
  split = tuple(n for axis_names in names for n in axis_names)
  values = lax.all_gather(value, split, axis=value.ndim)
  flats = lax.all_gather(flat, split, axis=flat.ndim)
  return peak.peak_of_pairs(values, flats, (values.ndim - 1,), last=last)


def _body(spec: tuple[Any, ...], shape: tuple[int, ...], count: int, last: bool) -> Callable[[jax.Array], Peak]:
  names = tuple(shardings.names(entry) for entry in spec[len(spec) - count :])
  if not any(names):
    return functools.partial(_local, count=count, last=last)
  return functools.partial(_per_shard, count=count, last=last, names=names, sizes=shape[len(shape) - count :])


def _splits_evenly(mesh: Any, spec: tuple[Any, ...], shape: tuple[int, ...]) -> bool:
  return all(shape[d] % math.prod(mesh.shape[n] for n in shardings.names(spec[d])) == 0 for d in range(len(shape)))


def _partition(count: int, last: bool, x64: bool, mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
  """custom_partitioning's rule: keep the other axes' shardings, select per block, merge the candidates.

  ``x64``: the setting the call was traced with, which the body is traced with again (:func:`shardings.with_x64`).
  """
  del result_shape
  (operand,) = arg_shapes
  shape = tuple(operand.shape)
  spec = shardings.full_spec(operand.sharding.spec, len(shape))
  kept = spec[: len(shape) - count]
  if not _splits_evenly(mesh, spec, shape):
    spec = (*kept, *(None,) * count)  # XLA gathers the reduced axes first, as it would for any uneven split
  out = NamedSharding(mesh, PartitionSpec(*kept))
  body = shardings.with_x64(x64, _body(spec, shape, count, last))
  return mesh, body, (out, out), (NamedSharding(mesh, PartitionSpec(*spec)),)


@functools.cache
def _partitioned(count: int) -> Any:
  @functools.partial(custom_partitioning, static_argnums=(1, 2))
  def partitioned(key: jax.Array, last: bool, x64: bool) -> Peak:
    del x64  # read by the partitioning rule
    return _local(key, count, last)

  reduced = " ".join(string.ascii_lowercase[:count])
  partitioned.def_partition(
    partition=lambda last, *rest: _partition(count, last, *rest), sharding_rule=f"... {reduced} -> ..., ..."
  )
  return partitioned


def _dispatch(key: jax.Array, count: int, last: bool) -> Peak:
  if jax.sharding.get_abstract_mesh().manual_axes:
    return _local(key, count, last)
  explicit = shardings.explicit_spec(key)
  if explicit is None:
    return _partitioned(count)(key, last, dtypes.x64_enabled())
  mesh, spec = explicit
  out = PartitionSpec(*spec[: key.ndim - count])
  body = _body(spec, key.shape, count, last)
  return jax.shard_map(body, mesh=mesh, in_specs=PartitionSpec(*spec), out_specs=(out, out), check_vma=False)(key)


@functools.cache
def _batched(count: int, last: bool) -> Callable[[jax.Array], Peak]:
  @jax.custom_batching.custom_vmap
  def select(key: jax.Array) -> Peak:
    return _dispatch(key, count, last)

  @select.def_vmap
  def _rule(axis_size: int, in_batched: list[bool], key: jax.Array) -> Any:
    del axis_size, in_batched
    return select(key), (True, True)

  return select


def peak_index(key: jax.Array, count: int, *, last: bool) -> jax.Array:
  """The flat index (int32) of the first (``last``: final) largest key over the ``count`` trailing axes."""
  return _batched(count, last)(key)[1]
