"""Per-platform implementations, and the trace-time choices that tests and benchmarks make on CPU.

Every place that picks an implementation by platform calls :func:`branch`, with a
``cpu``, ``cuda``, ``tpu`` and a ``default`` branch (ROCm and any other platform take
``default``). ``jax.export`` for several platforms lowers every branch.

Only the branch of the default backend is traced when :func:`branch` is called; the
others are traced when a program is lowered for their platform (a primitive with one
lowering rule per platform, each rule tracing its branch then). A
``lax.platform_dependent`` traces every branch at once, Pallas kernels and TPU paths
included, which made a CPU program's trace several times slower than the code it
runs. Under ``jax.vmap`` every branch is vmapped, still lazily; under
differentiation the branches are traced together by ``lax.platform_dependent``,
as the implementations are called under a ``custom_jvp`` nearly everywhere.

A :class:`Choice` changes what is traced (private, for tests and benchmarks): a
forced branch traces that branch alone whatever the platform, so a CPU-only CI runs
the code GPUs and TPUs compile; a forced top-k strategy replaces the strategy table's
pick; ``interpret`` runs Pallas kernels in interpret mode. The choice is read while
tracing, and it is part of every trace-cache key JAX has: it is a JAX configuration
state included in JAX's trace context (as ``jax_numpy_rank_promotion`` is), so any
function, the library's or a caller's, jitted or wrapped in ``custom_jvp``,
``custom_vmap`` or ``shard_map``, traces again under a new choice instead of reusing a
program traced under another one, whatever ran before in the process (no cache is
cleared). The library's own jitted entry points also take :func:`current` as a static
argument. The choice is per thread: a change made in one thread is not seen by
another, so two threads tracing under different choices do not swap each other's; a
new thread starts with the default choice.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Literal

import jax
from jax import lax
from jax._src import config as jax_config
from jax.extend import core
from jax.interpreters import ad, batching, mlir

Branch = Literal["cpu", "cuda", "tpu", "default"]
BRANCHES: tuple[Branch, ...] = ("cpu", "cuda", "tpu", "default")
Implementation = Callable[[jax.Array], Any]


@dataclasses.dataclass(frozen=True)
class Choice:
  """What the library traces: a forced platform branch, a forced top-k strategy, Pallas interpret mode.

  ``cpu_kernel=False`` keeps the compiled CPU kernels out (the top-k kernel out of the CPU table's picks,
  REDUCE MAX/MIN's kernel out of its path): what a build without a C++ compiler runs.
  """

  branch: Branch | None = None
  top_k: str | None = None
  interpret: bool = False
  cpu_kernel: bool = True


# The choice in force in this thread: a JAX configuration state in JAX's trace context, so that every cache of
# traces JAX keeps (jit's, and those behind custom_jvp, custom_vmap, shard_map and the rest, which key on the
# function and the trace context) tells apart programs traced under different choices. Swapped while a branch is
# lowered (_restored). The default is a frozen dataclass, never mutated (changes replace it).
_choice = jax_config.string_or_object_state(
  "dmljax_platform_choice",
  Choice(),
  "dmljax's trace-time platform choice (private: for dmljax's tests and benchmarks).",
  include_in_jit_key=True,
  include_in_trace_context=True,
)


def _set(choice: Choice) -> None:
  _choice.set_local(choice)


def current() -> Choice:
  """The choice in force (pass it as a static argument of a jitted entry point)."""
  return _choice.value


@contextlib.contextmanager
def choosing(**changes: Any) -> Iterator[Choice]:
  """The current choice with ``changes`` (fields of :class:`Choice`) within the block."""
  previous = current()
  chosen = dataclasses.replace(previous, **changes)
  if chosen.branch not in (None, *BRANCHES):
    raise ValueError(f"branch must be one of {BRANCHES} or None; got {changes['branch']!r}")
  _set(chosen)
  try:
    yield chosen
  finally:
    _set(previous)


def force(which: Branch | None) -> None:
  """From now on (in this thread) every :func:`branch` traces ``which`` only (``None``: choose by platform)."""
  if which not in (None, *BRANCHES):
    raise ValueError(f"which must be one of {BRANCHES} or None; got {which!r}")
  _set(dataclasses.replace(current(), branch=which))


def forced(which: Branch | None) -> contextlib.AbstractContextManager[Choice]:
  """:func:`force` within the block, the previous choice after it."""
  return choosing(branch=which)


def branch(
  x: jax.Array,
  *,
  cpu: Implementation,
  default: Implementation,
  cuda: Implementation | None = None,
  tpu: Implementation | None = None,
) -> Any:
  """``cpu(x)`` on CPU, ``cuda(x)`` on CUDA GPUs, ``tpu(x)`` on TPUs, ``default(x)`` elsewhere.

  A missing ``cuda`` or ``tpu`` implementation is ``default``. Under a forced branch only that
  branch is traced.
  """
  implementations: dict[str, Implementation] = {"cpu": cpu, "default": default}
  if cuda is not None:
    implementations["cuda"] = cuda
  if tpu is not None:
    implementations["tpu"] = tpu
  choice = current()
  if choice.branch is not None:
    return implementations.get(choice.branch, default)(x)
  return _deferred(x, implementations, choice)


def _home() -> Branch | None:
  """The branch of the default backend, traced when :func:`branch` is called (``None``: trace every branch)."""
  backend = jax.default_backend()
  if backend == "cpu":
    return "cpu"
  return "tpu" if backend == "tpu" else None  # GPUs: CUDA or ROCm, told apart at lowering only


@contextlib.contextmanager
def _restored(choice: Choice) -> Iterator[None]:
  """``choice`` in force within the block: a branch traced at lowering time sees the choice of its call."""
  previous = current()
  _set(choice)
  try:
    yield
  finally:
    _set(previous)


def _all_branches(x: jax.Array, implementations: dict[str, Implementation], choice: Choice) -> Any:
  with _restored(choice):
    return lax.platform_dependent(x, **implementations)


def _deferred(x: jax.Array, implementations: dict[str, Implementation], choice: Choice) -> Any:
  """The branches as one :data:`_branch_p`: the home branch traced now, the others when lowered."""
  home = _home()
  if home is None:
    return _all_branches(x, implementations, choice)
  traced, out_shape = jax.make_jaxpr(implementations.get(home, implementations["default"]), return_shape=True)(x)
  if any(isinstance(c, jax.core.Tracer) for c in traced.consts) or traced.effects:
    return _all_branches(x, implementations, choice)
  outs = _branch_p.bind(
    x,
    implementations=tuple(implementations.items()),
    choice=choice,
    home=home,
    traced=traced,
    out_tree=jax.tree.structure(out_shape),
  )
  return jax.tree.unflatten(jax.tree.structure(out_shape), outs)


_branch_p = core.Primitive("dmljax_platform_branch")
_branch_p.multiple_results = True


@_branch_p.def_abstract_eval
def _branch_abstract_eval(x: Any, *, traced: core.ClosedJaxpr, **_: Any) -> Any:
  del x
  return traced.out_avals


@_branch_p.def_impl
def _branch_impl(x: jax.Array, *, traced: core.ClosedJaxpr, **_: Any) -> Any:
  """Eagerly (outside ``jit``, or under ``jax.disable_jit``): the branch of the default backend, as traced."""
  return core.jaxpr_as_fun(traced)(x)


def _lowering(which: str) -> Callable[..., Any]:
  """The rule that lowers the branch of platform ``which`` (``"default"``: any platform without its own)."""

  def lower(
    ctx: mlir.LoweringRuleContext,
    x: Any,
    *,
    implementations: tuple[tuple[str, Implementation], ...],
    choice: Choice,
    home: str,
    traced: core.ClosedJaxpr,
    out_tree: Any,
  ) -> Any:
    del out_tree
    if which == home:
      return mlir.lower_fun(core.jaxpr_as_fun(traced), multiple_results=True)(ctx, x)
    chosen = dict(implementations).get(which, dict(implementations)["default"])

    def run(x: jax.Array) -> list[jax.Array]:
      with _restored(choice):
        return jax.tree.leaves(chosen(x))

    return mlir.lower_fun(run, multiple_results=True)(ctx, x)

  return lower


for _which in ("cpu", "cuda", "tpu"):
  mlir.register_lowering(_branch_p, _lowering(_which), platform=_which)
mlir.register_lowering(_branch_p, _lowering("default"))


def _branch_batched(
  args: tuple[jax.Array], dims: tuple[Any], *, implementations: Any, choice: Choice, **_: Any
) -> tuple[list[jax.Array], list[int]]:
  """``vmap``: every branch vmapped, and still traced only when its platform is lowered."""
  (x,), (axis,) = args, dims
  vmapped = {which: jax.vmap(f, in_axes=axis) for which, f in implementations}
  outs = jax.tree.leaves(_deferred(x, vmapped, choice))
  return outs, [0] * len(outs)


batching.primitive_batchers[_branch_p] = _branch_batched


def _branch_jvp(primals: Any, tangents: Any, *, implementations: Any, choice: Choice, **_: Any) -> Any:
  """Differentiation: every branch traced now, by ``lax.platform_dependent``."""
  tangents = [ad.instantiate_zeros(t) for t in tangents]

  def run(x: jax.Array) -> list[jax.Array]:
    return jax.tree.leaves(_all_branches(x, dict(implementations), choice))

  return jax.jvp(run, tuple(primals), tuple(tangents))


ad.primitive_jvps[_branch_p] = _branch_jvp
