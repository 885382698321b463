"""Strict JAX configuration for the whole suite (equinox-style).

Implicit dtype promotion and rank promotion raise, and warnings are errors
(pyproject's filterwarnings), so the library cannot lean on either silently.

The host platform is split into 8 CPU devices for the sharding tests. XLA reads
the flag once, when JAX first initialises its backends, so it is set here,
before anything touches a device; one-device tests are unaffected (they run on
device 0), and the whole suite shares one process and one compilation cache.
"""

import os

_DEVICES_FLAG = "--xla_force_host_platform_device_count"
if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICES_FLAG}=8".strip()

import jax  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")
