"""Which top-k strategy runs: one table per platform, read top to bottom, the first row that applies wins.

Each strategy is a module of this package that declares the cases it handles (types, shapes, ``k``: its
``handles``) and returns the values and int32 indices in dmljax's order; a row runs where its strategy
handles the case and the row's condition (``pays``, about speed only) holds. Every table ends in a row that
handles every case. Rows longer than int32 can index take :func:`sort.wide_rows` everywhere. Under
``platform.choosing(top_k=name)`` the named strategy runs on every platform instead (tests and benchmarks),
and naming one for a case it does not handle is an error. Where a shape holds ``jax.export``'s symbolic dimensions,
only the rows whose strategy declares them (``shapes=``) apply: the kernels' rows need static shapes, the staged
rows a static row length; every table's last row takes any shape.

==========  ====================  =========================================================================
platform    strategy              handles / runs when
==========  ====================  =========================================================================
cpu         cpu_kernel            float16/32/64, bfloat16, 8- to 64-bit integers / inputs of 32 KiB or more
                                  where the compiled kernel is loaded (exported programs: this table's next row)
cpu         cpu_float_view        floats / where staging does not pay (:func:`cpu.float_view_pays`)
cpu         cpu_chunked           rows with a chunk length / long rows (:func:`cpu.staged_kind`)
cpu         cpu_extracted         ``k <= 8`` / ``k <= 2`` on short rows of large arrays
cpu         cpu_key_view          every case / otherwise: ``lax.top_k`` on the key's total-order float view
cuda        peak_reduction        ``k == 1``: one (key, index) reduction
cuda        one_pass              8- to 32-bit types, ``k <= 16`` / rows of 1024 or more: a Pallas kernel
                                  for Mosaic GPU (Triton before jax 0.11) that reads the row once, on GPUs
                                  of compute capability 8.0+ (exported programs: this table's next row)
cuda        gpu_kernel            types of up to 16 bits, float32, bfloat16 / ``k <= 16``, rows of 1024+
cuda        chunked_sorts         rows with a chunk length / rows of 1024 or more
tpu         sorted_with_values    every case / rows under 256: a sort that carries the values (no gather)
tpu         tpu_kernel            types of up to 32 bits but the float8 types with two zeros or several
                                  NaNs and float4 / ``k <= 256``: XLA's TPU TopK, values from the keys
tpu         chunked_sorts         as on cuda (64-bit types, k > 256, the float8 types left above)
any         sorted_keys           every case: ``lax.top_k`` on the integer key, a sort
==========  ====================  =========================================================================
"""

from __future__ import annotations

import functools

import jax

from dmljax._src import platform
from dmljax._src.strategies import cpu, cpu_kernel, gpu_kernel, one_pass, peak, sort, staged, tpu_kernel
from dmljax._src.strategies.case import Case, Select, Selected, Strategy

index_dtype = sort.index_dtype


def _first(table: tuple[Strategy, ...], case: Case) -> Strategy:
  """The first row of ``table`` that applies to ``case`` (the last row of every table handles every case)."""
  return next(s for s in table if s.applies(case))


def _next_row(which: platform.Branch, name: str) -> Select:
  """The selection ``which``'s table picks after the row ``name``: a kernel strategy's fallback."""

  def select(x: jax.Array, case: Case) -> Selected:
    table = TABLES[which]
    after = [s.name for s in table].index(name) + 1
    return _first(table[after:], case).select(x, case)

  select.__name__ = f"after_{name}"
  return select


SORTED_KEYS = Strategy("sorted_keys", sort.sorted_keys, sort.handles, shapes="any")
CHUNKED_SORTS = Strategy(
  "chunked_sorts", staged.accelerator_chunked, staged.accelerator_handles, staged.accelerator_pays, shapes="batch"
)

TABLES: dict[platform.Branch, tuple[Strategy, ...]] = {
  "cpu": (
    Strategy(
      cpu_kernel.NAME, cpu_kernel.selecting(_next_row("cpu", cpu_kernel.NAME)), cpu_kernel.handles, cpu_kernel.pays
    ),
    Strategy("cpu_float_view", cpu.float_view, cpu.float_view_handles, cpu.float_view_pays, shapes="any"),
    Strategy("cpu_chunked", cpu.chunked, cpu.chunked_handles, cpu.chunked_pays, shapes="batch"),
    Strategy("cpu_extracted", cpu.extracted, cpu.extracted_handles, cpu.extracted_pays, shapes="batch"),
    Strategy("cpu_key_view", cpu.key_view, cpu.every_case, shapes="any"),
  ),
  "cuda": (
    Strategy("peak_reduction", peak.select, peak.handles, shapes="any"),
    Strategy(one_pass.NAME, one_pass.selection(_next_row("cuda", one_pass.NAME)), one_pass.handles, one_pass.pays),
    Strategy("gpu_kernel", gpu_kernel.select, gpu_kernel.handles, gpu_kernel.pays),
    CHUNKED_SORTS,
    SORTED_KEYS,
  ),
  "tpu": (
    Strategy("sorted_with_values", sort.sorted_with_values, sort.handles, tpu_kernel.short_row, shapes="any"),
    Strategy("tpu_kernel", tpu_kernel.select, tpu_kernel.handles, tpu_kernel.pays, shapes="any"),
    CHUNKED_SORTS,
    SORTED_KEYS,
  ),
  "default": (SORTED_KEYS,),
}
BY_NAME = {strategy.name: strategy for table in TABLES.values() for strategy in table}


def strategy(which: platform.Branch, case: Case) -> Strategy:
  """The strategy the platform ``which`` runs for ``case`` (a forced one, if a choice names it)."""
  forced = platform.current().top_k
  if forced is None:
    return _first(TABLES[which], case)
  if forced not in BY_NAME:
    raise ValueError(f"top-k strategy must be one of {sorted(BY_NAME)}; got {forced!r}")
  chosen = BY_NAME[forced]
  if not chosen.handles_case(case):
    handles = " ".join((chosen.handles.__doc__ or "").split())
    raise ValueError(
      f"top-k strategy {forced!r} does not handle {case} (it handles: {handles or 'see its module'}); "
      "choose another strategy, or none to let the table choose"
    )
  return chosen


def _run(which: platform.Branch, case: Case, x: jax.Array) -> Selected:
  return strategy(which, case).select(x, case)


def top_k(x: jax.Array, k: int, largest_first: bool) -> Selected:
  """The ``k`` first values of every row (last axis) of ``x`` in dmljax's order, and their indices.

  Values bit-exact; indices int32, or :func:`index_dtype` for rows longer than int32 can index.
  """
  case = Case.of(x, k, largest_first)
  if index_dtype(case.n) != jax.numpy.int32:
    return sort.wide_rows(x, case)
  values, indices = platform.branch(x, **{which: functools.partial(_run, which, case) for which in TABLES})
  return values, indices
