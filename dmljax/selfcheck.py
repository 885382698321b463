"""Checks dmljax bit for bit on this machine: ``python -m dmljax.selfcheck`` (``--help`` for options).

It runs every top-k strategy the local platform can pick, and the other operators, on every type with special
values (NaN payloads, signalling NaNs, ±inf, ±0, ties, integer extremes), prints one table and exits non-zero
on any result that is not exact. GPU and TPU users: please run it and attach its output to bug reports.
"""

from dmljax._src.selfcheck import main

if __name__ == "__main__":
  raise SystemExit(main())
