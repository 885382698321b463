"""TPU: elements of a matrix at given columns, copied out of HBM by DMA (a Pallas Mosaic kernel).

A gather of a few elements per row (``jnp.take_along_axis``) compiles badly for TPUs: XLA's TPU
compiler copies the whole operand into another memory space first, or expands the gather into a loop
of one-element copies, or emits custom calls without a cost (``ConcatBitcast``,
``GatherScatterIndicesBitpacked``), after which it gives no time estimate at all. :func:`fetch`
copies only the memory that holds the wanted elements:

* The matrix stays in HBM (``pltpu.with_memory_space_constraint``; without it, XLA's memory-space
  assignment prefetches the whole matrix into VMEM for the kernel when another operation reads it).
* HBM holds a matrix in tiles of 8 rows by 128 columns (fewer rows for matrices of fewer rows), each
  row of a tile contiguous. Mosaic lets a DMA start at any row of a 32-bit matrix but only at a tile
  boundary of a 16-bit one (two rows share each 32-bit word), and only at a multiple of 128 columns. A
  wanted element costs one DMA of 1 x 128 elements (32-bit: 512 bytes) or 8 x 128 (16-bit: 2 KiB;
  every row, where a 16-bit matrix has fewer than 16).
* A grid step takes up to 1024 slots: it starts the DMA of every wanted slot, then waits for each; then
  it picks the element out of its copy as int32 bits (16-bit: the row by a sublane mask; then the lane:
  128 copies at a time, transposed and summed under a mask, which adds zeros to the one element), so
  no value is rounded or canonicalised.
* Where the column count is not a whole number of tiles, the columns of the last partial tile come
  from a small padded copy of them (every row, 128 columns); where a 16-bit matrix of 16 rows or more
  has a partial last tile of rows, those rows come from a padded copy of them (8 rows). No DMA reaches
  past the matrix (Mosaic does not allow a partial tile's width, and interpret mode clamps such a copy).
* XLA's cost estimate for the kernel is the bytes its DMAs move when every slot is wanted, plus the
  indices in and the bits out. The kernel also issues one DMA descriptor per wanted slot from the
  scalar unit, which no byte count shows: the estimate is a floor where many slots are wanted.

Mosaic takes no float16 operand: :func:`operand` gives float16 matrices as their bits in bfloat16.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import mlir

from dmljax._src import shardings

LANES = 128
SUBLANES = 8
# Slots per grid step at most: an (8, 128) int32 block of columns.
STEP = SUBLANES * LANES


def handles(dtype: np.dtype) -> bool:
  """16-bit and 32-bit element types."""
  return np.dtype(dtype).itemsize in (2, 4)


def operand(x: jax.Array) -> jax.Array:
  """``x`` as the kernel reads it: float16 as its bits in bfloat16, other types as they are.

  The float16 view is materialised once (an optimization barrier), so that the key pass reads it too;
  otherwise XLA reads ``x`` twice and reassembles the view for the kernel with ``ConcatBitcast``, which
  has no cost, and gives no estimate for the program.
  """
  if x.dtype != np.float16:
    return x
  return lax.optimization_barrier(lax.bitcast_convert_type(x, jnp.bfloat16))


def _rows_per_copy(dtype: np.dtype, rows: int) -> int:
  """The rows one DMA moves: 1 of a 32-bit matrix; of a 16-bit one a tile of 8, or all of them below 16 rows."""
  if np.dtype(dtype).itemsize == 4:
    return 1
  return rows if rows < 2 * SUBLANES else SUBLANES


def _pad_to(x: jax.Array, rows: int, columns: int) -> jax.Array:
  return jnp.pad(x, ((0, rows - x.shape[0]), (0, columns - x.shape[1])))


def fetch(x: jax.Array, columns: jax.Array, wanted: jax.Array, *, interpret: bool = False) -> jax.Array:
  """The bits of ``x[r, columns[r, j]]`` as int32 (16-bit types zero-extended) where ``wanted[r, j]``.

  Args:
    x: a ``(rows, n)`` matrix of a 16- or 32-bit type Mosaic takes (:func:`operand`).
    columns: int32 ``(rows, k)``, each in ``[0, n)``.
    wanted: bool ``(rows, k)``; elsewhere the result is unspecified.
    interpret: run the kernel in Pallas interpret mode on every platform. Otherwise TPUs compile it
      with Mosaic and other platforms interpret it (a program lowered for several platforms holds both).

  Returns:
    int32 ``(rows, k)``.
  """
  if interpret:
    return _fetch(x, columns, wanted, interpret=True)
  return _fetch_p.bind(x, columns, wanted)


def _fetch(x: jax.Array, columns: jax.Array, wanted: jax.Array, *, interpret: bool) -> jax.Array:
  """:func:`fetch` as a Pallas call."""
  from jax.experimental import pallas as pl  # Pallas loads only when a kernel is traced
  from jax.experimental.pallas import tpu as pltpu

  if interpret:
    # XLA:CPU moves bfloat16 through float32, which makes every NaN the canonical one; integers move as they are.
    x = lax.bitcast_convert_type(x, np.dtype(f"int{x.dtype.itemsize * 8}"))
  rows, n = x.shape
  k = columns.shape[-1]
  slots = rows * k
  if slots == 0:
    return jnp.zeros(columns.shape, np.int32)
  steps = -(-slots // STEP)
  block = STEP if steps > 1 else -(-slots // LANES) * LANES
  wanted_columns = jnp.where(wanted, columns, np.int32(-1)).reshape(-1)
  wanted_columns = jnp.pad(wanted_columns, (0, steps * block - slots), constant_values=-1).reshape(-1, LANES)

  copy_rows = _rows_per_copy(x.dtype, rows)
  full_rows = rows // copy_rows * copy_rows
  full_columns = n // LANES * LANES
  tails = []
  if full_columns < n:
    tails.append(_pad_to(x[:, full_columns:], -(-rows // copy_rows) * copy_rows, LANES))
  if full_rows == rows or not full_columns:  # no partial row tile, or every column is in the column tail
    full_rows = rows
  else:
    tails.append(_pad_to(x[full_rows:, :], copy_rows, n))
  kernel = functools.partial(
    _kernel, shape=(rows, n), k=k, block=block, copy_rows=copy_rows, full_rows=full_rows, full_columns=full_columns
  )
  matrices = [x, *tails]
  if not interpret:
    matrices = [pltpu.with_memory_space_constraint(m, pltpu.HBM) for m in matrices]
  index_block = (block // LANES, LANES)
  moved = slots * copy_rows * LANES * x.dtype.itemsize + 3 * wanted_columns.size * 4
  bits = pl.pallas_call(
    kernel,
    grid=(steps,),
    in_specs=[
      pl.BlockSpec(index_block, lambda g: (g, np.int32(0)), memory_space=pltpu.SMEM),
      pl.BlockSpec(index_block, lambda g: (g, np.int32(0))),
      *(pl.BlockSpec(memory_space=pltpu.HBM) for _ in matrices),
    ],
    out_specs=pl.BlockSpec(index_block, lambda g: (g, np.int32(0))),
    out_shape=shardings.struct_like(wanted_columns.shape, np.int32, x),
    scratch_shapes=[
      pltpu.VMEM((block, copy_rows, LANES), x.dtype),
      pltpu.VMEM((block if x.dtype.itemsize < 4 else SUBLANES, LANES), np.dtype(np.int32)),
      pltpu.SemaphoreType.DMA(()),
    ],
    compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
    cost_estimate=pl.CostEstimate(flops=0, transcendentals=0, bytes_accessed=moved),
    interpret=interpret,
    name="dmljax_tpu_fetch",
  )(wanted_columns, wanted_columns, *matrices)
  return bits.reshape(-1)[:slots].reshape(columns.shape)


def _kernel(
  columns_smem: Any,
  columns_vmem: Any,
  x_hbm: Any,
  *refs: Any,
  shape: tuple[int, int],
  k: int,
  block: int,
  copy_rows: int,
  full_rows: int,
  full_columns: int,
) -> None:
  """One grid step: the ``block`` slots from ``block * program_id`` on (slot ``s``: row ``s // k``).

  ``refs``: the padded copies of the partial last column tile (where ``full_columns`` falls short of the
  matrix's columns) and row tile (where ``full_rows`` falls short of its rows), then the output block, the
  copies' buffer, the 16-bit rows' buffer and the semaphore.
  """
  from jax.experimental import pallas as pl
  from jax.experimental.pallas import tpu as pltpu

  *tails, out_ref, copies, picked_rows, semaphore = refs
  rows, n = shape
  column_tail = tails.pop(0) if full_columns < n else None
  row_tail = tails.pop(0) if full_rows < rows else None
  first = lax.convert_element_type(pl.program_id(0), np.int32) * np.int32(block)
  sixteen_bit = copies.dtype.itemsize == 2

  def column_of(t: jax.Array) -> jax.Array:
    return columns_smem[lax.div(t, np.int32(LANES)), lax.rem(t, np.int32(LANES))]

  def row_of(t: jax.Array) -> jax.Array:
    return lax.div(first + t, np.int32(k))

  def copy(source: Any, row: Any, column: Any, t: jax.Array) -> Any:
    window = source.at[pl.ds(row, copy_rows), pl.ds(column, LANES)]
    return pltpu.make_async_copy(window, copies.at[t], semaphore)

  def start(t: jax.Array) -> None:
    column = column_of(t)

    @pl.when(column >= 0)
    def _() -> None:
      row = row_of(t)
      if copy_rows == rows:
        tile_row: Any = 0
      elif copy_rows == 1:
        tile_row = row
      else:
        tile_row = pl.multiple_of(lax.div(row, np.int32(copy_rows)) * np.int32(copy_rows), copy_rows)
      tile_column = pl.multiple_of(lax.div(column, np.int32(LANES)) * np.int32(LANES), LANES)
      in_matrix = jnp.bool_(True)
      if column_tail is not None:
        in_column_tail = column >= full_columns
        in_matrix = in_matrix & ~in_column_tail

        @pl.when(in_column_tail)
        def _() -> None:
          copy(column_tail, tile_row, 0, t).start()

      if row_tail is not None:
        in_row_tail = in_matrix & (row >= full_rows)
        in_matrix = in_matrix & ~in_row_tail

        @pl.when(in_row_tail)
        def _() -> None:
          copy(row_tail, 0, tile_column, t).start()

      if full_columns != 0:  # else every column is in the column tail

        @pl.when(in_matrix)
        def _() -> None:
          copy(x_hbm, tile_row, tile_column, t).start()

  def wait(t: jax.Array) -> None:
    @pl.when(column_of(t) >= 0)
    def _() -> None:
      copy(column_tail if full_columns == 0 else x_hbm, 0, 0, t).wait()  # every copy moves as much
      if sixteen_bit:
        row_bits = lax.bitcast_convert_type(copies[t], np.int16).astype(np.int32) & np.int32(0xFFFF)
        sublane = lax.broadcasted_iota(np.int32, row_bits.shape, 0)
        wanted = sublane == lax.rem(row_of(t), np.int32(copy_rows))
        picked = jnp.where(wanted, row_bits, np.int32(0))
        picked_rows[pl.ds(t, 1), :] = jnp.sum(picked, axis=0, keepdims=True, dtype=np.int32)

  _for_each_slot(block, start)
  _for_each_slot(block, wait)
  lane = lax.broadcasted_iota(np.int32, (LANES, LANES), 0)
  for c in range(block // LANES):
    if sixteen_bit:
      bits = picked_rows[c * LANES : (c + 1) * LANES, :]
    else:
      bits = lax.bitcast_convert_type(copies[c * LANES : (c + 1) * LANES, 0, :], np.int32)
    wanted = lane == (columns_vmem[c : c + 1, :] & np.int32(LANES - 1))
    out_ref[c : c + 1, :] = jnp.sum(jnp.where(wanted, bits.T, np.int32(0)), axis=0, keepdims=True, dtype=np.int32)


def _for_each_slot(count: int, body: Callable[[jax.Array], None]) -> None:
  """``body(t)`` for the int32 ``t`` in ``[0, count)``, in order: a loop Mosaic compiles to a ``for``.

  Everything in the kernel is 32-bit, as Mosaic takes no 64-bit type: under ``jax_enable_x64`` a ``fori_loop``
  with constant bounds counts in int64 (as do Python integers and the sums of int32 values), so the loop is a
  ``scan`` of an int32 counter, which Pallas reads as a fori loop, and the sums name their type.
  """

  def step(t: jax.Array, _: None) -> tuple[jax.Array, None]:
    body(t)
    return t + np.int32(1), None

  start: Any = np.int32(0)
  lax.scan(step, start, None, length=count)


# The kernel as a primitive with a lowering per platform: Mosaic on TPUs, interpret mode elsewhere. (A
# pallas_call under lax.platform_dependent is lowered for every platform of the program, and Mosaic
# kernels lower for TPUs only, so a program exported for several platforms could not hold one.)
_fetch_p = Primitive("dmljax_tpu_fetch")


@_fetch_p.def_abstract_eval
def _fetch_abstract_eval(x: Any, columns: Any, wanted: Any) -> Any:
  del x, wanted
  return columns.update(dtype=np.dtype(np.int32), weak_type=False)


@_fetch_p.def_impl
def _fetch_impl(x: jax.Array, columns: jax.Array, wanted: jax.Array) -> jax.Array:
  return jax.jit(_fetch_p.bind)(x, columns, wanted)


mlir.register_lowering(
  _fetch_p, mlir.lower_fun(functools.partial(_fetch, interpret=False), multiple_results=False), platform="tpu"
)
mlir.register_lowering(_fetch_p, mlir.lower_fun(functools.partial(_fetch, interpret=True), multiple_results=False))
