r"""CUDA: an exact top-k that reads every row once, in a Pallas kernel for Triton (1 or 2 launches).

**What it computes.** For every row of ``n`` elements and a static ``k <= 16``: the ``k`` first elements in
dmljax's order, values bit-exact and int32 indices. Types of 8 to 32 bits (:func:`handles`; every float8
type included; 4-bit types, which cannot be loaded as stored bytes, are left to the table's next rows).

**Why it is exact.** Inside the kernel each element becomes its int32 rank key (:func:`kernel_key`, that is
:func:`rank_keys.key_of_bits`: bit arithmetic on the loaded values, no float comparison anywhere, so no
flush-to-zero or NaN comparison can change it): -0.0 and +0.0 both 0, subnormals kept apart from zero,
every NaN one key above the largest non-NaN (whatever the type's layout: types without infinities, the
``fnuz`` types whose NaN is -0.0's pattern, float8_e8m0fnu without a sign); integers as themselves
(``uint32`` with its top bit flipped); the smallest first is the key's bitwise not.
Elements are then compared as pairs ``(key, index)``: a larger key first, and of equal keys the lower
index (:func:`_beats`). That is a strict total order, so the selection is unique and no step depends on
how a reduction combines.

**How.** A grid of ``(rows, segments)`` programs; ``segments`` (a power of two) is the fewest that give
at least :data:`MIN_PROGRAMS` programs while every segment keeps :data:`MIN_SEGMENT_BLOCKS` blocks
(:func:`layout`). A program walks its segment in blocks of :data:`BLOCK_BYTES` (one 16-byte vector load a
thread), loading the next block before it looks at the current one (two blocks in flight; masked loads
past the row's end), and keeps its ``k`` best pairs so far, sorted, as scalars. Every block costs, per
element, the key and a maximum: 1 operation for int32 largest first (the maximum), up to 7 for floats (6
for the key), plus, per block, the load, the loop and a cross-warp reduction. In the SASS that ptxas makes
of Triton's sm_90 code for ``k = 8`` that plain pass is 67 instructions a thread per float32 block of 512
(4 elements a thread: about 17 an element) and 107 per bfloat16 block of 1024 (about 13), with 64 and 72
registers and no spills (94 for float32 ``k = 16``).

Only where the block's largest key beats the ``k``-th pair kept (blocks come in index order, so an equal
key never does unless a slot is still empty) does a merge run (``lax.cond``): the elements that beat the
``k``-th are marked (6 operations an element) and, as long as the best marked one beats the ``k``-th, it
is inserted into the sorted scalars (its value loaded from the row, a cached read) and unmarked. Finding
the best marked pair is two block reductions (the largest key, then its lowest index), 6 operations an
element, and unmarking 2. In a segment of ``m`` blocks of random data, block ``i`` (from 0) merges with a
probability of about ``1 - (i / (i + 1)) ** k`` and inserts about ``k / i`` pairs (the first block ``k``):
for float32, ``k = 8`` and 32 blocks of 512, some 16 merging blocks and 40 insertions, that is
``(16 * 12 + 40 * 8) / 32``, about 16 operations an element on top of the plain pass. Rows whose large
elements come late (ascending rows) merge in every block and cost more; rows of many ties (small integer
types) hardly merge after their first blocks. The roofline of ``benchmarks/compiled`` counts bytes, not
operations: only a GPU can tell how close to the memory bound this runs.

With one segment a row's program writes the values and indices itself: one launch. Otherwise every
program writes its ``k`` pairs and their values' bits (12 bytes each), and a second kernel, one program a
row, merges the ``segments * k`` candidates with ``k`` rounds of (largest key, lowest index) and writes
the outputs: two launches. Either way the input is read from memory once (the merge reads only the
candidates), so no ``KERNEL_READ_PASSES`` entry is needed.

**Export.** ``jax.export`` does not serialize Triton calls (``__gpu$xla.gpu.triton`` is not among its
stable custom calls). The kernel sits behind a primitive whose lowering rule asks whether the program is
being exported (``lowering_parameters.for_export``); an exported program gets the selection the dispatch
table hands this strategy (:func:`selection`: the CUDA table's next row, XLA's TopK kernel on kernel keys,
the chunked sorts, or the key sort), exact too. This module does not know the table.
So do GPUs older than Ampere (XLA compiles no Triton call for them) and other platforms than CUDA, unless
Pallas interpret mode is chosen (``platform.choosing(interpret=True)``), which runs the kernels anywhere
(what the tests do on CPU).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import mlir

from dmljax._src import dtypes, platform, rank_keys
from dmljax._src.strategies import row_kernel
from dmljax._src.strategies.case import Case, Select, Selected

NAME = "one_pass"
# The Pallas kernels' names, as the compiled program's Triton calls carry them.
KERNEL_NAME = "dmljax_top_k_one_pass"
MERGE_NAME = "dmljax_top_k_one_pass_merge"
MAX_K = 16
# Shorter rows keep the table's later rows (a sort of the keys, as XLA does for native top_k of short rows).
MIN_ROW = 1024
# Positions are int32 and a segment's blocks may run past the row's end by less than a block each.
MAX_ROW = 1 << 30
# Bytes of one loop step: one 16-byte vector load per thread of a program's WARPS warps (a block of 512 float32,
# 1024 16-bit or 2048 8-bit elements, powers of two as Triton's blocks must be).
BLOCK_BYTES = 2048
WARPS = 4
# Programs that keep an H100's 132 SMs busy twice over; a segment keeps at least this many blocks.
MIN_PROGRAMS = 2 * 132
MIN_SEGMENT_BLOCKS = 4
# XLA compiles Triton calls for Ampere and newer only (major compute capability).
MIN_COMPUTE_CAPABILITY = 8

_INT_MIN = np.int32(np.iinfo(np.int32).min)
# The index of an empty slot, above every real index (a real element with the smallest key still beats it).
_NO_INDEX = np.int32(np.iinfo(np.int32).max)


def handles(case: Case) -> bool:
  """Types of 8 to 32 bits (every float8 type included; 4- and 2-bit types are not loadable as stored bits),
  ``k <= 16``, rows the kernel's int32 positions can walk."""
  width = rank_keys.layout(case.dtype).width
  return 8 <= width <= 32 and case.k <= MAX_K and case.n <= MAX_ROW


