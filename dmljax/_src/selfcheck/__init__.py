"""``python -m dmljax.selfcheck``: dmljax's exactness checked on the machine it runs on, with its real kernels.

Every top-k strategy of the local platform's table, forced by name on the cases it handles, and argmin, argmax,
gather_nd, one_hot and REDUCE's MAX and MIN, on every float and integer type JAX has (64-bit ones with
``jax_enable_x64`` on), on rows of special bit patterns; over every local device when there are several. Each
result is judged by bits against a NumPy reference of the order (:mod:`.reference`), which shares no code with the
library's keys.
"""

from dmljax._src.selfcheck.runner import Report, Section, main, run, table

__all__ = ["Report", "Section", "main", "run", "table"]
