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

* explicit axes (``jax.make_mesh``'s default): the sharding is part of the
  array's type at trace time, and a sharded sequence axis runs the per-shard
  function under :func:`jax.shard_map`, on every backend;
* automatic axes (``jax.sharding.Mesh``, or shardings given only by
  ``jax.jit``'s ``in_shardings``), where the operand's sharding is known only
  when XLA partitions the program:

  - on CPU and CUDA, the kernel is wrapped in
    :func:`jax.experimental.custom_partitioning`, whose Python rule XLA calls
    with the operand's sharding;
  - elsewhere (TPUs), XLA cannot call that rule: JAX registers it with PJRT
    plugins through their custom-partitioner extension, which libtpu does not
    implement (``Custom emitter for CustomSPMDPartitioning not found``, on a
    real TPU as when compiling for one without it). Where the TPU table
    selects with XLA's own ``TopK`` on exact keys (``tpu_kernel``: matrices,
    ``k <= 256``), the keys of the whole matrix go to that ``TopK``, which XLA's
    partitioner splits as it splits ``jax.lax.top_k`` (a ``TopK`` per shard, one
    over the shards' candidates): only candidates move. Otherwise the program
    is cut into as many chunks as it has devices (``gcd(length, devices)``;
    chosen when the program is lowered, the first moment the device count is
    known): every chunk selects its ``k`` candidates and one selection merges
    them. A sharded axis is split along chunk boundaries, so the per-chunk
    selections stay on their devices and only candidates move. No Python
    runs inside XLA, so such programs also serialize with ``jax.export``.

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
from jax.extend.core import Primitive
from jax.interpreters import mlir
from jax.sharding import NamedSharding, PartitionSpec

from dmljax._src import dtypes, index_math, platform, shardings, symbolic, value_bits
from dmljax._src.strategies import dispatch
from dmljax._src.strategies.case import Case

Selected = tuple[jax.Array, jax.Array]
_XLA_TOP_K = "tpu_kernel"  # the TPU table's row that selects with XLA's TopK, which XLA's partitioner splits


def local_top_k(sequences: jax.Array, k: int, descending: bool, last: bool = False) -> Selected:
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
  return dispatch.top_k(sequences, k, descending)


def _candidates(part: jax.Array, k: int, descending: bool, last: bool, start: jax.Array, wide: np.dtype) -> Selected:
  """The ``k`` first elements of each part of a sequence, indexed in the whole sequence (``start``: the part's first).

  Global indices take the type ``wide`` that the unsharded selection gives the whole sequence.
  """
  values, indices = local_top_k(part, min(k, part.shape[-1]), descending, last)
  return values, indices.astype(wide) + start


def _merge(values: jax.Array, indices: jax.Array, k: int, descending: bool, last: bool, placed: Any = None) -> Selected:
  """The ``k`` first of the parts' candidates, laid out part after part along the last axis.

  Within a part, equal values lie in index order, and parts in sequence order, so among equal
  values a lower position is a lower global index: the kernel's tie-break is the global one.
  ``placed``: a sharding the selected values' bits take before they are read back as values.
  """
  _, position = local_top_k(values, k, descending, last)
  pick = functools.partial(jnp.take_along_axis, indices=position, axis=-1, mode="promise_in_bounds")
  # The values are read as their bits: where XLA partitions this gather (the chunks on automatic axes), it
  # becomes masked gathers and an all-reduce SUM, exact on integers only (-0.0 + 0.0 is +0.0, NaNs quieten).
  bits = pick(value_bits.to_bits(values))
  if placed is not None:
    bits = lax.with_sharding_constraint(bits, placed)
  return value_bits.from_bits(bits, values.dtype), pick(indices)


def _per_shard_top_k(
  shard: jax.Array, k: int, descending: bool, last: bool, names: shardings.AxisNames, length: int
) -> Selected:
  """Runs on each shard of sequences of ``length``, inside a manual (shard_map-like) context over ``names``."""
  wide = dispatch.index_dtype(length)
  start = lax.axis_index(names).astype(wide) * np.array(shard.shape[-1], wide)
  values, indices = _candidates(shard, k, descending, last, start, wide)
  axis = shard.ndim - 1
  # The candidates travel as their bits: XLA:CPU all-gathers bfloat16 as float32, which quiets NaNs.
  values = value_bits.from_bits(lax.all_gather(value_bits.to_bits(values), names, axis=axis, tiled=True), values.dtype)
  indices = lax.all_gather(indices, names, axis=axis, tiled=True)
  return _merge(values, indices, k, descending, last)


def _chunked_top_k(
  sequences: jax.Array, k: int, descending: bool, last: bool, chunks: int, mesh: jax.sharding.AbstractMesh | None = None
) -> Selected:
  """The selection as ``chunks`` equal chunks of every sequence, each selecting its candidates, and a merge.

  Written in ordinary operations that XLA partitions by itself: where the sequence axis is split
  over devices along chunk boundaries, each chunk's selection runs where the chunk lies and only
  the candidates travel to the merge. The chunks are selected as the rows of one matrix, chunk-major
  (all sequences' first chunks, then their second ones...), so that a split of the sequence axis is a
  split of those rows and each device selects along the last axis of a matrix: XLA's TPU compiler
  runs its TopK kernel on rank-2 operands only, and sorts a rank-3 one.
  """
  *batch, length = sequences.shape
  size = length // chunks
  rows = math.prod(batch)
  wide = dispatch.index_dtype(length)
  # The chunk matrix is a relayout of the input, which XLA may partition into collectives: moved as bits.
  bits = value_bits.to_bits(sequences)
  parts = value_bits.from_bits(
    jnp.moveaxis(bits.reshape(rows, chunks, size), 1, 0).reshape(chunks * rows, size), sequences.dtype
  )
  start = lax.broadcasted_iota(wide, (chunks, rows, 1), 0).reshape(chunks * rows, 1) * np.array(size, wide)

  def select(part: jax.Array, start: jax.Array) -> Selected:
    return _candidates(part, k, descending, last, start, wide)

  if mesh is not None:
    # Each device selects the candidates of the chunks it holds (XLA's partitioner would replicate the whole
    # chunk matrix for the TopK first): only candidates move to the merge.
    spec = PartitionSpec("chunks", None)
    select = jax.shard_map(select, mesh=mesh, in_specs=(spec, spec), out_specs=(spec, spec), check_vma=False)
  values, indices = select(parts, start)

  def by_sequence(selected: jax.Array) -> jax.Array:
    # Each sequence's candidates, chunk after chunk.
    per_chunk = selected.shape[-1]
    return jnp.moveaxis(selected.reshape(chunks, rows, per_chunk), 0, 1).reshape(*batch, chunks * per_chunk)

  # The candidates travel to the merge as their bits: the relayout may be a collective, which XLA:CPU runs on
  # narrow floats through float32 (quieting or rewriting NaN payloads).
  moved = value_bits.from_bits(by_sequence(value_bits.to_bits(values)), values.dtype)
  # XLA may split the merge's gather over the devices too, and then gather its result where the program's output
  # goes: after the values are read back from their bits, as floats (XLA:CPU all-gathers bfloat16 as float32,
  # quieting NaNs). The selected bits are gathered first, so no collective moves the values as floats.
  placed = None if mesh is None else NamedSharding(mesh, PartitionSpec())
  return _merge(moved, by_sequence(indices), k, descending, last, placed)


def _partition(
  k: int,
  descending: bool,
  last: bool,
  x64: bool,
  choice: platform.Choice,
  mesh: Any,
  arg_shapes: Any,
  result_shape: Any,
) -> tuple[Any, Callable[..., Any], tuple[NamedSharding, NamedSharding], tuple[NamedSharding]]:
  """custom_partitioning's rule: keep batch shardings, split the sequence axis as local top-k + merge.

  ``x64`` and ``choice``: the setting and the platform choice the call was traced with, which the body is traced
  with again (:func:`shardings.with_x64`, :func:`shardings.with_choice`): XLA calls this rule when it compiles,
  maybe on another thread.
  """
  del result_shape
  (operand,) = arg_shapes
  spec = shardings.full_spec(operand.sharding.spec, len(operand.shape))
  names = shardings.names(spec[-1])
  shard_count = math.prod(mesh.shape[n] for n in names)
  out_sharding = NamedSharding(mesh, PartitionSpec(*spec[:-1], None))
  if shard_count == 1 or operand.shape[-1] % shard_count:
    select = functools.partial(local_top_k, k=k, descending=descending, last=last)
    in_sharding = NamedSharding(mesh, PartitionSpec(*spec[:-1], None))
    return (
      mesh,
      shardings.with_x64(x64, shardings.with_choice(choice, select)),
      (out_sharding, out_sharding),
      (in_sharding,),
    )
  lower = functools.partial(
    _per_shard_top_k, k=k, descending=descending, last=last, names=names, length=operand.shape[-1]
  )
  return (
    mesh,
    shardings.with_x64(x64, shardings.with_choice(choice, lower)),
    (out_sharding, out_sharding),
    (NamedSharding(mesh, PartitionSpec(*spec)),),
  )


@functools.partial(custom_partitioning, static_argnums=(1, 2, 3, 4, 5))
def _partitioned_top_k(
  sequences: jax.Array, k: int, descending: bool, last: bool, x64: bool, choice: platform.Choice
) -> Selected:
  del x64, choice  # read by the partitioning rule
  return local_top_k(sequences, k, descending, last)


_partitioned_top_k.def_partition(partition=_partition, sharding_rule="... n -> ... k, ... k")


# The selection in device-count chunks (_chunked_top_k), as a primitive whose lowering rule picks the chunk count:
# a traced function cannot see how many devices its program will run on, a lowering rule can.
_top_k_by_chunks_p = Primitive("dmljax_top_k_by_chunks")
_top_k_by_chunks_p.multiple_results = True


@_top_k_by_chunks_p.def_impl
def _top_k_by_chunks_impl(
  sequences: jax.Array, *, k: int, descending: bool, last: bool, choice: platform.Choice
) -> Selected:
  return shardings.with_choice(choice, local_top_k)(sequences, k, descending, last)


@_top_k_by_chunks_p.def_abstract_eval
def _top_k_by_chunks_abstract_eval(
  aval: Any, *, k: int, descending: bool, last: bool, choice: platform.Choice
) -> list[Any]:
  del choice  # the outputs' types are the same under every choice
  outputs = jax.eval_shape(
    functools.partial(local_top_k, k=k, descending=descending, last=last), jax.ShapeDtypeStruct(aval.shape, aval.dtype)
  )
  return [aval.update(shape=o.shape, dtype=o.dtype, weak_type=False) for o in outputs]


def _top_k_by_chunks_lowering(
  ctx: Any, sequences: Any, *, k: int, descending: bool, last: bool, choice: platform.Choice
) -> Any:
  # Every axis split over mesh devices is split in a number of parts that divides both the axis length and
  # the device count, so in this many chunks no chunk straddles two devices.
  # A symbolic length (jax.export) is not chunked: such a program is not split over devices by XLA's partitioner.
  length, devices = ctx.avals_in[0].shape[-1], shardings.program_devices(ctx)
  chunks = 1 if devices == 1 or symbolic.is_symbolic(length) else math.gcd(length, devices)
  if chunks == 1:
    select = functools.partial(local_top_k, k=k, descending=descending, last=last)
  else:
    select = functools.partial(
      _chunked_top_k, k=k, descending=descending, last=last, chunks=chunks, mesh=_chunk_mesh(ctx, chunks)
    )
  # Lowered under the choice the call was traced with (a program may be lowered after the call's block ended).
  return mlir.lower_fun(shardings.with_choice(choice, select), multiple_results=True)(ctx, sequences)


def _chunk_mesh(ctx: Any, chunks: int) -> jax.sharding.AbstractMesh:
  """The program's devices in their order, as ``chunks`` groups: the ``c``-th holds the ``c``-th chunk.

  Chunk ``c`` of a sequence split over every device lies on the ``c``-th, so each device selects from
  what it holds. Where the split differs (the sequence over some of the devices only), XLA first moves
  the chunks to where this mesh puts them: the same result, more traffic.
  """
  devices = shardings.program_devices(ctx)
  auto = jax.sharding.AxisType.Auto
  return jax.sharding.AbstractMesh((chunks, devices // chunks), ("chunks", "rest"), axis_types=(auto, auto))


mlir.register_lowering(_top_k_by_chunks_p, _top_k_by_chunks_lowering)


def _automatic(sequences: jax.Array, k: int, descending: bool, last: bool) -> Selected:
  """The selection on automatic mesh axes: by custom_partitioning's rule where XLA can call it, else by chunks.

  XLA runs custom_partitioning's Python rule on CPU (JAX registers it with its own XLA) and on PJRT
  plugins that implement the custom-partitioner extension (CUDA and ROCm; libtpu does not).
  """

  def by_rule(x: jax.Array) -> Selected:
    return _partitioned_top_k(x, k, descending, last, dtypes.x64_enabled(), platform.current())

  def by_chunks(x: jax.Array) -> Selected:
    values, indices = _top_k_by_chunks_p.bind(x, k=k, descending=descending, last=last, choice=platform.current())
    return values, indices

  def by_keys(x: jax.Array) -> Selected:
    """TPUs: XLA partitions its own TopK of a matrix (:mod:`.strategies.tpu_kernel`'s keys), else the chunks."""
    case = Case.of(x, k, descending)
    whole = not last and x.ndim == 2 and dispatch.index_dtype(case.n) == jnp.int32
    if whole and dispatch.strategy("tpu", case).name == _XLA_TOP_K:
      return local_top_k(x, k, descending)
    return by_chunks(x)

  # ROCm and any other platform take the chunks too: they need no partitioning rule.
  values, indices = platform.branch(sequences, cpu=by_rule, cuda=by_rule, tpu=by_keys, default=by_chunks)
  return values, indices


def _dispatch(sequences: jax.Array, k: int, descending: bool, last: bool) -> Selected:
  if jax.sharding.get_abstract_mesh().manual_axes:
    # Inside shard_map, the caller already controls what each device holds.
    return local_top_k(sequences, k, descending, last)
  explicit = shardings.explicit_spec(sequences)
  if explicit is None:
    return _automatic(sequences, k, descending, last)
  mesh, spec = explicit
  axis_names = shardings.names(spec[-1])
  if axis_names:
    body = functools.partial(
      _per_shard_top_k, k=k, descending=descending, last=last, names=axis_names, length=sequences.shape[-1]
    )
  else:
    # No device splits a sequence: each selects its own rows. (Not left to XLA: a strategy that is a kernel
    # call, a Pallas one, cannot take arrays whose type says they are split.)
    body = functools.partial(local_top_k, k=k, descending=descending, last=last)
  out_spec = PartitionSpec(*spec[:-1], None)
  mapped = jax.shard_map(
    body, mesh=mesh, in_specs=PartitionSpec(*spec), out_specs=(out_spec, out_spec), check_vma=False
  )
  return mapped(sequences)


@functools.cache
def _batched_selector(k: int, descending: bool, last: bool) -> Callable[[jax.Array], Selected]:
  """The selector for one ``(k, descending, last)``, with a vmap rule: a batch is one more leading axis."""

  @jax.custom_batching.custom_vmap
  def select(sequences: jax.Array) -> Selected:
    return _dispatch(sequences, k, descending, last)

  @select.def_vmap
  def _rule(axis_size: int, in_batched: list[bool], sequences: jax.Array) -> Any:
    del axis_size, in_batched
    return select(sequences), (True, True)

  return select


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3))
def top_k_last_axis(sequences: jax.Array, k: int, descending: bool, last: bool = False) -> Selected:
  """Values and int32 indices of the ``k`` first elements along the last axis, sharded or not.

  ``last`` (with ``k == 1``) breaks ties by the highest index instead of the lowest. 4- and 2-bit integers
  are selected as 8-bit ones (the same order, values and indices): XLA:CPU aborts the process on some
  partitioned programs of 2-bit integers.
  """
  if dtypes.is_float(sequences.dtype):
    return _batched_selector(k, descending, last)(sequences)
  values, indices = _batched_selector(k, descending, last)(value_bits.to_bits(sequences))
  return value_bits.from_bits(values, sequences.dtype), indices


@top_k_last_axis.defjvp
def _top_k_jvp(k: int, descending: bool, last: bool, primals: Any, tangents: Any) -> Any:
  (sequences,), (tangent,) = primals, tangents
  values, indices = top_k_last_axis(sequences, k, descending, last)
  pick = index_math.take_along_last_axis
  if shardings.explicit_spec(tangent) is not None:
    # On explicit axes a gather along a sharded axis needs its output sharding named: the values'.
    pick = jax.sharding.auto_axes(pick, out_sharding=jax.typeof(values).sharding)
  value_tangent = pick(tangent, indices)
  return (values, indices), (value_tangent, np.zeros(indices.shape, jax.dtypes.float0))
