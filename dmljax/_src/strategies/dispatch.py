"""Which top-k strategy runs: one table per platform, read top to bottom, the first row that applies wins.

Each strategy is a module of this package and returns the values and int32 indices in dmljax's order; the row's
condition is about speed only (every strategy is exact on every platform). Rows longer than int32
can index take :func:`sort.wide_rows` everywhere. Under ``platform.choosing(top_k=name)`` the named
strategy runs on every platform instead (tests and benchmarks).

==========  ====================  ============================================================
platform    strategy              when
==========  ====================  ============================================================
cpu         cpu_kernel            the compiled kernel where it is built and handles the type (exported
                                  programs: the rows below)
cpu         cpu_float_view        floats where staging does not pay (:func:`cpu.float_view_pays`)
cpu         cpu_chunked           long rows: chunk maxima, then candidates (:func:`cpu.staged_kind`)
cpu         cpu_extracted         k <= 2 on short rows of large arrays
cpu         cpu_key_view          otherwise: ``lax.top_k`` on the key's total-order float view
cuda        peak_reduction        k == 1: one (key, index) reduction
cuda        one_pass              k <= 16 on rows of 1024 or more, types of up to 32 bits: a Pallas kernel
                                  that reads the row once (exported programs: the rows below)
cuda        gpu_kernel            k <= 16 on rows of 1024 or more, types with a kernel key
cuda        chunked_sorts         rows where sorting chunk maxima and candidates sorts far fewer
tpu         sorted_with_values    rows under 256: a sort that carries the values (no gather)
tpu         tpu_kernel            k <= 256, types of up to 32 bits: XLA's TPU TopK, values from the keys
tpu         chunked_sorts         as on cuda (64-bit types, k > 256)
any         sorted_keys           otherwise: ``lax.top_k`` on the integer key, a sort
==========  ====================  ============================================================
"""

from __future__ import annotations

import functools

import jax

from dmljax._src import platform
from dmljax._src.strategies import cpu, cpu_kernel, gpu_kernel, one_pass, peak, radix, sort, staged, tpu_kernel
from dmljax._src.strategies.case import Case, Selected, Strategy, always

index_dtype = sort.index_dtype


SORTED_KEYS = Strategy("sorted_keys", always, sort.sorted_keys)
CHUNKED_SORTS = Strategy("chunked_sorts", staged.accelerator_pays, staged.accelerator_chunked)

# The CPU table's XLA rows: what runs where the compiled kernel does not (not built, other types, exported).
CPU_XLA = (
  Strategy("cpu_float_view", cpu.float_view_pays, cpu.float_view),
  Strategy("cpu_chunked", lambda case: cpu.staged_kind(case) == "chunked", cpu.chunked),
  Strategy("cpu_extracted", lambda case: cpu.staged_kind(case) == "extracted", cpu.extracted),
  Strategy("cpu_key_view", always, cpu.key_view),
)


def cpu_xla_select(x: jax.Array, case: Case) -> Selected:
  """The CPU table's pick among its XLA rows."""
  return next(s for s in CPU_XLA if s.applies(case)).select(x, case)


TABLES: dict[platform.Branch, tuple[Strategy, ...]] = {
  "cpu": (
    Strategy(cpu_kernel.NAME, cpu_kernel.applies, cpu_kernel.selecting(cpu_xla_select), cpu_kernel.handles),
    *CPU_XLA,
  ),
  "cuda": (
    Strategy("peak_reduction", peak.handles, peak.select, peak.handles),
    Strategy(one_pass.NAME, one_pass.applies, one_pass.select, one_pass.handles),
    Strategy("gpu_kernel", gpu_kernel.applies, gpu_kernel.select, gpu_kernel.handles),
    CHUNKED_SORTS,
    SORTED_KEYS,
  ),
  "tpu": (
    Strategy("sorted_with_values", tpu_kernel.short_row, sort.sorted_with_values),
    Strategy("tpu_kernel", tpu_kernel.applies, tpu_kernel.select, tpu_kernel.handles),
    CHUNKED_SORTS,
    SORTED_KEYS,
  ),
  "default": (SORTED_KEYS,),
}
# Selectable by name only.
OTHERS = (
  Strategy("radix", always, radix.select),
  Strategy("radix_pallas", always, radix.select_pallas),
)
BY_NAME = {strategy.name: strategy for table in (*TABLES.values(), OTHERS) for strategy in table}


def strategy(which: platform.Branch, case: Case) -> Strategy:
  """The strategy the platform ``which`` runs for ``case`` (a forced one, if a choice names it)."""
  forced = platform.current().top_k
  if forced is None:
    return next(s for s in TABLES[which] if s.applies(case))
  if forced not in BY_NAME:
    raise ValueError(f"top-k strategy must be one of {sorted(BY_NAME)}; got {forced!r}")
  chosen = BY_NAME[forced]
  if not chosen.handles(case):
    raise ValueError(f"top-k strategy {forced!r} is not exact for {case}; choose another or none")
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
