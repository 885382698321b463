"""Top-k selection along the last axis, on one device or along a sharded axis.

One kernel, :func:`local_top_k`, selects the ``k`` first elements of every
sequence in dmljax's value order (ties by ascending index). When the sequence axis
is sharded over mesh axes, every shard runs that kernel on its own slice, turns
its local indices into global ones (shard offset + local index), all-gathers
only its ``k`` candidates and runs the same kernel again on the gathered
``shards * k`` candidates. The gathered candidates lie in shard order, and
within a shard in the kernel's order, so among equal values a lower position is
a lower global index: the merge's own index tie-break is the global one, and
the result equals the unsharded one bit for bit, indices included.

Which path runs is decided without the caller's help:

* meshes with automatic axes (``jax.sharding.Mesh``, or shardings given only
  by ``jax.jit``'s ``in_shardings``): the kernel is wrapped in
  :func:`jax.experimental.custom_partitioning`, whose partitioning rule sees the
  operand's sharding when XLA partitions the program;
* explicit axes (``jax.make_mesh``'s default): the sharding is part of the
  array's type at trace time, and a sharded sequence axis runs the same
  per-shard function under :func:`jax.shard_map`.

``jax.vmap`` goes through a :func:`jax.custom_batching.custom_vmap` rule (the
kernel handles any number of leading axes) and differentiation through a
:func:`jax.custom_jvp` rule (values' tangents are the input's tangents at the
selected indices), since the partitioned kernel has neither rule of its own.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from dmljax._src import shardings
from dmljax._src.strategies import dispatch


def local_top_k(sequences: jax.Array, k: int, descending: bool, last: bool = False) -> tuple[jax.Array, jax.Array]:
  """Values and int32 indices of the ``k`` first elements along the last axis, ties by lower index.

  With ``last`` (``k == 1`` only), the tie goes to the highest index: the first extreme of the
  reversed sequence. A merge of per-shard candidates with ``last`` then picks the highest shard.
  """
  if last:
    if k != 1:
      raise ValueError(f"ties to the last index need k == 1; got {k=}")
    size = sequences.shape[-1]
    values, indices = local_top_k(lax.rev(sequences, (sequences.ndim - 1,)), 1, descending)
    return values, jnp.int32(size - 1) - indices
  indices = dispatch.top_k_indices(sequences, k, descending)
  values = jnp.take_along_axis(sequences, indices, axis=-1, mode="promise_in_bounds")
  return values, indices


def _per_shard_top_k(
  shard: jax.Array, k: int, descending: bool, last: bool, names: shardings.AxisNames, length: int
) -> tuple[jax.Array, jax.Array]:
  """Runs on each shard of sequences of ``length``, inside a manual (shard_map-like) context over ``names``.

  Global indices take the type the unsharded selection gives sequences of ``length``.
  """
  size = shard.shape[-1]
  values, indices = local_top_k(shard, min(k, size), descending, last)
  wide = dispatch.index_dtype(length)
  indices = indices.astype(wide) + lax.axis_index(names).astype(wide) * np.array(size, wide)
  axis = shard.ndim - 1
  values = lax.all_gather(values, names, axis=axis, tiled=True)
  indices = lax.all_gather(indices, names, axis=axis, tiled=True)
  merged, position = local_top_k(values, k, descending, last)
  return merged, jnp.take_along_axis(indices, position, axis=-1, mode="promise_in_bounds")


def _partition(
  k: int, descending: bool, last: bool, mesh: Any, arg_shapes: Any, result_shape: Any
) -> tuple[Any, Callable[..., Any], tuple[NamedSharding, NamedSharding], tuple[NamedSharding]]:
  """custom_partitioning's rule: keep batch shardings, split the sequence axis as local top-k + merge."""
  del result_shape
  (operand,) = arg_shapes
  spec = shardings.full_spec(operand.sharding.spec, len(operand.shape))
  names = shardings.names(spec[-1])
  shard_count = math.prod(mesh.shape[n] for n in names)
  out_sharding = NamedSharding(mesh, PartitionSpec(*spec[:-1], None))
  if shard_count == 1 or operand.shape[-1] % shard_count:
    in_sharding = NamedSharding(mesh, PartitionSpec(*spec[:-1], None))
    return (
      mesh,
      functools.partial(local_top_k, k=k, descending=descending, last=last),
      (out_sharding, out_sharding),
      (in_sharding,),
    )
  lower = functools.partial(
    _per_shard_top_k, k=k, descending=descending, last=last, names=names, length=operand.shape[-1]
  )
  return mesh, lower, (out_sharding, out_sharding), (NamedSharding(mesh, PartitionSpec(*spec)),)


