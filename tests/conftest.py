"""Strict JAX configuration for the whole suite (equinox-style).

Implicit dtype promotion and rank promotion raise, and warnings are errors
(pyproject's filterwarnings), so the library cannot lean on either silently.
"""

import jax

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
