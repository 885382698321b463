"""A compiled program's cost along one path: each loop body times its trip count, each conditional's branch apart.

A program with ``lax.cond`` and while loops has no one cost: which branch runs and how many passes a loop makes
depend on the data. This module prices the path one input takes, for an H100 or a TPU, without the hardware:

1. **The path** (:func:`record`): the program runs once on the CPU on that input, with ``jax.lax.cond``,
   ``jax.lax.while_loop`` and ``jax.lax.fori_loop`` wrapped (for that run only) so that ``jax.debug.callback``
   reports which branch of each conditional ran and how many passes each loop made. A conditional or loop is
   named by its *key*: the function (file and qualified name) of the Python line that calls it, under the keys of
   the conditionals (with the branch) and loops around it, e.g. ``cond filters.py:decide / branch 1 / loop
   search.py:cut``. Every dmljax decision compares exact integer sums, so the path is the same on every platform;
   a loop guided by float sums (the search's guide) has a fixed trip count, and the exact loop's count is the
   CPU's (the guide's float rounding elsewhere may move it by a pass or two).
2. **The tree** (:func:`tree`): the compiled program's computations, each with its own operations priced, and
   its loops and conditionals under the same keys, read from the Python line XLA records for each
   (:meth:`benchmarks.compiled.hlo.Module.source`). A conditional's branches are in ``lax.cond``'s order
   (branch 0 the false one, 1 the true one).
3. **The cost** (:func:`cost`): the tree along the path. A loop costs its trip count times its body (and, where
   its trip count is not known at compile time, its condition once more than that); a conditional the branch
   that ran.

Prices of one operation:

* **H100**: each launch of the thunk sequence as :mod:`benchmarks.compiled.roofline` prices it (1 µs plus its
  bytes at the bandwidth its grid can use), plus a *host round trip* of :data:`HOST_ROUND_TRIP_S` for every
  conditional that runs and for every evaluation of a while loop's condition whose trip count XLA does not know:
  XLA:GPU's ``ConditionalThunk`` and ``WhileThunk`` copy the predicate to the host and wait for the stream
  (``BlockHostUntilDone``) before they pick what to launch next, outside any CUDA graph. A loop with a trip count
  known at compile time (``known_trip_count``, as ``fori_loop`` gives) runs its body that many times without one.
* **TPU v5e**: XLA's own per-operation estimate, ``estimated_cycles`` in the TPU compiler's final HLO, at the
  chip's :data:`TPU_CLOCK_HZ`; a custom call or a fusion XLA does not estimate (its own ``TopK``, a Mosaic kernel;
  from libtpu 0.0.50 the custom fusion it makes of a sort whose prefix alone is used) its operands (read as many
  times as its ``KERNEL_READ_PASSES`` entry says) and results at :data:`TPU_HBM_BYTES_PER_S`, plus
  :data:`TPU_OP_FLOOR_CYCLES`, the least XLA estimates an operation that writes an array. The TPU runs loops and
  conditionals on the chip: no host round trips.

Every figure is compiled, not run.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.compiled import hlo, launches, roofline
from benchmarks.compiled.launches import Launch

Key = tuple[str, ...]
# An assumption of this model, not an XLA figure: the predicate's device-to-host copy (cudaMemcpyAsync alone
# takes 5 to 7 µs to submit: Wu et al., "DualPath", arXiv 2602.21548, section 5.2), the drained stream, and the
# next launch issued from the host to an idle GPU. The reports count the round trips apart, to re-weigh.
HOST_ROUND_TRIP_S = 10e-6
# TPU v5e: 197 TFLOP/s of bfloat16 from four 128x128 MXUs (2 flops a cell a cycle) is a 1.5 GHz clock; 819 GB/s
# of HBM (Google Cloud's TPU v5e figures).
TPU_CLOCK_HZ = 1.5e9
TPU_HBM_BYTES_PER_S = 819e9
# The least estimated_cycles XLA's TPU compiler (libtpu 0.0.42 and 0.0.50) gives an operation that writes an array (a
# broadcast of 8 words; copies of a few words get less): its fixed cost of an operation (tests/test_compiled_paths.py).
TPU_OP_FLOOR_CYCLES = 1824
_BOOKKEEPING = frozenset({"AllocateBuffer"})  # TPU custom calls that reserve memory and run nothing
_JAX = re.compile(r"[/\\](jax|jaxlib)[/\\]")


def _file_name(filename: str) -> str:
  """A file's name without its folder (as :attr:`hlo.Source.file`)."""
  return filename.replace("\\", "/").rsplit("/", 1)[-1]


