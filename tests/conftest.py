"""Strict JAX configuration for the whole suite (equinox-style), and the Hypothesis profiles.

Implicit dtype promotion and rank promotion raise, and warnings are errors
(pyproject's filterwarnings), so the library cannot lean on either silently.

The host platform is split into 8 CPU devices for the sharding tests. XLA reads
the flag once, when JAX first initialises its backends, so it is set here,
before anything touches a device; one-device tests are unaffected (they run on
device 0), and the whole suite shares one process and one compilation cache.
A process started with the flag already in ``XLA_FLAGS`` keeps its own count
(tests/test_one_device_process.py runs a file with one device).

Hypothesis: the ``ci`` profile (default) is derandomized, so every run draws the
same examples; ``DMLJAX_HYPOTHESIS_PROFILE=long`` draws 25 times as many, at
random. Deadlines are off because the first call of every shape jit-compiles.
"""

import os

_DEVICES_FLAG = "--xla_force_host_platform_device_count"
if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICES_FLAG}=8".strip()

import jax  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=50, derandomize=True, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("long", max_examples=1250, deadline=None, suppress_health_check=_SLOW_OK)
settings.load_profile(os.environ.get("DMLJAX_HYPOTHESIS_PROFILE", "ci"))


def pytest_report_header() -> str:
  """The device count every test here ran with (tests/test_one_device_process.py reads it from a child run)."""
  return f"jax devices: {jax.device_count()} ({jax.default_backend()})"