def pays(case: Case) -> bool:
  return case.n >= MIN_ROW


# Layout -------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Layout:
  """How a row is walked: ``segments`` programs a row, each over ``blocks`` blocks of ``block`` elements."""

  block: int
  blocks: int
  segments: int


def _bit_floor(value: int) -> int:
  return 1 << (max(value, 1).bit_length() - 1)


def _bit_ceil(value: int) -> int:
  return 1 << max(value - 1, 0).bit_length()


def block_for(dtype: np.dtype) -> int:
  """The elements of one block of ``dtype``: :data:`BLOCK_BYTES` of them."""
  return BLOCK_BYTES // np.dtype(dtype).itemsize


def layout(rows: int, n: int, block: int) -> Layout:
  """The fewest segments (a power of two) that give :data:`MIN_PROGRAMS` programs, each of enough blocks."""
  block = min(block, _bit_ceil(n))
  wanted = _bit_ceil(-(-MIN_PROGRAMS // max(rows, 1)))
  segments = min(wanted, _bit_floor(n // (MIN_SEGMENT_BLOCKS * block)))
  return Layout(block, -(-n // (segments * block)), segments)


# Keys and bits ------------------------------------------------------------------------------------------------


def stored_dtype(dtype: np.dtype) -> np.dtype:
  """What the kernels read and write: a float's bits as the signed integer of its width, an integer as itself.

  Integers only, so that nothing inside the kernels is a float operation: in interpret mode XLA:CPU moves
  16-bit floats through float32, which would drop NaN payloads.
  """
  return np.dtype(f"int{dtype.itemsize * 8}") if dtypes.is_float(dtype) else dtype


def _stored(x: jax.Array) -> jax.Array:
  return lax.bitcast_convert_type(x, stored_dtype(np.dtype(x.dtype)))


def _key_of_stored(stored: jax.Array, dtype: np.dtype, largest_first: bool) -> jax.Array:
  key = rank_keys.key_of_bits(stored, dtype)
  return key if largest_first else ~key


def kernel_key(x: jax.Array, largest_first: bool) -> jax.Array:
  """The int32 rank key of ``x`` (its bitwise not for the smallest first), from the stored bits as the kernel sees them.

  :func:`rank_keys.key_of_bits`: integer operations on the stored bits only (:func:`stored_dtype`), which Triton
  and XLA both lower.
  """
  return _key_of_stored(_stored(x), np.dtype(x.dtype), largest_first)


def _to_bits(stored: jax.Array) -> jax.Array:
  """A stored element in an int32 (sign-extended or zero-extended): :func:`_from_bits` undoes it."""
  if stored.dtype == np.uint32:
    return lax.bitcast_convert_type(stored, np.int32)
  return stored.astype(np.int32)


def _from_bits(bits: jax.Array, stored: np.dtype) -> jax.Array:
  if stored == np.uint32:
    return lax.bitcast_convert_type(bits, np.uint32)
  return bits.astype(stored)


def _last_stored(dtype: np.dtype, largest_first: bool) -> np.ndarray:
  """A stored value that ranks last in the direction: what masked loads past the row's end read."""
  bits = int(rank_keys.extreme_bits(dtype, largest=not largest_first))
  width = dtype.itemsize * 8
  return np.array(bits & ((1 << width) - 1), np.dtype(f"uint{width}")).view(stored_dtype(dtype))


def _beats(key: Any, index: Any, other_key: Any, other_index: Any) -> Any:
  """``(key, index)`` comes before ``(other_key, other_index)``: a larger key, or an equal one at a lower index."""
  return (key > other_key) | ((key == other_key) & (index < other_index))


# The kernels --------------------------------------------------------------------------------------------------


class _Top(NamedTuple):
  """A program's ``k`` best pairs so far and their values' bits, best first, as scalars (empty slots last)."""

  keys: tuple[jax.Array, ...]
  indices: tuple[jax.Array, ...]
  bits: tuple[jax.Array, ...]


def _empty_top(k: int) -> _Top:
  return _Top((jnp.int32(_INT_MIN),) * k, (jnp.int32(_NO_INDEX),) * k, (jnp.int32(0),) * k)


def _insert(top: _Top, key: jax.Array, index: jax.Array, bits: jax.Array) -> _Top:
  """``top`` with ``(key, index)`` in its place and the last pair dropped (the pair beats the last one)."""
  above = [_beats(k_j, i_j, key, index) for k_j, i_j in zip(top.keys, top.indices, strict=True)]

  def shifted(old: tuple[jax.Array, ...], new: jax.Array) -> tuple[jax.Array, ...]:
    out = [jnp.where(above[0], old[0], new)]
    for j in range(1, len(old)):
      out.append(jnp.where(above[j], old[j], jnp.where(above[j - 1], new, old[j - 1])))
    return tuple(out)

  return _Top(shifted(top.keys, key), shifted(top.indices, index), shifted(top.bits, bits))


def _best(key: jax.Array, position: jax.Array, marked: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The first marked pair: the largest marked key and its lowest position (``_NO_INDEX`` if none is marked)."""
  best_key = jnp.max(jnp.where(marked, key, _INT_MIN))
  return best_key, jnp.min(jnp.where(marked & (key == best_key), position, _NO_INDEX))


def _take_block(x_ref: Any, key: jax.Array, position: jax.Array, valid: jax.Array, top: _Top) -> _Top:
  """``top`` with the block's elements that belong in it, inserted best first."""
  marked = valid & _beats(key, position, top.keys[-1], top.indices[-1])

  def more(carry: tuple[Any, ...]) -> jax.Array:
    _, best_key, best_index, top = carry
    return (best_index != _NO_INDEX) & _beats(best_key, best_index, top.keys[-1], top.indices[-1])

  def insert(carry: tuple[Any, ...]) -> tuple[Any, ...]:
    marked, best_key, best_index, top = carry
    top = _insert(top, best_key, best_index, _to_bits(x_ref[best_index]))
    marked = marked & (position != best_index)
    return (marked, *_best(key, position, marked), top)

  return lax.while_loop(more, insert, (marked, *_best(key, position, marked), top))[-1]


def _load(x_ref: Any, start: jax.Array, size: int, mask: jax.Array, other: Any) -> jax.Array:
  from jax.experimental import pallas as pl  # Pallas loads only when a kernel is traced
  from jax.experimental.pallas import triton as pltriton

  return pltriton.load(x_ref.at[pl.ds(start, size)], mask=mask, other=other)


def _segment_kernel(
  x_ref: Any, *out_refs: Any, dtype: np.dtype, k: int, largest_first: bool, n: int, lay: Layout
) -> None:
  """One segment of a row of ``dtype`` (stored): its ``k`` best pairs, as candidates or (one segment) the outputs."""
  from jax.experimental import pallas as pl  # Pallas loads only when a kernel is traced

  first = pl.program_id(1) * np.int32(lay.blocks * lay.block)
  end = jnp.minimum(first + np.int32(lay.blocks * lay.block), np.int32(n))
  lanes = lax.broadcasted_iota(np.int32, (lay.block,), 0)
  last = _last_stored(dtype, largest_first)

  def positions(b: jax.Array) -> tuple[jax.Array, jax.Array]:
    start = first + b * np.int32(lay.block)
    return start, start + lanes

  def load(b: jax.Array) -> jax.Array:
    start, position = positions(b)
    return _load(x_ref, start, lay.block, position < end, last)

  def step(b: jax.Array, carry: tuple[_Top, jax.Array]) -> tuple[_Top, jax.Array]:
    top, x = carry
    following = load(b + 1)  # issued before this block is used: two blocks in flight
    start, position = positions(b)
    key = _key_of_stored(x, dtype, largest_first)
    best = jnp.max(key)
    # Blocks come in index order: an equal key beats the k-th pair only if that slot is still empty.
    hit = (best > top.keys[-1]) | ((best == top.keys[-1]) & (top.indices[-1] > start))
    take = functools.partial(_take_block, x_ref, key, position, position < end)
    return lax.cond(hit, take, lambda top: top, top), following

  top, _ = lax.fori_loop(np.int32(0), np.int32(lay.blocks), step, (_empty_top(k), load(jnp.int32(0))))
  if lay.segments == 1:
    values_ref, indices_ref = out_refs
    for j in range(k):
      values_ref[j] = _from_bits(top.bits[j], np.dtype(values_ref.dtype))
      indices_ref[j] = top.indices[j]
    return
  keys_ref, indices_ref, bits_ref = out_refs
  for j in range(_bit_ceil(k)):
    keys_ref[j] = top.keys[j] if j < k else jnp.int32(_INT_MIN)
    indices_ref[j] = top.indices[j] if j < k else jnp.int32(_NO_INDEX)
    bits_ref[j] = top.bits[j] if j < k else jnp.int32(0)


def _merge_kernel(keys_ref: Any, indices_ref: Any, bits_ref: Any, values_out: Any, indices_out: Any, *, k: int) -> None:
  """One row: the ``k`` first of its segments' candidates, by ``k`` rounds of (largest key, lowest index)."""
  bits = bits_ref[...]
  stored = np.dtype(values_out.dtype)

  def round_(j: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    keys, indices = carry
    best_key = jnp.max(keys)
    best_index = jnp.min(jnp.where(keys == best_key, indices, _NO_INDEX))
    taken = indices == best_index  # a row's candidates have distinct indices
    values_out[j] = _from_bits(jnp.sum(jnp.where(taken, bits, np.int32(0)), dtype=np.int32), stored)
    indices_out[j] = best_index
    return jnp.where(taken, _INT_MIN, keys), jnp.where(taken, _NO_INDEX, indices)

  lax.fori_loop(np.int32(0), np.int32(k), round_, (keys_ref[...], indices_ref[...]))


def kernel_top_k(
  rows: jax.Array, k: int, largest_first: bool, *, interpret: bool, block: int | None = None
) -> Selected:
  """The ``k`` first values and int32 indices of every row of the 2-D ``rows``: the Pallas kernel(s).

  ``interpret`` runs them in Pallas interpret mode (any platform); otherwise they compile for Triton (CUDA).
  ``block``: elements a loop step (a power of two; :func:`block_for` of the type where not given).
  """
  from jax.experimental import pallas as pl  # Pallas loads only when a kernel is traced
  from jax.experimental.pallas import triton as pltriton

  count, n = rows.shape
  dtype = np.dtype(rows.dtype)
  lay = layout(count, n, block or block_for(dtype))
  params = pltriton.CompilerParams(num_warps=WARPS)
  kernel = functools.partial(_segment_kernel, dtype=dtype, k=k, largest_first=largest_first, n=n, lay=lay)
  row_spec = pl.BlockSpec((None, n), lambda r, s: (r, 0))
  stored = _stored(rows)
  outputs = (jax.ShapeDtypeStruct((count, k), stored.dtype), jax.ShapeDtypeStruct((count, k), np.int32))
  if lay.segments == 1:
    values, indices = pl.pallas_call(
      kernel,
      out_shape=outputs,
      grid=(count, 1),
      in_specs=[row_spec],
      out_specs=(pl.BlockSpec((None, k), lambda r, s: (r, 0)),) * 2,
      interpret=interpret,
      compiler_params=params,
      name=KERNEL_NAME,
    )(stored)
    return lax.bitcast_convert_type(values, dtype), indices
  width = _bit_ceil(k)
  candidates = pl.pallas_call(
    kernel,
    out_shape=(jax.ShapeDtypeStruct((count, lay.segments * width), np.int32),) * 3,
    grid=(count, lay.segments),
    in_specs=[row_spec],
    out_specs=(pl.BlockSpec((None, width), lambda r, s: (r, s)),) * 3,
    interpret=interpret,
    compiler_params=params,
    name=KERNEL_NAME,
  )(stored)
  values, indices = pl.pallas_call(
    functools.partial(_merge_kernel, k=k),
    out_shape=outputs,
    grid=(count,),
    in_specs=[pl.BlockSpec((None, lay.segments * width), lambda r: (r, 0))] * 3,
    out_specs=(pl.BlockSpec((None, k), lambda r: (r, 0)),) * 2,
    interpret=interpret,
    compiler_params=pltriton.CompilerParams(num_warps=1),
    name=MERGE_NAME,
  )(*candidates)
  return lax.bitcast_convert_type(values, dtype), indices


# The primitive: the kernel under jit, XLA's operations when exported -----------------------------------------


def _xla_top_k(rows: jax.Array, k: int, largest_first: bool, exported: Select) -> Selected:
  """The selection an exported program holds: ``exported``, which the dispatch table gives (its next row)."""
  return exported(rows, Case(np.dtype(rows.dtype), tuple(rows.shape), k, largest_first))


_one_pass_p = row_kernel.primitive("dmljax_one_pass_top_k")


def _runs_triton(ctx: Any) -> bool:
  """Whether XLA compiles Triton calls for the program's GPUs: compute capability 8.0 (Ampere) or newer.

  Older GPUs (a T4, a V100) fail the compile (XLA: "Triton support is only enabled for Ampere GPUs"), so
  they get the XLA selection. Devices that give no compute capability (no GPU client, as when lowering for
  CUDA on another machine) are taken to be new enough, as Pallas itself takes them.
  """
  backend = getattr(ctx.module_context, "backend", None)
  devices = backend.devices() if backend is not None and len(ctx.module_context.platforms) == 1 else []
  capabilities = [getattr(device, "compute_capability", None) for device in devices]
  return all(int(str(c).split(".")[0]) >= MIN_COMPUTE_CAPABILITY for c in capabilities if c)


def _lowering(
  ctx: Any, rows: Any, *, k: int, largest_first: bool, interpret: bool, exported: Select, compiled: bool
) -> Any:
  if not row_kernel.exporting(ctx) and (interpret or (compiled and _runs_triton(ctx))):
    fn = functools.partial(kernel_top_k, k=k, largest_first=largest_first, interpret=interpret)
  else:
    fn = functools.partial(_xla_top_k, k=k, largest_first=largest_first, exported=exported)
  return mlir.lower_fun(fn, multiple_results=True)(ctx, rows)


mlir.register_lowering(_one_pass_p, functools.partial(_lowering, compiled=False))
mlir.register_lowering(_one_pass_p, functools.partial(_lowering, compiled=True), platform="cuda")


def selection(exported: Select) -> Select:
  """The strategy: the kernel on every row of ``x`` (any leading axes), in interpret mode where the choice says
  so, and ``exported`` (the selection the dispatch table picks after this one) where no Triton call can run:
  exported programs, GPUs older than Ampere, other platforms."""

  def select(x: jax.Array, case: Case) -> Selected:
    return row_kernel.select_rows(_one_pass_p, x, case, interpret=platform.current().interpret, exported=exported)

  return select