# dmljax's helpers whose one ``lax.while_loop`` serves several callers (``each_row.each``, the loop over the rows
# that need their whole row): each call names its loop (a ``jax.named_scope`` in the compiled program, the helper's
# ``name`` argument while it is traced), and its loop is keyed by that name, not by the helper's own line.
NAMED_LOOPS = frozenset({"each_row.py"})


def _site(source: hlo.Source | None, instruction: hlo.Instruction | None = None) -> str:
  if source is None:
    return "?"
  if source.file in NAMED_LOOPS and instruction is not None:
    found = re.search(r'op_name="([^"]*)"', instruction.attributes)
    scopes = found.group(1).split("/") if found else []
    return f"{source.file}[{scopes[-2] if len(scopes) >= 2 else '?'}]"
  return f"{source.file}:{source.function}"


# --- the path, recorded on the CPU -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Path:
  """The branch each conditional took and the passes each loop made (per execution), on one input."""

  branches: dict[Key, int]
  trips: dict[Key, float]
  executions: dict[Key, int]  # how many times each loop ran in the recorded calls

  def to_json(self) -> dict[str, Any]:
    return {
      "branches": {" / ".join(k): b for k, b in self.branches.items()},
      "trips": {" / ".join(k): t for k, t in self.trips.items()},
    }


