"""The trace-time platform choice (platform.Choice) is per thread: one thread's forced branch is not another's.

It was a process global swapped while branches were lowered, so a thread tracing while another held a forced
branch (or lowered one) traced under the other's choice.
"""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmljax as dml
from dmljax._src import platform


def test_a_choice_made_in_one_thread_is_not_seen_in_another() -> None:
  inside = threading.Barrier(2, timeout=60)
  outside = threading.Barrier(2, timeout=60)
  seen: dict[str, platform.Choice] = {}

  def forcing() -> None:
    with platform.choosing(branch="default", interpret=True):
      inside.wait()  # the other thread reads its choice while this one is in force
      seen["forcing"] = platform.current()
      outside.wait()

  def reading() -> None:
    inside.wait()
    seen["reading"] = platform.current()
    outside.wait()

  threads = [threading.Thread(target=forcing), threading.Thread(target=reading)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert seen["forcing"] == platform.Choice(branch="default", interpret=True)
  assert seen["reading"] == platform.Choice()
  assert platform.current() == platform.Choice()


def test_tracing_in_two_threads_under_different_choices() -> None:
  """Each thread's program is the one its own choice traces, while the other thread holds another choice."""
  x = jnp.asarray(np.random.default_rng(3).permutation(64).astype(np.float32).reshape(4, 16))
  both = threading.Barrier(2, timeout=60)
  texts: dict[str, str] = {}

  def trace(name: str, branch: platform.Branch | None) -> None:
    with platform.choosing(branch=branch):
      both.wait()
      texts[name] = jax.jit(lambda x: dml.argmax(x, 1)).lower(x).as_text()
      texts[name + " after"] = str(platform.current().branch)

  threads = [threading.Thread(target=trace, args=(name, branch)) for name, branch in (("d", "default"), ("c", None))]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  with platform.choosing(branch="default"):
    want_default = jax.jit(lambda x: dml.argmax(x, 1)).lower(x).as_text()
  want_home = jax.jit(lambda x: dml.argmax(x, 1)).lower(x).as_text()
  assert want_default != want_home  # the two choices trace different programs
  assert texts == {"d": want_default, "c": want_home, "d after": "default", "c after": "None"}


_FORCEABLE = {
  "top_k": lambda x: dml.top_k(x, 3),
  "argmax": lambda x: dml.argmax(x, 1),
  "top_k_vmapped": jax.vmap(lambda x: dml.top_k(x, 2)),
  "sample": lambda x: dml.sampling.sample(jax.random.key(0), x, temperature=1.0, top_k=4),
}


@pytest.mark.parametrize("name", sorted(_FORCEABLE))
@pytest.mark.parametrize("order", ["home_first", "forced_first"])
def test_a_forced_branch_is_the_one_lowered_whatever_was_traced_before(name: str, order: str) -> None:
  """The choice is part of every trace cache's key: one function object, jitted once, traced under two choices in
  either order gives each choice's own program (the program a fresh function traces under it), with no cache cleared.
  """
  fn = _FORCEABLE[name]
  x = jnp.asarray(np.random.default_rng(11).permutation(64).astype(np.float32).reshape(4, 16))
  jitted = jax.jit(fn)
  choices = [None, "default"] if order == "home_first" else ["default", None]
  texts = {}
  for branch in choices:
    with platform.choosing(branch=branch):
      texts[branch] = jitted.lower(x).as_text()
  for branch in choices:  # what a function never traced before gives under each choice
    with platform.choosing(branch=branch):
      assert jax.jit(lambda x: fn(x)).lower(x).as_text() == texts[branch], branch
  assert texts[None] != texts["default"]
