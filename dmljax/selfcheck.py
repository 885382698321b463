"""Checks dmljax bit for bit on this machine: ``python -m dmljax.selfcheck`` (``--help`` for options).

It runs every top-k strategy the local platform can pick, the other operators, REDUCE (MAX/MIN by bits, SUM and
LOG_SUM_EXP exact or within a stated tolerance) and sampling (the filters by bits, the draw by its properties), on
every type with special values (NaN payloads, signalling NaNs, ±inf, ±0, ties, integer extremes), prints one table
per section with its own time, and exits non-zero on any result that is not exact. GPU and TPU users: please run
it and attach its output to bug reports.
"""

from dmljax._src.selfcheck import main

if __name__ == "__main__":
  raise SystemExit(main())
