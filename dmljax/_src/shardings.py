"""What an array's type says about its sharding (explicit mesh axes, "sharding in types").

On a mesh with explicit axes (``jax.make_mesh``'s default) the sharding of every
traced array is known at trace time; on automatic axes it is not, and these
helpers report nothing, leaving the work to XLA's partitioner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import AxisType

from dmljax._src import platform

AxisNames = tuple[str, ...]


def names(entry: Any) -> AxisNames:
  """The mesh axes of one PartitionSpec entry."""
  if entry is None:
    return ()
  return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def full_spec(spec: Any, ndim: int) -> tuple[Any, ...]:
  """A PartitionSpec's entries, padded with ``None`` to ``ndim``."""
  entries = tuple(spec)
  return entries + (None,) * (ndim - len(entries))


def explicit_spec(x: jax.Array) -> tuple[Any, tuple[Any, ...]] | None:
  """``(mesh, spec)`` of an array sharded over at least one explicit mesh axis, else ``None``."""
  sharding = jax.typeof(x).sharding
  mesh = getattr(sharding, "mesh", None)
  if mesh is None or getattr(mesh, "empty", True):
    return None
  spec = full_spec(sharding.spec, x.ndim)
  axis_type = dict(zip(mesh.axis_names, mesh.axis_types, strict=True))
  if not any(axis_type[n] == AxisType.Explicit for entry in spec for n in names(entry)):
    return None
  return mesh, spec


def splits_explicitly(x: jax.Array, axes: tuple[int, ...]) -> bool:
  """Whether an explicit-axes sharding (visible in ``x``'s type) splits any of ``axes``."""
  found = explicit_spec(x)
  return found is not None and any(found[1][a] is not None for a in axes)


def program_devices(ctx: Any) -> int:
  """The number of devices of the program a lowering rule is lowering (1 where the context names none)."""
  return int(getattr(ctx.module_context.axis_context, "num_devices", 1))


def with_x64(enabled: bool, fn: Callable[..., Any]) -> Callable[..., Any]:
  """``fn`` run with ``jax_enable_x64`` as ``enabled``.

  A custom_partitioning rule runs when XLA compiles, on a thread where a caller's ``jax.enable_x64(True)``
  block (a thread-local setting) is not in force: the rule's body would trace int64 keys as int32.
  The rule's caller passes the setting it was traced with, and the rule's body runs under it.
  """

  def run(*args: Any, **kwargs: Any) -> Any:
    with jax.enable_x64(enabled):
      return fn(*args, **kwargs)

  return run


def with_choice(choice: platform.Choice, fn: Callable[..., Any]) -> Callable[..., Any]:
  """``fn`` run under the platform choice ``choice`` (:mod:`platform`).

  A lowering or partitioning rule may run after the call that traced it returned, or on another thread
  (a custom_partitioning rule runs when XLA compiles): the choice the call was traced with goes with it as a
  parameter, and the rule's body runs under it, as under :func:`with_x64`.
  """
  fields = {field.name: getattr(choice, field.name) for field in dataclasses.fields(choice)}

  def run(*args: Any, **kwargs: Any) -> Any:
    with platform.choosing(**fields):
      return fn(*args, **kwargs)

  return run
