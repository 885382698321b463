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
from jax.extend import core
from jax.interpreters import ad, batching, mlir
from jax.sharding import AxisType

from dmljax._src import platform, symbolic

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


def blockwise(x: jax.Array, axes: tuple[int, ...], *, trailing: bool = False) -> bool:
  """Whether a one-device route that blocks the reduced axes (the halving, a CPU kernel) may reduce ``x`` over
  ``axes``: they are contiguous (the trailing ones, with ``trailing``), no explicit sharding splits them, and ``x``'s
  shape is static (``jax.export``'s symbolic dimensions take XLA's own reduction, which takes any shape).

  Where this holds, :func:`by_program_devices` still chooses between the two routes when the program is lowered.
  """
  if not axes or axes != tuple(range(axes[0], axes[-1] + 1)) or (trailing and axes[-1] != x.ndim - 1):
    return False
  return not splits_explicitly(x, axes) and symbolic.is_static(x.shape)


def struct_like(shape: tuple[int, ...], dtype: Any, like: jax.Array) -> jax.ShapeDtypeStruct:
  """A kernel's output type (``pallas_call``'s ``out_shape``) of ``shape`` and ``dtype`` that varies over the mesh
  axes ``like`` varies over: inside ``jax.shard_map`` with ``check_vma=True`` (JAX's default) an output type must
  say so."""
  return jax.ShapeDtypeStruct(shape, dtype, manual_axis_type=jax.typeof(like).manual_axis_type)


def varying_axes(x: Any) -> frozenset[Any] | None:
  """Inside ``jax.shard_map``: the manual mesh axes along which JAX's type says ``x`` (an array or a
  ``jax.ShapeDtypeStruct``) may vary, tracked with ``check_vma=True`` (the default); empty where it is the same on
  every device, and ``None`` where this JAX's types hold no such set."""
  typed = x if isinstance(x, jax.ShapeDtypeStruct) else jax.typeof(x)
  varying = getattr(typed, "vma", None)
  if varying is None:
    varying = getattr(getattr(typed, "manual_axis_type", None), "varying", None)
  return None if varying is None else frozenset(varying)


def _varying_along(x: jax.Array, axes: frozenset[Any]) -> jax.Array:
  have = varying_axes(x)
  missing = frozenset() if have is None else axes - have
  if not missing:
    return x
  mesh = jax.sharding.get_abstract_mesh()
  return jax.lax.pcast(x, tuple(name for name in mesh.axis_names if name in missing), to="varying")


def varying_as(x: jax.Array, *like: Any) -> jax.Array:
  """``x``, typed as varying along every manual axis any of ``like`` varies along (a loop's initial carry must have
  the type of what the loop computes from ``like``); ``x`` itself outside ``shard_map`` or where nothing is missing."""
  return _varying_along(x, frozenset().union(*(varying_axes(a) or frozenset() for a in like if a is not None)))


def typed_like(x: jax.Array, like: jax.Array) -> jax.Array:
  """``x`` on ``like``'s mesh with ``like``'s sharding where ``like``'s type carries explicit mesh axes and ``x``'s
  type differs (a value computed inside a loop from constants has no mesh, and ``lax.dynamic_update_slice`` wants its
  operand's sharding); else ``x``."""
  want = jax.typeof(like).sharding
  if getattr(getattr(want, "mesh", None), "empty", True) or jax.typeof(x).sharding == want:
    return x
  return jax.sharding.reshard(x, want)


