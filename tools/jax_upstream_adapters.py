"""A pytest plugin that puts dmljax where JAX's public names were, to run JAX's own tests against dmljax.

Loaded by ``tools/jax_upstream_tests.py`` (``-p jax_upstream_adapters``) before JAX's test modules are imported,
it replaces ``jax.lax.top_k``, ``jax.numpy.argmin``/``argmax``, ``jax.numpy.sum``/``prod``/``max``/``min``/
``amax``/``amin``/``mean``, ``jax.nn.logsumexp``, ``jax.scipy.special.logsumexp`` and ``jax.nn.one_hot`` with thin
adapters: each maps the JAX call's arguments onto the dmljax call and adds nothing else. Arguments dmljax has no
equivalent for (``dtype=``, ``out=``, ``initial=``, ``where=``, ``logsumexp``'s ``b=`` and ``return_sign=``, a named
``one_hot`` axis) send the call to JAX's own function, and are counted. A call made while dmljax itself runs
(dmljax's internals use ``jnp.sum`` and ``jnp.max``) goes to JAX's function, so only the tests' own calls are
substituted. At the end the counts are written as JSON to ``$DMLJAX_UPSTREAM_CALLS`` (when set).

This file holds adapters only; JAX's tests are read from a checkout of JAX that the runner is given.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.nn
import jax.numpy as jnp
import jax.scipy.special

import dmljax as dml

CALLS: collections.Counter[str] = collections.Counter()  # "dmljax:<name>" and "jax:<name>:<arguments>"
_STATE = threading.local()
_ORIGINALS: dict[tuple[Any, str], Callable[..., Any]] = {}


def _to_jax(original: Callable[..., Any], name: str, given: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
  """JAX's own function, for arguments with no dmljax equivalent (``given``: those arguments, counted by name)."""
  CALLS[f"jax:{name}:{','.join(sorted(given))}"] += 1
  return original(*args, **kwargs)


def _extra(**arguments: Any) -> dict[str, Any]:
  """The arguments that are set (not ``None``, not ``False``): dmljax has no equivalent for them."""
  return {k: v for k, v in arguments.items() if v is not None and v is not False}


def _top_k(original: Callable[..., Any], operand: Any, k: int, *, axis: int = -1) -> Any:
  return dml.top_k(operand, k, axis=axis)


def _arg(find_max: bool) -> Callable[..., Any]:
  name = "argmax" if find_max else "argmin"
  function = dml.argmax if find_max else dml.argmin

  def adapter(original: Callable[..., Any], a: Any, axis: Any = None, out: Any = None, keepdims: Any = None) -> Any:
    if out is not None:
      return _to_jax(original, name, _extra(out=out), a, axis, out, keepdims)
    return function(a, axis, keepdims=bool(keepdims))

  return adapter


def _summed(function: str) -> Callable[..., Any]:
  def adapter(
    original: Callable[..., Any],
    a: Any,
    axis: Any = None,
    dtype: Any = None,
    out: Any = None,
    keepdims: bool = False,
    initial: Any = None,
    where: Any = None,
    promote_integers: bool = True,
  ) -> Any:
    given = _extra(dtype=dtype, out=out, initial=initial, where=where)
    if given:
      options = dict(initial=initial, where=where, promote_integers=promote_integers)
      return _to_jax(original, function, given, a, axis, dtype, out, keepdims, **options)
    return dml.reduce(a, function, axis, keepdims=bool(keepdims), promote_integers=promote_integers)

  return adapter


def _extreme(function: str) -> Callable[..., Any]:
  def adapter(
    original: Callable[..., Any],
    a: Any,
    axis: Any = None,
    out: Any = None,
    keepdims: bool = False,
    initial: Any = None,
    where: Any = None,
  ) -> Any:
    given = _extra(out=out, initial=initial, where=where)
    if given:
      return _to_jax(original, function, given, a, axis, out, keepdims, initial=initial, where=where)
    return dml.reduce(a, function, axis, keepdims=bool(keepdims))

  return adapter


def _mean(
  original: Callable[..., Any],
  a: Any,
  axis: Any = None,
  dtype: Any = None,
  out: Any = None,
  keepdims: bool = False,
  *,
  where: Any = None,
) -> Any:
  given = _extra(dtype=dtype, out=out, where=where)
  if given:
    return _to_jax(original, "mean", given, a, axis, dtype, out, keepdims, where=where)
  return dml.reduce(a, "mean", axis, keepdims=bool(keepdims))


def _logsumexp(
  original: Callable[..., Any],
  a: Any,
  axis: Any = None,
  b: Any = None,
  keepdims: bool = False,
  return_sign: bool = False,
  where: Any = None,
) -> Any:
  given = _extra(b=b, return_sign=return_sign, where=where)
  if given:
    return _to_jax(original, "logsumexp", given, a, axis, b, keepdims, return_sign, where)
  return dml.reduce(a, "logsumexp", axis, keepdims=bool(keepdims))


def _one_hot(original: Callable[..., Any], x: Any, num_classes: Any, *, dtype: Any = None, axis: Any = -1) -> Any:
  if not isinstance(axis, int):  # a named axis (under shard_map or vmap with axis_name): no dmljax equivalent
    return _to_jax(original, "one_hot", {"axis": axis}, x, num_classes, dtype=dtype, axis=axis)
  return dml.one_hot(x, num_classes, axis=axis, dtype=dtype)


ADAPTERS: tuple[tuple[Any, str, Callable[..., Any]], ...] = (
  (jax.lax, "top_k", _top_k),
  (jnp, "argmax", _arg(True)),
  (jnp, "argmin", _arg(False)),
  (jnp, "sum", _summed("sum")),
  (jnp, "prod", _summed("prod")),
  (jnp, "max", _extreme("max")),
  (jnp, "amax", _extreme("max")),
  (jnp, "min", _extreme("min")),
  (jnp, "amin", _extreme("min")),
  (jnp, "mean", _mean),
  (jax.nn, "logsumexp", _logsumexp),
  (jax.scipy.special, "logsumexp", _logsumexp),
  (jax.nn, "one_hot", _one_hot),
)


def _routed(original: Callable[..., Any], name: str, adapter: Callable[..., Any]) -> Callable[..., Any]:
  @functools.wraps(original)
  def call(*args: Any, **kwargs: Any) -> Any:
    if getattr(_STATE, "inside", False):  # dmljax's own use of the name, or JAX's fallback
      return original(*args, **kwargs)
    _STATE.inside = True
    try:
      before = sum(CALLS.values())
      out = adapter(original, *args, **kwargs)
      if sum(CALLS.values()) == before:
        CALLS[f"dmljax:{name}"] += 1
      return out
    finally:
      _STATE.inside = False

  return call


def install() -> None:
  """Puts the adapters in place (idempotent)."""
  for module, name, adapter in ADAPTERS:
    if (module, name) not in _ORIGINALS:
      _ORIGINALS[(module, name)] = getattr(module, name)
      setattr(module, name, _routed(_ORIGINALS[(module, name)], name, adapter))


def uninstall() -> None:
  """Puts JAX's functions back."""
  for (module, name), original in _ORIGINALS.items():
    setattr(module, name, original)
  _ORIGINALS.clear()


def pytest_configure(config: Any) -> None:
  install()


def pytest_unconfigure(config: Any) -> None:
  uninstall()
  path = os.environ.get("DMLJAX_UPSTREAM_CALLS")
  if path:
    with open(path, "w") as f:
      json.dump(dict(CALLS), f, indent=1, sort_keys=True)
