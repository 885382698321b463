"""The trace-time platform choice (platform.Choice) is per thread: one thread's forced branch is not another's.

It was a process global swapped while branches were lowered, so a thread tracing while another held a forced
branch (or lowered one) traced under the other's choice.
"""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np

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
