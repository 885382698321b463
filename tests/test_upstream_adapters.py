"""The adapters of tools/jax_upstream_tests.py: JAX's public names routed to dmljax, the rest sent back to JAX.

JAX's own test files are run against dmljax by putting these adapters where ``jax.lax.top_k``, ``jnp.argmax``,
the ``jnp`` reducers, ``logsumexp`` and ``jax.nn.one_hot`` were; this checks the routing itself (which calls reach
dmljax, which arguments go back to JAX, that dmljax's own use of those names is not rerouted, and that JAX's
functions come back) without JAX's checkout.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import assert_bitwise_equal

import dmljax as dml


@pytest.fixture
def adapters() -> Iterator[ModuleType]:
  sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
  try:
    module = importlib.import_module("jax_upstream_adapters")
  finally:
    sys.path.pop(0)
  module.CALLS.clear()
  module.install()
  try:
    yield module
  finally:
    module.uninstall()


def test_public_names_reach_dmljax_and_unmatched_arguments_reach_jax(adapters: ModuleType) -> None:
  x = np.array([[3.0, -0.0, 0.0, np.nan], [1.0, 2.0, 2.0, -1.0]], np.float32)
  assert_bitwise_equal(jnp.max(x, 1), dml.reduce(x, "max", 1), "jnp.max")
  assert_bitwise_equal(jnp.argmax(x, 1, keepdims=True), dml.argmax(x, 1, keepdims=True), "jnp.argmax")
  assert_bitwise_equal(jax.lax.top_k(x, 2)[1], dml.top_k(x, 2)[1], "lax.top_k")
  assert_bitwise_equal(jax.nn.one_hot(np.array([-1, 2]), 3), dml.one_hot(np.array([-1, 2]), 3), "one_hot")
  small = np.array([100, 100, 100], np.int8)
  assert_bitwise_equal(jnp.sum(small), np.int32(300), "jnp.sum")
  assert_bitwise_equal(jnp.sum(small, promote_integers=False), np.int8(44), "promote_integers=False")
  assert_bitwise_equal(jnp.sum(small, dtype=jnp.int16), np.int16(300), "dtype= goes to JAX")
  assert_bitwise_equal(jax.scipy.special.logsumexp(np.zeros(4, np.float32), b=2.0), np.float32(np.log(8)), "b=")
  assert jnp.mean(np.ones(3, np.float32), where=np.array([True, False, True])) == 1.0
  calls = dict(adapters.CALLS)
  assert calls["dmljax:max"] == 1 and calls["dmljax:argmax"] == 1 and calls["dmljax:top_k"] == 1
  assert calls["dmljax:one_hot"] == 1 and calls["dmljax:sum"] == 2
  assert calls["jax:sum:dtype"] == 1 and calls["jax:logsumexp:b"] == 1 and calls["jax:mean:where"] == 1
  assert not any(key.startswith("jax:max") for key in calls)  # dmljax's own jnp.max calls were not counted


def test_uninstall_puts_jaxs_functions_back(adapters: ModuleType) -> None:
  routed = jnp.sum
  adapters.uninstall()
  assert jnp.sum is not routed and jnp.sum.__module__.startswith("jax")
  assert jnp.sum(np.array([100, 100, 100], np.int8)) == 300
  adapters.install()  # the fixture's uninstall then restores them again
