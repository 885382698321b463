"""platform.branch traces the default backend's branch at the call and every other branch only when lowered for it.

A CPU program no longer pays for tracing the GPU's Pallas kernels and the TPU's paths; ``jax.export`` for several
platforms still lowers each branch, under the choice (forced strategy, interpret mode) in force at the call.
"""

from __future__ import annotations

import collections
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from dmljax._src import platform

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="counts the traces of a CPU program's branches")

X = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)


def _counted() -> tuple[collections.Counter[str], dict[str, Any], dict[str, Any]]:
  """Branches that count their traces (each a different function of x), and the choice each saw when traced."""
  traced: collections.Counter[str] = collections.Counter()
  seen: dict[str, Any] = {}

  def make(name: str, scale: float) -> Any:
    def implementation(x: jax.Array) -> jax.Array:
      traced[name] += 1
      seen[name] = platform.current()
      return jnp.sin(x) * scale

    return implementation

  branches = {
    "cpu": make("cpu", 1.0),
    "cuda": make("cuda", 2.0),
    "tpu": make("tpu", 3.0),
    "default": make("default", 4.0),
  }
  return traced, seen, branches


def test_a_cpu_program_traces_the_cpu_branch_only() -> None:
  traced, _, branches = _counted()
  lowered = jax.jit(lambda x: platform.branch(x, **branches)).trace(X).lower()
  assert dict(traced) == {"cpu": 1}
  assert "case" not in lowered.as_text()  # one branch, no platform switch in the program
  np.testing.assert_array_equal(lowered.compile()(X), jnp.sin(X))


def test_export_for_several_platforms_lowers_each_branch_under_the_choice_of_the_call() -> None:
  traced, seen, branches = _counted()
  with platform.choosing(interpret=True, top_k="sorted_keys"):
    fn = jax.jit(lambda x: platform.branch(x, **branches))
    staged = fn.trace(jax.ShapeDtypeStruct(X.shape, X.dtype))
  assert dict(traced) == {"cpu": 1} and platform.current() == platform.Choice()
  staged.lower(lowering_platforms=("cpu", "cuda", "tpu"))  # outside the block: the call's choice comes back
  assert traced["cuda"] == 1 and traced["tpu"] == 1 and traced["default"] == 0
  assert seen["tpu"] == seen["cuda"] == platform.Choice(interpret=True, top_k="sorted_keys")
  with platform.choosing(interpret=True, top_k="sorted_keys"):
    exported = export.export(fn, platforms=("cpu", "cuda", "tpu"))(jax.ShapeDtypeStruct(X.shape, X.dtype))
  np.testing.assert_array_equal(exported.call(X), jnp.sin(X))


def test_vmap_grad_and_eager_run_the_home_branch() -> None:
  _, _, branches = _counted()

  def f(x: jax.Array) -> jax.Array:
    return platform.branch(x, **branches)

  np.testing.assert_array_equal(jax.vmap(f)(X), jnp.sin(X))
  np.testing.assert_allclose(jax.grad(lambda x: f(x).sum())(X), jnp.cos(X), rtol=1e-6)
  np.testing.assert_array_equal(jax.jit(jax.vmap(jax.grad(lambda r: f(r).sum())))(X), jnp.cos(X))
  with jax.disable_jit():
    np.testing.assert_array_equal(f(X), jnp.sin(X))
  np.testing.assert_array_equal(f(X), jnp.sin(X))
