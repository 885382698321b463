"""What a compiled program runs: its launches with their HBM bytes, its sorts, its custom calls.

A *launch* is one device operation of the program: a kernel (an XLA fusion, a sort, a custom kernel such as
XLA's ``__gpu$TopK``, a Pallas call through Mosaic GPU or Triton, the passes of a CUB radix sort), a memcpy or a
memset. On GPU they come from the thunk sequence where compilation finished, from the optimized HLO otherwise (every
instruction of the entry computation that is not free, such as a tuple or a bitcast, with loop bodies and
branches counted once); on TPU, which runs the whole program as one executable, the same HLO walk counts its
operations. Each launch's bytes are its operands read plus its results written, from the HLO shapes, with
two refinements that XLA's own cost model also makes: an operand that a fusion only reads through a gather
or a slice counts the elements taken, and a scatter or dynamic-update-slice that updates its operand in place
counts the update, not the whole buffer.

A *whole-row sort* is a sort (an HLO ``sort``, or a CUB sort custom call) whose sorted segment holds at least
``row`` elements, where ``row`` is the length of the axis the operator selects along (or the product of its
axes): for ``dml.top_k`` on ``f32[64,131072]``, a sort over segments of 131072 elements.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re

from benchmarks.compiled import cub_sort, hlo, thunks

FREE = frozenset(
  {
    "parameter",
    "constant",
    "get-tuple-element",
    "tuple",
    "bitcast",
    "after-all",
    "partition-id",
    "replica-id",
    "opt-barrier",
    "add-dependency",
    "async-done",
    "async-update",
    "copy-done",
    "send-done",
    "recv-done",
    "all-reduce-done",
    "all-gather-done",
    "collective-permute-done",
  }
)
CONTROL = frozenset({"while", "conditional", "call"})
COLLECTIVES = re.compile(r"^(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast)")
TRITON = "__gpu$xla.gpu.triton"
MOSAIC_GPU = "mosaic_gpu_v2"
# The custom calls of Pallas's GPU backends, whose kernels the reports name.
PALLAS = frozenset({TRITON, MOSAIC_GPU})


@dataclasses.dataclass(frozen=True)
class Launch:
  """One device operation: ``category`` is fusion, sort, cub_sort, custom_call, pallas, memcpy, memset or collective."""

  instruction: str
  category: str
  target: str  # custom-call target, Pallas kernel name or thunk kernel name
  read_bytes: int
  write_bytes: int
  kernels: int = 1  # kernel launches it stands for (a CUB radix sort: one per pass)
  blocks: int | None = None  # the grid's block count, where the thunk sequence gives it
  xla_us: float | None = None  # XLA's GPU performance model for this fusion, where XLA recorded one

  @property
  def bytes(self) -> int:
    return self.read_bytes + self.write_bytes


@dataclasses.dataclass(frozen=True)
class Sort:
  """A sort of the program: its keys' shape and type, and the length of each sorted segment."""

  instruction: str
  kind: str  # "sort" (XLA's) or the CUB custom-call target
  dtypes: tuple[str, ...]
  shape: tuple[int, ...]
  length: int

  def whole_row(self, row: int | None) -> bool:
    return row is not None and self.length >= row


def _through_bitcasts(computation: hlo.Computation, name: str) -> list[tuple[hlo.Instruction, int]]:
  uses = []
  for user, position in computation.users(name):
    uses += _through_bitcasts(computation, user.name) if user.opcode == "bitcast" else [(user, position)]
  return uses


def _in_place(module: hlo.Module, body: hlo.Computation) -> list[hlo.Instruction]:
  """The scatters and dynamic-update-slices that produce a fusion's results (they update their operand 0)."""
  root = body.root
  outputs = [module.instructions[n] for n in root.operands] if root.opcode == "tuple" else [root]
  return [o for o in outputs if o.opcode in ("scatter", "dynamic-update-slice")]


def _update_bytes(module: hlo.Module, update: hlo.Instruction) -> int:
  """Bytes an in-place update writes: the update operand (a scatter's last, a dynamic-update-slice's second)."""
  return module.instructions[update.operands[1 if update.opcode == "dynamic-update-slice" else -1]].bytes


def _fusion_bytes(module: hlo.Module, fusion: hlo.Instruction) -> tuple[int, int]:
  """``(read, written)`` bytes of a fusion, counting sliced/gathered operands and in-place updates as taken."""
  body = module.called(fusion)[0]
  updates = _in_place(module, body)
  written = fusion.bytes - sum(u.bytes - _update_bytes(module, u) for u in updates)
  read = 0
  for index, operand in enumerate(fusion.operands):
    full = module.instructions[operand].bytes
    parameter = body.parameter(index)
    uses = _through_bitcasts(body, parameter.name) if parameter is not None else []
    if uses and all(u.opcode in ("gather", "slice", "dynamic-slice") and p == 0 for u, p in uses):
      read += min(full, sum(u.bytes for u, _ in uses))
    elif not (uses and all(u in updates and p == 0 for u, p in uses)):
      read += full
  return read, max(written, 0)


def _operand_bytes(module: hlo.Module, instruction: hlo.Instruction) -> int:
  return sum(module.instructions[o].bytes for o in instruction.operands if o in module.instructions)