class _Recorder:
  """Wraps ``jax.lax.cond``, ``while_loop`` and ``fori_loop`` while a program is traced; counts what runs."""

  def __init__(self) -> None:
    self.stack: list[str] = []
    self.branches: dict[Key, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    self.passes: collections.Counter[Key] = collections.Counter()
    self.entered: collections.Counter[Key] = collections.Counter()

  def _caller(self) -> str:
    """``file:qualified name`` of the innermost frame outside jax and this module (the line that calls lax); in a
    helper that names its loops (:data:`NAMED_LOOPS`), ``file[name]``."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename == __file__ or _JAX.search(frame.f_code.co_filename)):
      frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
      return "?"
    file = _file_name(frame.f_code.co_filename)
    if file in NAMED_LOOPS:
      return f"{file}[{frame.f_locals.get('name', '?')}]"
    return f"{file}:{frame.f_code.co_qualname}"

  @contextlib.contextmanager
  def _inside(self, *names: str) -> Iterator[None]:
    self.stack.extend(names)
    try:
      yield
    finally:
      del self.stack[-len(names) :]

  def cond(self, real: Callable[..., Any]) -> Callable[..., Any]:
    def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any, **kw: Any) -> Any:
      import jax

      key = (*self.stack, f"cond {self._caller()}")

      def branch(fun: Callable[..., Any], index: int) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
          jax.debug.callback(functools.partial(self._took, key, index))
          with self._inside(*key[len(self.stack) :], f"branch {index}"):
            return fun(*args)

        return run

      return real(pred, branch(true_fun, 1), branch(false_fun, 0), *operands, **kw)

    return cond

  def while_loop(self, real: Callable[..., Any]) -> Callable[..., Any]:
    def while_loop(cond_fun: Callable[..., Any], body_fun: Callable[..., Any], init_val: Any) -> Any:
      import jax

      key = (*self.stack, f"loop {self._caller()}")
      jax.debug.callback(functools.partial(self._entered, key))

      def body(value: Any) -> Any:
        jax.debug.callback(functools.partial(self._pass, key))
        with self._inside(key[-1], "body"):
          return body_fun(value)

      return real(cond_fun, body, init_val)

    return while_loop

  def fori_loop(self, real: Callable[..., Any]) -> Callable[..., Any]:
    def fori_loop(lower: Any, upper: Any, body_fun: Callable[..., Any], init_val: Any, **kw: Any) -> Any:
      import jax

      key = (*self.stack, f"loop {self._caller()}")
      jax.debug.callback(functools.partial(self._entered, key))

      def body(i: Any, value: Any) -> Any:
        jax.debug.callback(functools.partial(self._pass, key))
        with self._inside(key[-1], "body"):
          return body_fun(i, value)

      return real(lower, upper, body, init_val, **kw)

    return fori_loop

  def _took(self, key: Key, index: int) -> None:
    self.branches[key][index] += 1

  def _entered(self, key: Key) -> None:
    self.entered[key] += 1

  def _pass(self, key: Key) -> None:
    self.passes[key] += 1


def record(fn: Callable[..., Any], *args: Any) -> Path:
  """The path ``jax.jit(fn)(*args)`` takes on the CPU (traced afresh, with the control flow wrapped), through the
  XLA composition the accelerators compile (``cpu_kernel=False``: the CPU's compiled kernels hold no such control
  flow)."""
  import jax

  from dmljax._src import platform

  recorder = _Recorder()
  names = ("cond", "while_loop", "fori_loop")
  real = {name: getattr(jax.lax, name) for name in names}
  jax.clear_caches()  # dmljax's jitted functions must be traced again, under the wrappers
  try:
    for name in names:
      setattr(jax.lax, name, getattr(recorder, name)(real[name]))
    with platform.choosing(cpu_kernel=False):
      jax.block_until_ready(jax.jit(fn)(*args))
      jax.effects_barrier()
  finally:
    for name in names:
      setattr(jax.lax, name, real[name])
    jax.clear_caches()
  branches = {}
  for key, taken in recorder.branches.items():
    if len(taken) != 1:
      raise ValueError(f"{' / '.join(key)} took both branches in one call: {dict(taken)}")
    branches[key] = next(iter(taken))
  trips = {key: recorder.passes[key] / runs for key, runs in recorder.entered.items() if runs}
  return Path(branches, trips, dict(recorder.entered))


@contextlib.contextmanager
def inlined(branch: int) -> Iterator[None]:
  """Within the block, ``jax.lax.cond`` is its branch ``branch`` (1 the true one, 0 the false one), called directly.

  A program traced and compiled in the block is the program of one path, without its conditionals: XLA's TPU
  compiler gives no ``optimal_seconds`` for a program with a conditional, and does for each of these. dmljax's
  conditionals are ``lax.cond(any row needs it, the work, skip)``: branch 0 is the path that skips the work.
  """
  import jax

  real = jax.lax.cond

  def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any, **kw: Any) -> Any:
    del pred, kw
    return (true_fun if branch == 1 else false_fun)(*operands)

  jax.clear_caches()
  jax.lax.cond = cond
  try:
    yield
  finally:
    jax.lax.cond = real
    jax.clear_caches()


# --- the tree of a compiled program ------------------------------------------------------------------------------


@dataclasses.dataclass
class Op:
  """One priced operation: its seconds, bytes and kernel launches (GPU)."""

  name: str
  seconds: float
  bytes: int
  launches: int


@dataclasses.dataclass
class Node:
  """A computation: its own operations, and the loops and conditionals it runs."""

  key: Key
  ops: list[Op]
  loops: list[Loop]
  conds: list[Cond]


@dataclasses.dataclass
class Loop:
  key: Key
  instruction: str
  known_trips: int | None  # XLA's known_trip_count (GPU), where it has one
  body: Node
  condition: Node


@dataclasses.dataclass
class Cond:
  key: Key
  instruction: str
  branches: list[Node]  # in lax.cond's order: 0 false, 1 true


def _known_trips(instruction: hlo.Instruction) -> int | None:
  config = instruction.attribute("backend_config")
  if not config:
    return None
  try:
    found = json.loads(config).get("known_trip_count")
  except ValueError:
    return None
  return int(found["n"]) if found else None


def _branches(instruction: hlo.Instruction) -> list[str]:
  """A conditional's branch computations in ``lax.cond``'s order (a predicate's false branch first)."""
  listed = instruction.attribute("branch_computations")
  if listed:
    return re.findall(r"%([\w.\-$]+)", listed)
  return [(instruction.attribute(k) or "").lstrip("%") for k in ("false_computation", "true_computation")]


Pricer = Callable[[hlo.Instruction], Op | None]


def _node(module: hlo.Module, computation: hlo.Computation, key: Key, price: Pricer) -> Node:
  node = Node(key, [], [], [])
  for instruction in computation.instructions:
    if instruction.opcode == "while":
      loop_key = (*key, f"loop {_site(module.source(instruction), instruction)}")
      body = module.computations[(instruction.attribute("body") or "").lstrip("%")]
      condition = module.computations[(instruction.attribute("condition") or "").lstrip("%")]
      node.loops.append(
        Loop(
          loop_key,
          instruction.name,
          _known_trips(instruction),
          _node(module, body, (*loop_key, "body"), price),
          _node(module, condition, (*loop_key, "condition"), price),
        )
      )
    elif instruction.opcode == "conditional":
      cond_key = (*key, f"cond {_site(module.source(instruction))}")
      branches = [module.computations[name] for name in _branches(instruction)]
      node.conds.append(
        Cond(
          cond_key,
          instruction.name,
          [_node(module, b, (*cond_key, f"branch {i}"), price) for i, b in enumerate(branches)],
        )
      )
    elif instruction.opcode == "call":
      inner = _node(module, module.called(instruction)[0], key, price)
      node.ops += inner.ops
      node.loops += inner.loops
      node.conds += inner.conds
    else:
      op = price(instruction)
      if op is not None:
        node.ops.append(op)
  return node


def gpu_pricer(module: hlo.Module, sequence: list[Launch], spec: Any) -> Pricer:
  """Each instruction's launches from the thunk sequence (:func:`launches.from_thunks`), priced by the roofline."""
  passes = roofline.kernel_read_passes()
  by_instruction: dict[str, list[Launch]] = collections.defaultdict(list)
  for launch in sequence:
    by_instruction[launch.instruction].append(launch)
  unmatched = [name for name in by_instruction if name not in module.instructions]
  if unmatched:
    raise ValueError(f"thunks with no HLO instruction: {unmatched[:5]}")

  def price(instruction: hlo.Instruction) -> Op | None:
    found = by_instruction.get(instruction.name)
    if not found:
      return None
    kernels = sum(f.kernels for f in found if f.category not in ("memcpy", "memset"))
    return Op(
      instruction.name,
      sum(roofline.launch_seconds(f, spec, passes) for f in found),
      int(sum(f.read_bytes * passes.get(f.target, 1.0) + f.write_bytes for f in found)),
      kernels,
    )

  return price


def tpu_pricer(module: hlo.Module) -> Pricer:
  """XLA's ``estimated_cycles`` of each operation; a Mosaic kernel or a fusion without one by its bytes (see the
  module's docstring)."""
  passes = roofline.kernel_read_passes()
  least = TPU_OP_FLOOR_CYCLES / TPU_CLOCK_HZ

  def price(instruction: hlo.Instruction) -> Op | None:
    found = instruction.estimated_cycles()
    if found is not None:
      launch = launches.launch(module, instruction)
      return Op(instruction.name, found / TPU_CLOCK_HZ, launch.bytes, 1)
    kernel = instruction.opcode == "custom-call" and instruction.custom_call_target not in _BOOKKEEPING
    if kernel or instruction.opcode == "fusion":
      launch = launches.launch(module, instruction)
      read = launch.read_bytes * passes.get(launch.target, 1.0)
      moved = int(read) + launch.write_bytes
      return Op(instruction.name, least + moved / TPU_HBM_BYTES_PER_S, moved, 1)
    return None  # scalar work of the core, a buffer's bookkeeping: XLA estimates none

  return price


def tree(module: hlo.Module, price: Pricer) -> Node:
  """The program's tree (:class:`Node` of the entry computation)."""
  return _node(module, module.entry, (), price)


# --- the cost along a path ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Cost:
  seconds: float = 0.0
  bytes: int = 0
  launches: int = 0
  round_trips: int = 0  # host round trips (GPU), included in ``seconds``

  def __add__(self, other: Cost) -> Cost:
    return Cost(
      self.seconds + other.seconds,
      self.bytes + other.bytes,
      self.launches + other.launches,
      self.round_trips + other.round_trips,
    )

  def times(self, n: float) -> Cost:
    return Cost(self.seconds * n, int(self.bytes * n), round(self.launches * n), round(self.round_trips * n))


def _round_trips(n: float, gpu: bool) -> Cost:
  return Cost(seconds=n * HOST_ROUND_TRIP_S, round_trips=round(n)) if gpu else Cost()


def cost(node: Node, path: Path, *, gpu: bool) -> Cost:
  """The cost of ``node`` along ``path`` (a conditional or unknown loop the path does not name is an error)."""
  total = Cost()
  for op in node.ops:
    total = total + Cost(op.seconds, op.bytes, op.launches)
  for loop in node.loops:
    trips = path.trips.get(loop.key, loop.known_trips)
    if trips is None:
      raise KeyError(f"the path does not say how many passes {' / '.join(loop.key)} ({loop.instruction}) makes")
    if trips:  # a body that never runs costs nothing, and its conditionals took no branch the path could name
      total = total + cost(loop.body, path, gpu=gpu).times(trips)
    if loop.known_trips is None:  # the condition runs once more than the body, each time read by the host (GPU)
      total = total + cost(loop.condition, path, gpu=gpu).times(trips + 1) + _round_trips(trips + 1, gpu)
  for cond in node.conds:
    if cond.key not in path.branches:
      raise KeyError(f"the path does not say which branch {' / '.join(cond.key)} ({cond.instruction}) takes")
    total = total + cost(cond.branches[path.branches[cond.key]], path, gpu=gpu) + _round_trips(1, gpu)
  return total


def conditionals(node: Node) -> Iterator[Cond]:
  """Every conditional of the tree, outermost first."""
  for cond in node.conds:
    yield cond
    for branch in cond.branches:
      yield from conditionals(branch)
  for loop in node.loops:
    yield from conditionals(loop.body)


def loops(node: Node) -> Iterator[Loop]:
  """Every loop of the tree, outermost first."""
  for loop in node.loops:
    yield loop
    yield from loops(loop.body)
  for cond in node.conds:
    for branch in cond.branches:
      yield from loops(branch)


def keyed(path: Path, node: Node) -> list[str]:
  """The keys the path names that the tree lacks (XLA simplified them away, or the sites differ)."""
  present = {c.key for c in conditionals(node)} | {loop.key for loop in loops(node)}
  return [" / ".join(k) for k in (*path.branches, *path.trips) if k not in present]


def describe(node: Node, path: Path, *, gpu: bool) -> list[dict[str, Any]]:
  """Every conditional and loop the path reaches, with each branch costed apart and each loop's trips."""
  out: list[dict[str, Any]] = []
  for cond in conditionals(node):
    reached = cond.key in path.branches
    branches = []
    for branch in cond.branches:
      try:
        branches.append(cost(branch, path, gpu=gpu).seconds)
      except KeyError:  # a branch the path never enters: its loops' trips are unknown
        branches.append(None)
    out.append(
      {
        "conditional": " / ".join(cond.key),
        "taken": path.branches.get(cond.key) if reached else None,
        "branch_seconds": branches,
      }
    )
  for loop in loops(node):
    trips = path.trips.get(loop.key)  # None: the path never reaches the loop
    body = None
    with contextlib.suppress(KeyError):
      body = cost(loop.body, path, gpu=gpu).seconds
    out.append(
      {
        "loop": " / ".join(loop.key),
        "trips": trips,
        "known_trips": loop.known_trips,
        "body_seconds": body,
      }
    )
  return out
