"""Strict JAX configuration for the whole suite (equinox-style), and the Hypothesis profiles.

Implicit dtype promotion and rank promotion raise, and warnings are errors
(pyproject's filterwarnings), so the library cannot lean on either silently.

The host platform is split into 8 CPU devices for the sharding tests. XLA reads
the flag once, when JAX first initialises its backends, so it is set here,
before anything touches a device; one-device tests are unaffected (they run on
device 0), and the whole suite shares one process and one compilation cache.
A process started with the flag already in ``XLA_FLAGS`` keeps its own count
(tests/test_one_device_process.py runs a file with one device).

Two profiles (docs/testing.rst, "Profiles"). The default run is the suite a change must pass, in minutes; the
long profile, ``python -m pytest -m long``, runs what the default leaves out, so that the two together are the whole
suite (CI runs both). Three markers say what a test is:

* ``long``: the test runs in the long profile only;
* ``sample(share)``: a parametrized test whose product the default run samples with a fixed seed (every value of
  every parameter at least once, and ``share`` of the cases); its other cases are ``long``;
* ``deep``: the test runs in both, deeper in the long profile (more cases; every Hypothesis test is ``deep``: 10
  derandomized examples by default, 500 in the long profile, derandomized too: CI runs the same examples every
  time). ``_helpers.long_profile()`` says which.

Deadlines are off because the first call of every shape jit-compiles.
"""

import math
import os
import zlib

_DEVICES_FLAG = "--xla_force_host_platform_device_count"
if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICES_FLAG}=8".strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=10, derandomize=True, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("long", max_examples=500, derandomize=True, deadline=None, suppress_health_check=_SLOW_OK)
PROFILE_VARIABLE = "DMLJAX_TEST_PROFILE"  # "long" in the long profile (read by _helpers.long_profile, subprocesses)


def _selects_long(markexpr: str) -> bool:
  """Whether a ``-m`` expression asks for the long profile (``long``, ``long or not long``; not ``not long``)."""
  words = markexpr.replace("(", " ").replace(")", " ").split()
  return any(word == "long" and (n == 0 or words[n - 1] != "not") for n, word in enumerate(words))


def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line("markers", "long: runs in the long profile only (python -m pytest -m long)")
  config.addinivalue_line("markers", "sample(share): the default run takes a fixed-seed covering sample of the cases")
  config.addinivalue_line("markers", "deep: runs in both profiles, deeper in the long one")
  long = _selects_long(config.getoption("markexpr") or "")
  os.environ[PROFILE_VARIABLE] = "long" if long else "default"
  settings.load_profile("long" if long else "ci")


def _sampled(items: list[pytest.Item], share: float) -> set[str]:
  """The node ids a ``sample(share)`` test keeps by default: a fixed-seed order, first every parameter value once."""
  seed = zlib.crc32(items[0].nodeid.split("[")[0].encode())
  order = [items[int(n)] for n in np.random.default_rng(seed).permutation(len(items))]
  kept: set[str] = set()
  covered: set[tuple[str, int]] = set()
  for item in order:
    # A parameter's value is the same object in every case of the product: its identity names it.
    values = {(name, id(value)) for name, value in item.callspec.params.items()}
    if values - covered:
      kept.add(item.nodeid)
      covered |= values
  for item in order:
    if len(kept) >= math.ceil(share * len(items)):
      break
    kept.add(item.nodeid)
  return kept


@pytest.hookimpl(tryfirst=True)  # the markers are in place before ``-m`` selects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
  groups: dict[str, list[pytest.Item]] = {}
  for item in items:
    if item.get_closest_marker("sample") is not None and hasattr(item, "callspec"):
      groups.setdefault(item.nodeid.split("[")[0], []).append(item)
  for group in groups.values():
    mark = group[0].get_closest_marker("sample")
    assert mark is not None
    kept = _sampled(group, float(mark.args[0]) if mark.args else 0.25)
    for item in group:
      if item.nodeid not in kept:
        item.add_marker(pytest.mark.long)
  long = os.environ[PROFILE_VARIABLE] == "long"
  for item in items:
    function = getattr(item, "obj", None)
    deep = item.get_closest_marker("deep") is not None or getattr(function, "is_hypothesis_test", False)
    if long and deep:
      item.add_marker(pytest.mark.long)
  if config.getoption("markexpr"):
    return  # -m selects
  named = [arg for arg in config.args if "::" in arg]  # a test named on the command line runs, whatever it is
  keep = [i for i in items if i.get_closest_marker("long") is None or any(i.nodeid.endswith(n) for n in named)]
  if len(keep) < len(items):
    kept = {id(i) for i in keep}
    config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
    items[:] = keep


def pytest_report_header() -> str:
  """The device count every test here ran with (tests/test_one_device_process.py reads it from a child run)."""
  return f"jax devices: {jax.device_count()} ({jax.default_backend()})"