def pallas_name(instruction: hlo.Instruction) -> str:
  """The Pallas kernel's name: a Triton call's ``name`` field; for a Mosaic GPU call, the name its serialized
  module carries both as its own symbol and in its entry point ``<name>_mosaic_gpu`` (the module's strings are
  NUL-separated, ``\\00`` in the HLO text)."""
  if instruction.custom_call_target != MOSAIC_GPU:
    found = re.search(r'\bname = "([^"]+)"', instruction.attributes)
    return found.group(1) if found else ""
  for name in re.findall(r"\\00([A-Za-z0-9_.$-]+?)_mosaic_gpu\\00", instruction.attributes):
    if f"\\00{name}\\00" in instruction.attributes:
      return name
  return ""


def launch(module: hlo.Module, instruction: hlo.Instruction, blocks: int | None = None) -> Launch:
  """The launch an HLO instruction makes (a CUB sort's passes modelled by :func:`cub_sort.cub_radix_sort`)."""
  name, opcode = instruction.name, instruction.opcode
  read, written = _operand_bytes(module, instruction), instruction.bytes
  if opcode in ("copy", "copy-start"):
    return Launch(name, "memcpy", "", read, written)
  if COLLECTIVES.match(opcode):
    return Launch(name, "collective", opcode, read, written)
  if opcode == "custom-call":
    target = instruction.custom_call_target or ""
    if "cub" in target and "sort" in target:
      keys = module.instructions[instruction.operands[0]]
      values = sum(module.instructions[o].bytes for o in instruction.operands[1:])
      (dtype, _), *_ = hlo.arrays(keys.shape)
      batch = re.search(r"batch_size = (\d+)", instruction.attributes)
      model = cub_sort.cub_radix_sort(keys.bytes, values, hlo.element_bits(dtype), int(batch.group(1)) if batch else 1)
      return Launch(name, "cub_sort", target, model.read_bytes, model.write_bytes, model.kernels, model.blocks)
    if target in PALLAS:
      return Launch(name, "pallas", pallas_name(instruction) or target, read, written, blocks=blocks)
    return Launch(name, "custom_call", target, read, written, blocks=blocks)
  cost = instruction.reification_cost()
  xla_us = cost["exec_time_us"] if cost else None
  if opcode == "fusion":
    read, written = _fusion_bytes(module, instruction)
    category = "sort" if module.contains(instruction, "sort") else "fusion"
    return Launch(name, category, "", read, written, blocks=blocks, xla_us=xla_us)
  return Launch(name, "sort" if opcode == "sort" else "fusion", opcode, read, written, blocks=blocks, xla_us=xla_us)


def from_hlo(module: hlo.Module, computation: hlo.Computation | None = None) -> list[Launch]:
  """The launches of a program read from its HLO: one per non-free instruction, loop bodies counted once."""
  found: list[Launch] = []
  for instruction in (computation or module.entry).instructions:
    if instruction.opcode in FREE:
      continue
    if instruction.opcode in CONTROL:
      for called in module.called(instruction):
        found += from_hlo(module, called)
      continue
    found.append(launch(module, instruction))
  return found


def from_thunks(module: hlo.Module, sequence: list[thunks.Thunk]) -> list[Launch]:
  """The launches of a compiled GPU program from its thunks, each matched to its HLO instruction for bytes."""
  found = []
  for thunk in sequence:
    category = thunk.category
    if category == "control":
      continue
    instruction = module.instructions.get(thunk.instruction or "")
    if instruction is None:
      found.append(Launch(thunk.instruction or thunk.kernel, category, thunk.kernel, 0, 0, blocks=thunk.blocks))
    elif category in ("memcpy", "memset"):
      # A copy thunk of a non-copy instruction (e.g. a sort copying its input into its output buffer):
      # one operand read and written.
      size = module.instructions[instruction.operands[0]].bytes if instruction.operands else instruction.bytes
      read = _operand_bytes(module, instruction) if instruction.opcode == "copy" else size
      written = instruction.bytes if instruction.opcode == "copy" else size
      found.append(Launch(instruction.name, category, thunk.kind, 0 if category == "memset" else read, written))
    else:
      found.append(dataclasses.replace(launch(module, instruction, thunk.blocks), blocks=thunk.blocks))
  return found


def sorts(module: hlo.Module) -> list[Sort]:
  """Every sort of the program, fused ones included, and every CUB sort custom call."""
  found = []
  for instruction in module.instructions.values():
    target = instruction.custom_call_target or ""
    if instruction.opcode == "sort":
      (_, dims), *_ = hlo.arrays(module.instructions[instruction.operands[0]].shape)
      dimension = int((instruction.attribute("dimensions") or "{0}").strip("{}").split(",")[0])
      types = tuple(hlo.arrays(module.instructions[o].shape)[0][0] for o in instruction.operands)
      found.append(Sort(instruction.name, "sort", types, dims, dims[dimension]))
    elif instruction.opcode == "custom-call" and "cub" in target and "sort" in target:
      (_, dims), *_ = hlo.arrays(module.instructions[instruction.operands[0]].shape)
      batch = re.search(r"batch_size = (\d+)", instruction.attributes)
      types = tuple(hlo.arrays(module.instructions[o].shape)[0][0] for o in instruction.operands)
      found.append(Sort(instruction.name, target, types, dims, math.prod(dims) // int(batch.group(1) if batch else 1)))
  return found


def custom_calls(module: hlo.Module) -> dict[str, int]:
  """How many custom calls of each target the program makes (a Pallas call as ``target (kernel name)``)."""
  counts: collections.Counter[str] = collections.Counter()
  for instruction in module.instructions.values():
    if instruction.opcode == "custom-call":
      target = instruction.custom_call_target or "?"
      name = pallas_name(instruction)
      counts[f"{target} ({name})" if name else target] += 1
  return dict(counts)
