r"""CUDA: an exact top-k that reads every row once, in a Pallas kernel for Mosaic GPU (1 or 2 launches).

**What it computes.** For every row of ``n`` elements and a static ``k <= 16``: the ``k`` first elements in
dmljax's order, values bit-exact and int32 indices. Types of 8 to 32 bits (:func:`handles`; every float8
type included; 4-bit types, which cannot be loaded as stored bytes, are left to the table's next rows).

**Which backend.** The kernels are Pallas code with no backend-specific operation; :func:`_launch` compiles them
through Pallas's Mosaic GPU backend from jax 0.11 on (``plgpu.kernel``, one warpgroup of 128 threads a program),
where Pallas's Triton backend is deprecated and warns at every compile, and through Triton before (jax 0.10,
whose Mosaic GPU lowering rejects them) (:func:`cuda_backend`). Both need a GPU of compute capability 8.0 or
newer (Ampere); older ones get the XLA selection (below).

**Why it is exact.** Inside the kernel each element becomes its int32 rank key (:func:`kernel_key`, that is
:func:`rank_keys.key_of_bits`: bit arithmetic on the loaded bits, no float comparison anywhere, so no
flush-to-zero or NaN comparison can change it): -0.0 and +0.0 both 0, subnormals kept apart from zero,
every NaN one key above the largest non-NaN (whatever the type's layout: types without infinities, the
``fnuz`` types whose NaN is -0.0's pattern, float8_e8m0fnu without a sign); integers as themselves
(``uint32`` with its top bit flipped); the smallest first is the key's bitwise not.
Elements are then compared as pairs ``(key, index)``: a larger key first, and of equal keys the lower
index (:func:`_beats`). That is a strict total order, so the selection is unique and no step depends on
how a reduction combines.

**How.** A grid of ``(segments, rows)`` programs; ``segments`` (a power of two) is the fewest that give
at least :data:`MIN_PROGRAMS` programs while every segment keeps :data:`MIN_SEGMENT_BLOCKS` blocks
(:func:`layout`). A program walks its segment in blocks of :data:`BLOCK_BYTES` (at most the row), loading the
next block before it looks at the current one (two blocks in flight), and keeps its ``k`` best pairs so far,
sorted, as scalars. Every load is a whole block inside the row: a block that would run past the row's end is
moved back to end at it, and the elements it holds that are not its own are masked out (no masked loads, which
Mosaic GPU does not have). Every block costs, per element, the key, the mask and a maximum, plus, per block,
the load, the loop and a cross-warp reduction. In the PTX that Mosaic GPU makes for sm_90a (dumped with
``MOSAIC_GPU_DUMP_TO`` while compiling for the H100 target description; ptxas compiled it, but its SASS needs
``nvdisasm``, which the ``aot`` extra does not install), that plain pass for ``k = 8`` is 77 instructions a
thread per float32 block of 512 (4 elements a thread: about 19 an element), 53 for int32 and 143 per bfloat16
block of 1024 (about 18), with 72, 72 and 92 registers and no spills (113 for float32 ``k = 16``). Mosaic
GPU's strided layout loads 8 bytes a thread at a time where the compiler can prove the alignment (rows whose
bytes are a multiple of 8), narrower loads otherwise.

Only where the block's largest key beats the ``k``-th pair kept (blocks come in index order, so an equal
key never does unless a slot is still empty) does a merge run (``lax.cond``): as long as the block's first
element after the one inserted last beats the ``k``-th pair, it is inserted into the sorted scalars (its value
loaded from the row, a cached read). Finding that element is two block reductions (the largest key among the
later ones, then its lowest index), about 10 operations an element a round. In a segment of ``m`` blocks of random
data, block ``i`` (from 0) merges with a probability of about ``1 - (i / (i + 1)) ** k`` and inserts about
``k / i`` pairs (the first block ``k``): for float32, ``k = 8`` and 32 blocks of 512, some 16 merging blocks and
40 insertions (each merge one round more than it inserts), that is ``(16 + 40) * 10 / 32``, about 18 operations
an element on top of the plain pass. Rows whose large elements come late (ascending rows) merge in every block and
cost more; rows of many ties (small integer types) hardly merge after their first blocks. The roofline of
``benchmarks/compiled`` counts bytes, not operations: only a GPU can tell how close to the memory bound this runs.

With one segment a row's program writes the values and indices itself: one launch. Otherwise every
program writes its ``k`` pairs and their values' bits (12 bytes each, in :func:`candidate_width` slots, so that
a row's candidates fill whole warpgroups), and a second kernel, one program a row, merges the candidates with
``k`` rounds of (largest key, lowest index) after the pair taken last and writes the outputs: two launches.
Either way the input is read from memory once (the merge reads only the candidates), so no
``KERNEL_READ_PASSES`` entry is needed.

**Export.** The kernel sits behind a primitive whose lowering rule asks whether the program is being exported
(``lowering_parameters.for_export``); an exported program gets the selection the dispatch table hands this
strategy (:func:`selection`: the CUDA table's next row, XLA's TopK kernel on kernel keys, the chunked sorts, or
the key sort), exact too. ``jax.export`` does not serialize Triton calls, and although it does keep Mosaic GPU
calls, an exported program may run on any GPU, and the Mosaic module is built for the architecture of the
machine that lowers it (sm_90 where it has no GPU). This module does not know the table.
So do GPUs older than Ampere, rows shorter than a warpgroup (:data:`MIN_COMPILED_ROW`, only where the strategy
is chosen by name) and other platforms than CUDA, unless Pallas interpret mode is chosen
(``platform.choosing(interpret=True)``), which runs the kernels anywhere (what the tests do on CPU; they also run
the kernels in Mosaic GPU's own interpreter, :func:`_launch`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import mlir

from dmljax._src import platform, rank_keys, shardings
from dmljax._src.strategies import row_kernel
from dmljax._src.strategies.case import Case, Select, Selected

NAME = "one_pass"
# The Pallas kernels' names, as the compiled program's Pallas calls carry them.
KERNEL_NAME = "dmljax_top_k_one_pass"
MERGE_NAME = "dmljax_top_k_one_pass_merge"
MAX_K = 16
# Shorter rows keep the table's later rows (a sort of the keys, as XLA does for native top_k of short rows).
MIN_ROW = 1024
# Positions are int32, and a segment's end may lie past the row's end by less than a segment.
MAX_ROW = 1 << 30
# Bytes of one loop step: 16 bytes for each of a program's 128 threads (a Mosaic GPU warpgroup; WARPS warps under
# Triton): a block of 512 float32, 1024 16-bit or 2048 8-bit elements, powers of two as both backends' blocks must be.
BLOCK_BYTES = 2048
WARPS = 4
# Programs that keep an H100's 132 SMs busy twice over; a segment keeps at least this many blocks.
MIN_PROGRAMS = 2 * 132
MIN_SEGMENT_BLOCKS = 4
# XLA compiles Triton calls for Ampere and newer only, and Mosaic GPU is for Ampere and newer (major compute
# capability).
MIN_COMPUTE_CAPABILITY = 8
# The shortest row the compiled kernels take: one element for each of a warpgroup's 128 threads (shorter rows, only
# where the strategy is chosen by name, get the table's next row).
MIN_COMPILED_ROW = 128

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
  """The fewest segments (a power of two) that give :data:`MIN_PROGRAMS` programs, each of enough blocks; blocks
  of at most the row (a power of two), so that every block's load lies inside it."""
  block = min(block, _bit_floor(n))
  wanted = _bit_ceil(-(-MIN_PROGRAMS // max(rows, 1)))
  segments = min(wanted, _bit_floor(n // (MIN_SEGMENT_BLOCKS * block)))
  return Layout(block, -(-n // (segments * block)), segments)


# Keys and bits ------------------------------------------------------------------------------------------------


def stored_dtype(dtype: np.dtype) -> np.dtype:
  """What the kernels read and write: every element's bits as the signed integer of its width.

  Integers only, so that nothing inside the kernels is a float operation (in interpret mode XLA:CPU moves
  16-bit floats through float32, which would drop NaN payloads), and signed ones, so that widening a stored
  element to int32 and back is a sign extension and a truncation on every backend (Mosaic GPU has no scalar
  bitcast between uint32 and int32).
  """
  return np.dtype(f"int{dtype.itemsize * 8}")


def _stored(x: jax.Array) -> jax.Array:
  return lax.bitcast_convert_type(x, stored_dtype(np.dtype(x.dtype)))


def _key_of_stored(stored: jax.Array, dtype: np.dtype, largest_first: bool) -> jax.Array:
  key = rank_keys.key_of_bits(stored, dtype)
  return key if largest_first else ~key


def kernel_key(x: jax.Array, largest_first: bool) -> jax.Array:
  """The int32 rank key of ``x`` (its bitwise not for the smallest first), from the stored bits as the kernel sees them.

  :func:`rank_keys.key_of_bits`: integer operations on the stored bits only (:func:`stored_dtype`), which Pallas's
  GPU backends and XLA all lower.
  """
  return _key_of_stored(_stored(x), np.dtype(x.dtype), largest_first)


def _to_bits(stored: jax.Array) -> jax.Array:
  """A stored element in an int32 (sign-extended): :func:`_from_bits` undoes it."""
  return stored.astype(np.int32)


def _from_bits(bits: jax.Array, stored: np.dtype) -> jax.Array:
  return bits.astype(stored)


def _beats(key: Any, index: Any, other_key: Any, other_index: Any) -> Any:
  """``(key, index)`` comes before ``(other_key, other_index)``: a larger key, or an equal one at a lower index."""
  return (key > other_key) | ((key == other_key) & (index < other_index))


def _first_after(key: jax.Array, index: jax.Array, eligible: Any, last: tuple[Any, Any]) -> tuple[Any, Any]:
  """The first eligible pair that comes after ``last`` (``(_INT_MIN, _NO_INDEX)`` if there is none): the largest
  such key, then its lowest index (two reductions)."""
  later = eligible & _beats(last[0], last[1], key, index)
  best_key = jnp.max(jnp.where(later, key, _INT_MIN))
  return best_key, jnp.min(jnp.where(later & (key == best_key), index, _NO_INDEX))


# Before every pair: where a search starts.
_BEFORE_ALL = (np.int32(np.iinfo(np.int32).max), np.int32(-1))


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


def _take_block(x_ref: Any, row: Any, key: jax.Array, position: jax.Array, valid: jax.Array, top: _Top) -> _Top:
  """``top`` with the block's elements that belong in it, inserted best first.

  Each round finds the block's first element after the one inserted last; the rounds end when it does not beat
  the ``k``-th pair kept (then no later one does).
  """

  def more(carry: tuple[Any, ...]) -> jax.Array:
    best_key, best_index, top = carry
    return (best_index != _NO_INDEX) & _beats(best_key, best_index, top.keys[-1], top.indices[-1])

  def insert(carry: tuple[Any, ...]) -> tuple[Any, ...]:
    best_key, best_index, top = carry
    top = _insert(top, best_key, best_index, _to_bits(x_ref[row, best_index]))
    return (*_first_after(key, position, valid, (best_key, best_index)), top)

  return lax.while_loop(more, insert, (*_first_after(key, position, valid, _BEFORE_ALL), top))[-1]


def _segment_kernel(
  x_ref: Any, *out_refs: Any, segment: Any, row: Any, dtype: np.dtype, k: int, largest_first: bool, lay: Layout
) -> None:
  """One segment of a row of ``dtype`` (stored): its ``k`` best pairs, as candidates or (one segment) the outputs.

  Every load is a whole block inside the row: the last blocks of a row are moved back to end at the row's end,
  and the elements a block holds besides its own are masked out (``valid``).
  """
  from jax.experimental import pallas as pl  # Pallas loads only when a kernel is traced

  n = x_ref.shape[1]
  span = np.int32(lay.blocks * lay.block)
  first = segment * span
  end = jnp.minimum(first + span, np.int32(n))
  lanes = lax.broadcasted_iota(np.int32, (lay.block,), 0)

  def load(b: jax.Array) -> tuple[jax.Array, jax.Array]:
    own = first + b * np.int32(lay.block)
    start = jnp.minimum(own, np.int32(n - lay.block))
    return own, x_ref[row, pl.ds(start, lay.block)]

  def step(b: jax.Array, carry: tuple[_Top, jax.Array]) -> tuple[_Top, jax.Array]:
    top, x = carry
    _, following = load(b + 1)  # issued before this block is used: two blocks in flight
    own = first + b * np.int32(lay.block)
    position = jnp.minimum(own, np.int32(n - lay.block)) + lanes
    valid = (position >= own) & (position < end)
    key = _key_of_stored(x, dtype, largest_first)
    best = jnp.max(jnp.where(valid, key, _INT_MIN))
    # Blocks come in index order: an equal key beats the k-th pair only if that slot is still empty.
    hit = (best > top.keys[-1]) | ((best == top.keys[-1]) & (top.indices[-1] > own))
    take = functools.partial(_take_block, x_ref, row, key, position, valid)
    return lax.cond(hit, take, lambda top: top, top), following

  top, _ = lax.fori_loop(np.int32(0), np.int32(lay.blocks), step, (_empty_top(k), load(jnp.int32(0))[1]))
  if lay.segments == 1:
    values_ref, indices_ref = out_refs
    for j in range(k):
      values_ref[row, j] = _from_bits(top.bits[j], np.dtype(values_ref.dtype))
      indices_ref[row, j] = top.indices[j]
    return
  keys_ref, indices_ref, bits_ref = out_refs
  width = keys_ref.shape[1] // lay.segments
  for j in range(width):
    slot = segment * np.int32(width) + np.int32(j)
    keys_ref[row, slot] = top.keys[j] if j < k else jnp.int32(_INT_MIN)
    indices_ref[row, slot] = top.indices[j] if j < k else jnp.int32(_NO_INDEX)
    bits_ref[row, slot] = top.bits[j] if j < k else jnp.int32(0)


def _merge_kernel(
  keys_ref: Any, indices_ref: Any, bits_ref: Any, values_out: Any, indices_out: Any, *, row: Any, k: int
) -> None:
  """One row: the ``k`` first of its segments' candidates, by ``k`` rounds of (largest key, lowest index) after
  the pair taken last."""
  keys, indices, bits = keys_ref[row], indices_ref[row], bits_ref[row]
  stored = np.dtype(values_out.dtype)

  def round_(j: jax.Array, last: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    best_key, best_index = _first_after(keys, indices, True, last)
    taken = indices == best_index  # a row's candidates have distinct indices
    values_out[row, j] = _from_bits(jnp.sum(jnp.where(taken, bits, np.int32(0)), dtype=np.int32), stored)
    indices_out[row, j] = best_index
    return best_key, best_index

  lax.fori_loop(np.int32(0), np.int32(k), round_, tuple(jnp.int32(v) for v in _BEFORE_ALL))


# The backends -------------------------------------------------------------------------------------------------

Backend = Literal["mosaic_gpu", "triton"]
# The jax release from which the CUDA kernels compile through Pallas's Mosaic GPU backend (its Triton backend is
# deprecated there); older releases compile them through Triton (jax 0.10's Mosaic GPU lowering rejects them).
MOSAIC_GPU_FROM = (0, 11)


def cuda_backend() -> Backend:
  """The Pallas backend the kernels compile through on this jax: ``mosaic_gpu`` from :data:`MOSAIC_GPU_FROM` on,
  ``triton`` before."""
  return "mosaic_gpu" if jax.__version_info__[:2] >= MOSAIC_GPU_FROM else "triton"


Interpret = bool | Literal["gpu"]


def _launch(
  kernel: Callable[..., None],
  args: tuple[jax.Array, ...],
  out_shape: tuple[jax.ShapeDtypeStruct, ...],
  grid: tuple[int, ...],
  *,
  interpret: Interpret,
  name: str,
  warps: int,
) -> Any:
  """``kernel(*input_refs, *output_refs, *program_ids)`` on a ``grid`` of programs, each given the whole arrays.

  Compiled (``interpret=False``) through :func:`cuda_backend`'s backend: Mosaic GPU runs one warpgroup a program
  (128 threads, whatever ``warps`` says), Triton ``warps`` warps. ``True``: Pallas interpret mode, XLA operations
  that run on any platform, under any transformation. ``"gpu"``: Mosaic GPU's own interpreter where that is the
  backend (it simulates the GPU's memories and threads through ordered host callbacks, so it runs under a plain
  ``jax.jit`` only), Pallas interpret mode before.
  """
  from jax.experimental import pallas as pl  # Pallas loads only when a kernel is traced

  if cuda_backend() == "mosaic_gpu" and interpret in (False, "gpu"):
    from jax.experimental.pallas import mosaic_gpu

    plgpu: Any = mosaic_gpu  # its API differs between jax releases (this one is from MOSAIC_GPU_FROM on)
    names = tuple(f"axis{i}" for i in range(len(grid)))

    def body(*refs: Any) -> None:
      kernel(*refs, *(lax.axis_index(axis) for axis in names))

    mode = plgpu.InterpretGPUParams() if interpret else None
    call = plgpu.kernel(body, out_type=out_shape, grid=grid, grid_names=names, kernel_name=name, interpret=mode)
    return call(*args)

  def program(*refs: Any) -> None:
    kernel(*refs, *(pl.program_id(axis) for axis in range(len(grid))))

  params: Any = None
  if not interpret:
    from jax.experimental.pallas import triton as pltriton

    params = pltriton.CompilerParams(num_warps=warps)
  call = pl.pallas_call(
    program, out_shape=out_shape, grid=grid, interpret=bool(interpret), compiler_params=params, name=name
  )
  return call(*args)


def candidate_width(k: int, segments: int) -> int:
  """Candidate slots a segment writes: ``k`` rounded up to a power of two, and enough that a row's candidates
  are a multiple of a warpgroup's 128 threads (the merge loads them as one array)."""
  return max(_bit_ceil(k), 128 // segments)


def kernel_top_k(
  rows: jax.Array, k: int, largest_first: bool, *, interpret: Interpret, block: int | None = None
) -> Selected:
  """The ``k`` first values and int32 indices of every row of the 2-D ``rows``: the Pallas kernel(s).

  They compile for CUDA through :func:`cuda_backend`'s backend, or run interpreted on any platform (``interpret``:
  ``True`` for Pallas interpret mode, ``"gpu"`` for Mosaic GPU's interpreter where that is the backend; see
  :func:`_launch`). ``block``: elements a loop step (a power of two; :func:`block_for` of the type where not
  given).
  """
  count, n = rows.shape
  dtype = np.dtype(rows.dtype)
  lay = layout(count, n, block or block_for(dtype))
  kernel = functools.partial(_segment_kernel, dtype=dtype, k=k, largest_first=largest_first, lay=lay)
  stored = _stored(rows)
  outputs = (shardings.struct_like((count, k), stored.dtype, rows), shardings.struct_like((count, k), np.int32, rows))

  def segments_kernel(*refs_and_ids: Any) -> None:
    *refs, segment, row = refs_and_ids
    kernel(*refs, segment=segment, row=row)

  if lay.segments == 1:
    values, indices = _launch(
      segments_kernel, (stored,), outputs, (1, count), interpret=interpret, name=KERNEL_NAME, warps=WARPS
    )
    return lax.bitcast_convert_type(values, dtype), indices
  width = candidate_width(k, lay.segments)
  candidates = _launch(
    segments_kernel,
    (stored,),
    (shardings.struct_like((count, lay.segments * width), np.int32, rows),) * 3,
    (lay.segments, count),
    interpret=interpret,
    name=KERNEL_NAME,
    warps=WARPS,
  )

  def merge_kernel(*refs_and_ids: Any) -> None:
    *refs, row = refs_and_ids
    _merge_kernel(*refs, row=row, k=k)

  values, indices = _launch(merge_kernel, candidates, outputs, (count,), interpret=interpret, name=MERGE_NAME, warps=1)
  return lax.bitcast_convert_type(values, dtype), indices


# The primitive: the kernel under jit, XLA's operations when exported -----------------------------------------


def _xla_top_k(rows: jax.Array, k: int, largest_first: bool, exported: Select) -> Selected:
  """The selection an exported program holds: ``exported``, which the dispatch table gives (its next row)."""
  return exported(rows, Case(np.dtype(rows.dtype), tuple(rows.shape), k, largest_first))


_one_pass_p = row_kernel.primitive("dmljax_one_pass_top_k")


def _gpus_run_it(ctx: Any) -> bool:
  """Whether the program's GPUs are of compute capability 8.0 (Ampere) or newer, as the kernels need.

  XLA compiles Triton calls for Ampere and newer only ("Triton support is only enabled for Ampere GPUs"), and
  Pallas's Mosaic GPU backend is for Ampere and newer: older GPUs (a T4, a V100) get the XLA selection.
  Devices that give no compute capability (no GPU client, as when lowering for CUDA on another machine) are
  taken to be new enough, as Pallas itself takes them.
  """
  backend = getattr(ctx.module_context, "backend", None)
  devices = backend.devices() if backend is not None and len(ctx.module_context.platforms) == 1 else []
  capabilities = [getattr(device, "compute_capability", None) for device in devices]
  return all(int(str(c).split(".")[0]) >= MIN_COMPUTE_CAPABILITY for c in capabilities if c)


def compiles(n: int) -> bool:
  """Whether the compiled kernels take rows of ``n``: a block a warpgroup loads (128 threads, an element or more
  each; Mosaic GPU's strided layout) fits in the row."""
  return n >= MIN_COMPILED_ROW


def _lowering(
  ctx: Any, rows: Any, *, k: int, largest_first: bool, interpret: bool, exported: Select, compiled: bool
) -> Any:
  runs = interpret or (compiled and _gpus_run_it(ctx) and compiles(ctx.avals_in[0].shape[1]))
  if not row_kernel.exporting(ctx) and runs:
    fn = functools.partial(kernel_top_k, k=k, largest_first=largest_first, interpret=interpret)
  else:
    fn = functools.partial(_xla_top_k, k=k, largest_first=largest_first, exported=exported)
  return mlir.lower_fun(fn, multiple_results=True)(ctx, rows)


mlir.register_lowering(_one_pass_p, functools.partial(_lowering, compiled=False))
mlir.register_lowering(_one_pass_p, functools.partial(_lowering, compiled=True), platform="cuda")


def selection(exported: Select) -> Select:
  """The strategy: the kernel on every row of ``x`` (any leading axes), in interpret mode where the choice says
  so, and ``exported`` (the selection the dispatch table picks after this one) where the compiled kernels do not
  run: exported programs, GPUs older than Ampere, rows shorter than :data:`MIN_COMPILED_ROW`, other platforms."""

  def select(x: jax.Array, case: Case) -> Selected:
    return row_kernel.select_rows(_one_pass_p, x, case, interpret=platform.current().interpret, exported=exported)

  return select
