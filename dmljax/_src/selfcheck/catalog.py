"""The self-check's catalog: the checks each section (table) runs, in the order they run and print, and what their
cells mean. Built on the checks (:mod:`.checks`, :mod:`.sums`, :mod:`.sampling`), which know nothing of tables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dmljax._src.selfcheck import checks, sampling, sums
from dmljax._src.strategies.case import Strategy


@dataclasses.dataclass(frozen=True)
class Column:
  """One column of a table: a name, the check each type's cell runs, and the section (table) it belongs to."""

  name: str
  check: checks.Check
  section: str = "selection"


# The sections, in the order they run and print: each is one table, timed on its own.
SECTIONS = {
  "selection": "top_k strategy by strategy, argmin/argmax, gather_nd, one_hot: bits",
  "reduce": "REDUCE: MAX/MIN by bits; SUM and LOG_SUM_EXP exact, or within a tolerance (below)",
  "sampling": "dmljax.sampling: the filters by bits; sample by its properties",
}


# What a section's cells mean beyond "bits as the reference says", printed under its table.
NOTES = {
  "reduce": "sum exact, logsumexp exact: inputs whose exact result is a value of the type (any order of summation "
  "gives it), compared by value (either zero, any NaN); integer sums by bits, wrapping. sum tol, logsumexp tol: "
  "random rows of 256 within 2 ulp(result) + 256 eps sum|x| (SUM) and 2 ulp(result) + 264 eps (LOG_SUM_EXP) of the "
  "float64 result; eps is float32's (float64's for float64).",
  "sampling": "Filters: bits against the check's own filters, every p (min_p) at least 1e-5 from each cumulative "
  "sum (weight) of its row. sample: the token is a kept entry, temperature 0 takes the first in the order, the same "
  "key gives the same tokens by the whole-row route (max_k=1) and on max_k candidates.",
}


def columns(strategies: Sequence[Strategy], devices: int) -> list[Column]:
  """The top-k strategies, then the other operators, then (several devices) the sharded checks; then REDUCE's
  checks, then sampling's."""
  found = [Column(s.name, checks.forced_top_k(s)) for s in strategies]
  found += [
    Column("argmin", checks.arg_extreme(False)),
    Column("argmax", checks.arg_extreme(True)),
    Column("gather_nd", checks.gather),
    Column("one_hot", checks.one_hot),
  ]
  if devices > 1:
    for kind in checks.AXIS_TYPES:
      found += [
        Column(f"top_k {kind}", checks.sharded_top_k(kind)),
        Column(f"arg {kind}", checks.sharded_arg_extreme(kind)),
        Column(f"gather {kind}", checks.sharded_gather(kind)),
      ]
  found += [
    Column("max", checks.extreme(True), "reduce"),
    Column("min", checks.extreme(False), "reduce"),
    Column("sum exact", sums.sum_exact, "reduce"),
    Column("sum tol", sums.sum_within, "reduce"),
    Column("logsumexp exact", sums.log_sum_exp_exact, "reduce"),
    Column("logsumexp tol", sums.log_sum_exp_within, "reduce"),
  ]
  found += [
    Column("top_k_mask", sampling.top_k_mask, "sampling"),
    Column("top_p_mask", sampling.top_p_mask, "sampling"),
    Column("min_p_mask", sampling.min_p_mask, "sampling"),
    Column("sample", sampling.sample, "sampling"),
  ]
  return found
