"""``python -m dmljax.selfcheck``: dmljax's exactness checked on the machine it runs on, with its real kernels.

Three sections, each one table timed on its own: every top-k strategy of the local platform's table, forced by name
on the cases it handles, argmin, argmax, gather_nd and one_hot (``selection``); REDUCE's MAX and MIN by bits, SUM
and LOG_SUM_EXP exact where the exact result is a value of the type and within a stated tolerance elsewhere
(:mod:`.sums`, ``reduce``); dmljax.sampling's filters by bits and ``sample`` by its properties (:mod:`.sampling`).
Every float and integer type JAX has (64-bit ones with ``jax_enable_x64`` on), on rows of special bit patterns;
over every local device when there are several. Each result is judged against a NumPy reference
(:mod:`.reference`), which shares no code with the library.
"""

from dmljax._src.selfcheck.runner import Report, Section, main, run, table

__all__ = ["Report", "Section", "main", "run", "table"]