def typed_branches(
  on_true: Callable[[], Any], on_false: Callable[[], Any]
) -> tuple[Callable[[], Any], Callable[[], Any]]:
  """``lax.cond``'s two branches, their outputs given one type inside ``jax.shard_map``: each output varying along
  the manual axes either branch's varies along (``lax.cond`` wants them equal, and a branch that returns a constant
  is the same on every device where the other is not). Outside ``shard_map``, the branches as given.

  The caller calls ``jax.lax.cond(predicate, *typed_branches(a, b))`` itself, so that the conditional's source
  location (in the compiled program's metadata, which the compiled-path reader keys on) is the caller's line.
  """
  if not jax.sharding.get_abstract_mesh().manual_axes:
    return on_true, on_false
  shapes = [jax.eval_shape(branch) for branch in (on_true, on_false)]
  joined = jax.tree.map(lambda a, b: (varying_axes(a) or frozenset()) | (varying_axes(b) or frozenset()), *shapes)

  def typed(branch: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: jax.tree.map(_varying_along, branch(), joined)

  return typed(on_true), typed(on_false)


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


def runs_on_one_device(ctx: Any) -> bool:
  """Whether the code a lowering rule emits works on one device's data alone: a program of one device, or the
  body of a ``shard_map`` manual over every axis of its mesh (each device runs it on its own block)."""
  axis_context = ctx.module_context.axis_context
  num_devices = getattr(axis_context, "num_devices", None)
  if num_devices is not None:  # a jit program (ShardingContext)
    return int(num_devices) == 1
  mesh = getattr(axis_context, "mesh", None)
  if mesh is not None:  # a program partitioned over a mesh (SPMDAxisContext): one device, or every axis manual
    manual: frozenset[Any] = getattr(axis_context, "manual_axes", frozenset())
    return mesh.size == 1 or set(mesh.axis_names) <= set(manual)
  return True  # pmap's body (ReplicaAxisContext): one device's data


def by_program_devices(
  x: jax.Array,
  *,
  one_device: Callable[[jax.Array], Any],
  several: Callable[[jax.Array], Any],
  trace_several: bool = False,
  usable: Callable[[Any], bool] | None = None,
) -> Any:
  """``one_device(x)`` in a program that runs on one device, ``several(x)`` in one spread over several; the two
  must compute the same values (they differ in what they cost where).

  The choice is the program's, made when it is lowered (:func:`runs_on_one_device`), never the process's device
  count: a one-device ``jit`` in a process of eight devices takes ``one_device``, the same code under a
  ``jit`` whose arguments are sharded over a mesh takes ``several`` (automatic axes are known only then). An
  array whose type names explicit mesh axes (sharding in types) is known to be spread at trace time and takes
  ``several`` at once, as does an array with symbolic dimensions. ``one_device`` is traced when this is called,
  ``several`` only when a program of several devices is lowered, unless ``trace_several``: then both now, which
  ``several`` needs where it holds a ``custom_partitioning`` call (JAX gives such a program its devices when
  lowering it only where it finds the call in the program it traced).

  ``usable``: ``one_device`` calls a compiled kernel, which ``usable(ctx)`` (a lowering rule's context) says can
  run: ``one_device`` is then taken only where it also says so (a program lowered for CPU alone and not for
  ``jax.export``, the library loaded), and eagerly (``jax.disable_jit``) ``several`` runs.
  """
  if explicit_spec(x) is not None or not symbolic.is_static(x.shape):
    # A shape with jax.export's symbolic dimensions also takes ``several``: the one-device routes (the halving, the
    # kernels) need static shapes, the partitioner's take any.
    return several(x)
  return _deferred(x, one_device, several, platform.current(), trace_several, usable)


def _deferred(
  x: jax.Array,
  one_device: Callable[[jax.Array], Any],
  several: Callable[[jax.Array], Any],
  choice: platform.Choice,
  trace_several: bool,
  usable: Callable[[Any], bool] | None = None,
) -> Any:
  traced, out_shape = jax.make_jaxpr(one_device, return_shape=True)(x)
  if traced.effects:
    return one_device(x) if usable is None else several(x)
  closes = any(isinstance(c, jax.core.Tracer) for c in traced.consts)
  several_traced = jax.make_jaxpr(several)(x) if trace_several or closes else None
  # Values the functions close over (a tracer of the caller's trace: a peak computed before) become operands.
  one_consts, traced = _hoisted(traced)
  several_consts: list[Any] = []
  if several_traced is not None:
    several_consts, several_traced = _hoisted(several_traced)
  outs = _by_devices_p.bind(
    *one_consts,
    *several_consts,
    x,
    several=several,
    choice=choice,
    traced=traced,
    several_traced=several_traced,
    counts=(len(one_consts), len(several_consts)),
    usable=usable,
  )
  return jax.tree.unflatten(jax.tree.structure(out_shape), outs)


def _hoisted(traced: core.ClosedJaxpr) -> tuple[list[Any], core.ClosedJaxpr]:
  """The consts of ``traced`` and ``traced`` as a function of ``(*consts, *inputs)`` with no consts."""
  jaxpr = traced.jaxpr
  if not jaxpr.constvars:
    return [], traced
  debug_info = jaxpr.debug_info._replace(arg_names=None) if jaxpr.debug_info is not None else None
  opened = jaxpr.replace(constvars=[], invars=[*jaxpr.constvars, *jaxpr.invars], debug_info=debug_info)
  return list(traced.consts), core.ClosedJaxpr(opened, [])


def _split(operands: Any, counts: tuple[int, int]) -> tuple[list[Any], list[Any], Any]:
  """(the one-device function's operands before ``x``, the other's, ``x``)."""
  one, several = counts
  return list(operands[:one]), list(operands[one : one + several]), operands[-1]


_by_devices_p = core.Primitive("dmljax_by_program_devices")
_by_devices_p.multiple_results = True


@_by_devices_p.def_abstract_eval
def _by_devices_abstract_eval(*operands: Any, traced: core.ClosedJaxpr, **_: Any) -> Any:
  del operands
  return traced.out_avals


@_by_devices_p.def_impl
def _by_devices_impl(
  *operands: Any,
  traced: core.ClosedJaxpr,
  several_traced: core.ClosedJaxpr | None,
  several: Callable[[jax.Array], Any],
  choice: platform.Choice,
  counts: tuple[int, int],
  usable: Callable[[Any], bool] | None,
  **_: Any,
) -> Any:
  """Eagerly (``jax.disable_jit``): op by op, as traced for one device (for several, where one device's needs a
  kernel)."""
  one, other, x = _split(operands, counts)
  if usable is None:
    return core.jaxpr_as_fun(traced)(*one, x)
  if several_traced is not None:
    return core.jaxpr_as_fun(several_traced)(*other, x)
  return with_choice(choice, lambda x: jax.tree.leaves(several(x)))(x)


def _by_devices_lowering(
  ctx: Any,
  *operands: Any,
  several: Any,
  choice: platform.Choice,
  traced: core.ClosedJaxpr,
  several_traced: core.ClosedJaxpr | None,
  counts: tuple[int, int],
  usable: Callable[[Any], bool] | None,
) -> Any:
  # mlir.lower_fun traces the function with every operand of the primitive: each function picks its own.
  if runs_on_one_device(ctx) and (usable is None or usable(ctx)):

    def run(*operands: Any) -> Any:
      one, _, x = _split(operands, counts)
      return core.jaxpr_as_fun(traced)(*one, x)

  elif several_traced is not None:
    chosen = several_traced

    def run(*operands: Any) -> Any:
      _, other, x = _split(operands, counts)
      return core.jaxpr_as_fun(chosen)(*other, x)

  else:
    run = with_choice(choice, lambda *operands: jax.tree.leaves(several(operands[-1])))

  return mlir.lower_fun(run, multiple_results=True)(ctx, *operands)


mlir.register_lowering(_by_devices_p, _by_devices_lowering)


def _functions(operands: Any, params: dict[str, Any], transform: Callable[..., Any]) -> tuple[Any, Any]:
  """The two functions of ``x`` that the primitive's parameters stand for, each closing over its operands
  (``operands`` without ``x``), with ``transform(fn, operands)`` applied (vmap, jvp)."""
  one, other, _ = _split(operands, params["counts"])
  one_device = transform(core.jaxpr_as_fun(params["traced"]), one)
  if params["several_traced"] is not None:
    several = transform(core.jaxpr_as_fun(params["several_traced"]), other)
  else:
    several = transform(lambda x: jax.tree.leaves(params["several"](x)), [])
  return one_device, several


def _by_devices_batched(args: Any, dims: Any, **params: Any) -> Any:
  """``vmap``: both functions vmapped (every operand's mapped axis moved to the front), the choice still made
  at lowering."""
  size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
  args = [batching.bdim_at_front(a, d, size) for a, d in zip(args, dims, strict=True)]
  one_device, several = _functions(args, params, lambda fn, closed: lambda x: jax.vmap(fn)(*closed, x))
  outs = jax.tree.leaves(
    _deferred(args[-1], one_device, several, params["choice"], params["several_traced"] is not None, params["usable"])
  )
  return outs, [0] * len(outs)


batching.primitive_batchers[_by_devices_p] = _by_devices_batched


def _by_devices_jvp(primals: Any, tangents: Any, **params: Any) -> Any:
  """The value as the program chooses; the tangent by the one-device function's rule (both compute the same
  function)."""
  tangents = [ad.instantiate_zeros(t) for t in tangents]
  one_device, several = _functions(primals, params, lambda fn, closed: lambda x: fn(*closed, x))
  x = primals[-1]
  outs = jax.tree.leaves(
    _deferred(x, one_device, several, params["choice"], params["several_traced"] is not None, params["usable"])
  )
  _, tangent_outs = jax.jvp(
    lambda *operands: core.jaxpr_as_fun(params["traced"])(*_split(operands, params["counts"])[0], operands[-1]),
    tuple(primals),
    tuple(tangents),
  )
  return outs, tangent_outs


ad.primitive_jvps[_by_devices_p] = _by_devices_jvp