@functools.partial(custom_partitioning, static_argnums=(1, 2, 3))
def _partitioned_top_k(sequences: jax.Array, k: int, descending: bool, last: bool) -> tuple[jax.Array, jax.Array]:
  return local_top_k(sequences, k, descending, last)


_partitioned_top_k.def_partition(partition=_partition, sharding_rule="... n -> ... k, ... k")


def _dispatch(sequences: jax.Array, k: int, descending: bool, last: bool) -> tuple[jax.Array, jax.Array]:
  if jax.sharding.get_abstract_mesh().manual_axes:
    # Inside shard_map, the caller already controls what each device holds.
    return local_top_k(sequences, k, descending, last)
  explicit = shardings.explicit_spec(sequences)
  if explicit is None:
    return _partitioned_top_k(sequences, k, descending, last)
  mesh, spec = explicit
  axis_names = shardings.names(spec[-1])
  if not axis_names:
    # The type says no device splits a sequence: XLA keeps the other axes' shardings by itself.
    return local_top_k(sequences, k, descending, last)
  body = functools.partial(
    _per_shard_top_k, k=k, descending=descending, last=last, names=axis_names, length=sequences.shape[-1]
  )
  out_spec = PartitionSpec(*spec[:-1], None)
  mapped = jax.shard_map(
    body, mesh=mesh, in_specs=PartitionSpec(*spec), out_specs=(out_spec, out_spec), check_vma=False
  )
  return mapped(sequences)


@functools.cache
def _batched_selector(k: int, descending: bool, last: bool) -> Callable[[jax.Array], tuple[jax.Array, jax.Array]]:
  """The selector for one ``(k, descending, last)``, with a vmap rule: a batch is one more leading axis."""

  @jax.custom_batching.custom_vmap
  def select(sequences: jax.Array) -> tuple[jax.Array, jax.Array]:
    return _dispatch(sequences, k, descending, last)

  @select.def_vmap
  def _rule(axis_size: int, in_batched: list[bool], sequences: jax.Array) -> Any:
    del axis_size, in_batched
    return select(sequences), (True, True)

  return select


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3))
def top_k_last_axis(sequences: jax.Array, k: int, descending: bool, last: bool = False) -> tuple[jax.Array, jax.Array]:
  """Values and int32 indices of the ``k`` first elements along the last axis, sharded or not.

  ``last`` (with ``k == 1``) breaks ties by the highest index instead of the lowest.
  """
  return _batched_selector(k, descending, last)(sequences)


@top_k_last_axis.defjvp
def _top_k_jvp(k: int, descending: bool, last: bool, primals: Any, tangents: Any) -> Any:
  (sequences,), (tangent,) = primals, tangents
  values, indices = top_k_last_axis(sequences, k, descending, last)
  pick = functools.partial(jnp.take_along_axis, axis=-1, mode="promise_in_bounds")
  if shardings.explicit_spec(tangent) is not None:
    # On explicit axes a gather along a sharded axis needs its output sharding named: the values'.
    pick = jax.sharding.auto_axes(pick, out_sharding=jax.typeof(values).sharding)
  value_tangent = pick(tangent, indices)
  return (values, indices), (value_tangent, np.zeros(indices.shape, jax.dtypes.float0))
