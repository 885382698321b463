"""A reader for XLA's optimized HLO text (``*after_optimizations.txt``): computations, instructions, shapes.

Only what the harness needs: every instruction's name, opcode, result shape, operands and attribute text,
grouped by computation, with the byte size of any shape. Shapes print as ``f32[64,131072]{1,0}``, tuples
as ``(f32[64,8]{1,0}, s32[64,8]{1,0})``; TPU layouts add tiling (``{1,0:T(8,128)S(1)}``), which the byte
sizes ignore (they count the logical elements). An instruction's ``stack_frame_id`` names the Python line that made
it, through the module's ``FileNames``, ``FunctionNames``, ``FileLocations`` and ``StackFrames`` tables
(:meth:`Module.source`); the TPU compiler's final HLO (``after_codegen``) also gives each operation XLA's
``estimated_cycles`` (:meth:`Instruction.estimated_cycles`).

XLA from jaxlib 0.12 on names an element of a tuple-shaped operand in place (``custom-call(%call.7#1)``, element 1
of ``%call.7``) where older releases printed a ``get-tuple-element`` first; the reader gives every such operand an
instruction of its own, named as written (``call.7#1``), with the element's shape, so that an operand's bytes are
its element's either way.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

# Bits per element of each HLO primitive type.
_BITS = {
  "pred": 8,
  "s2": 2,
  "u2": 2,
  "s4": 4,
  "u4": 4,
  "s8": 8,
  "u8": 8,
  "s16": 16,
  "u16": 16,
  "f16": 16,
  "bf16": 16,
  "s32": 32,
  "u32": 32,
  "f32": 32,
  "s64": 64,
  "u64": 64,
  "f64": 64,
  "c64": 64,
  "c128": 128,
  "token": 0,
}
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([<=0-9,]*)\]")
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-$]+)\s+\(.*\)\s+->\s+.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(ROOT\s+)?%([\w.\-$]+)\s+=\s+(.*)$")
_OPCODE = re.compile(r"([\w\-]+)\(")
_NAME = re.compile(r"%([\w.\-$]+(?:#\d+)?)")
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_LOCATION = re.compile(r"^(\d+) \{file_name_id=(\d+) function_name_id=(\d+) line=(\d+)")
_FRAME = re.compile(r"^(\d+) \{file_location_id=(\d+)")


def element_bits(dtype: str) -> int:
  """Bits per element of an HLO type name (``f32``: 32; the 8-bit and 4-bit float types by their width)."""
  if dtype in _BITS:
    return _BITS[dtype]
  found = re.match(r"f(\d+)", dtype)
  if found:
    return int(found.group(1))
  raise ValueError(f"unknown HLO element type {dtype!r}")


def arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
  """The ``(element type, dimensions)`` of every array in a (possibly tuple) shape."""
  return [(t, tuple(int(d.removeprefix("<=")) for d in dims.split(",") if d)) for t, dims in _ARRAY.findall(shape)]


def shape_bytes(shape: str) -> int:
  """Bytes of every array in a shape, at their logical sizes."""
  return sum(math.prod(dims) * element_bits(t) // 8 for t, dims in arrays(shape))


def tuple_elements(shape: str) -> list[str]:
  """The top-level element shapes of a tuple shape (``(f32[8]{0}, (s32[], u8[2]{0}))``: two), or ``[shape]``."""
  if not shape.startswith("("):
    return [shape]
  elements, depth, start = [], 0, 1
  for i, char in enumerate(shape[1 : _close(shape, 0)], 1):
    if char in "({[":
      depth += 1
    elif char in ")}]":
      depth -= 1
    elif char == "," and depth == 0:
      elements.append(shape[start:i].strip())
      start = i + 1
  last = shape[start : _close(shape, 0)].strip()
  return [*elements, last] if last else elements


def _close(text: str, start: int) -> int:
  """The index of the bracket closing the one at ``text[start]`` (``(``, ``{`` or ``[``)."""
  depth = 0
  for i in range(start, len(text)):
    if text[i] in "({[":
      depth += 1
    elif text[i] in ")}]":
      depth -= 1
      if depth == 0:
        return i
  raise ValueError(f"unbalanced brackets in HLO: {text[start : start + 80]!r}")


@dataclasses.dataclass
class Instruction:
  """One HLO instruction: ``%name = shape opcode(args), attributes``."""

  name: str
  opcode: str
  shape: str
  args: str
  attributes: str
  computation: str
  root: bool = False

  @property
  def operands(self) -> list[str]:
    """The names of the operands, in order."""
    return _NAME.findall(self.args)

  @property
  def bytes(self) -> int:
    """Bytes of the result."""
    return shape_bytes(self.shape)

  def attribute(self, key: str) -> str | None:
    """The raw value of ``key=...`` (up to the next top-level comma), or ``None``."""
    found = re.search(rf"(?:^|[\s,]){re.escape(key)}=", self.attributes)
    if found is None:
      return None
    start = found.end()
    if self.attributes[start] in "({[":
      return self.attributes[start : _close(self.attributes, start) + 1]
    end = self.attributes.find(",", start)
    return self.attributes[start : end if end >= 0 else None].strip()

  def called(self) -> list[str]:
    """Names of the computations this instruction calls (fusion body, loop body, branches, comparator...)."""
    names = []
    for key in ("calls", "to_apply", "body", "condition", "true_computation", "false_computation"):
      value = self.attribute(key)
      if value:
        names += _NAME.findall(value) or [value]
    for key in ("branch_computations", "called_computations"):
      value = self.attribute(key)
      if value:
        names += _NAME.findall(value)
    return names

  @property
  def custom_call_target(self) -> str | None:
    value = self.attribute("custom_call_target")
    return value.strip('"') if value else None

  @property
  def stack_frame_id(self) -> int | None:
    found = re.search(r"\bstack_frame_id=(\d+)", self.attributes)
    return int(found.group(1)) if found else None

  def estimated_cycles(self) -> int | None:
    """The TPU compiler's own estimate of this operation, in core clock cycles (``after_codegen`` HLO only)."""
    found = re.search(r'"estimated_cycles":"(\d+)"', self.attributes)
    return int(found.group(1)) if found else None

  def reification_cost(self) -> dict[str, float] | None:
    """XLA's own GPU performance-model estimate of this fusion (``xla_gpu_collect_cost_model_stats``), if any."""
    found = re.search(r'"reification_cost":(\[.*?\])', self.attributes)
    if found is None:
      return None
    costs = json.loads(found.group(1))
    model = [c for c in costs if not c.get("name")] or costs
    return model[0] if model else None


@dataclasses.dataclass
class Computation:
  name: str
  entry: bool
  instructions: list[Instruction]

  @property
  def root(self) -> Instruction:
    return next((i for i in self.instructions if i.root), self.instructions[-1])

  def parameter(self, index: int) -> Instruction | None:
    return next((i for i in self.instructions if i.opcode == "parameter" and i.args.strip() == str(index)), None)

  def users(self, name: str) -> list[tuple[Instruction, int]]:
    """``(user, operand position)`` of every use of instruction ``name`` in this computation."""
    return [(i, p) for i in self.instructions for p, o in enumerate(i.operands) if o == name]


@dataclasses.dataclass(frozen=True)
class Source:
  """Where an instruction was made: the innermost Python frame XLA recorded for it."""

  file: str  # the file's name, without its folder
  function: str
  line: int


@dataclasses.dataclass
class Module:
  computations: dict[str, Computation]
  entry: Computation
  frames: dict[int, Source] = dataclasses.field(default_factory=dict)  # stack_frame_id -> its innermost frame

  def __post_init__(self) -> None:
    self.instructions = {i.name: i for c in self.computations.values() for i in c.instructions}
    for instruction in list(self.instructions.values()):
      for operand in instruction.operands:
        name, _, index = operand.partition("#")
        if index and operand not in self.instructions and name in self.instructions:
          whole = self.instructions[name]
          self.instructions[operand] = Instruction(
            operand, "get-tuple-element", tuple_elements(whole.shape)[int(index)], f"%{name}", "", whole.computation
          )

  def source(self, instruction: Instruction) -> Source | None:
    """The Python line that made ``instruction`` (its innermost recorded frame), where XLA kept one."""
    frame = instruction.stack_frame_id
    return None if frame is None else self.frames.get(frame)

  def called(self, instruction: Instruction) -> list[Computation]:
    return [self.computations[n] for n in instruction.called() if n in self.computations]

  def contains(self, instruction: Instruction, opcode: str) -> bool:
    """Whether ``instruction`` is, or calls (transitively) a computation holding, an ``opcode`` instruction."""
    if instruction.opcode == opcode:
      return True
    return any(self.contains(i, opcode) for c in self.called(instruction) for i in c.instructions)


def _instruction(line: str, computation: str) -> Instruction | None:
  found = _INSTRUCTION.match(line)
  if found is None:
    return None
  root, name, rest = found.groups()
  end = _close(rest, 0) + 1 if rest.startswith("(") else rest.index(" ")
  shape, rest = rest[:end], rest[end:].lstrip()
  opcode = _OPCODE.match(rest)
  if opcode is None:
    return None
  start = opcode.end() - 1
  close = _close(rest, start)
  return Instruction(
    name=name,
    opcode=opcode.group(1),
    shape=shape,
    args=rest[start + 1 : close],
    attributes=rest[close + 1 :].lstrip(", "),
    computation=computation,
    root=bool(root),
  )


def _frames(tables: dict[str, list[str]]) -> dict[int, Source]:
  """``stack_frame_id -> Source`` from the module's source tables (empty where it has none)."""
  names = {t: {int(i): n.strip('"') for i, n in (line.split(" ", 1) for line in tables[t])} for t in _TABLES[:2]}
  locations = {}
  for line in tables["FileLocations"]:
    found = _LOCATION.match(line)
    if found:
      file, function = names["FileNames"][int(found.group(2))], names["FunctionNames"][int(found.group(3))]
      locations[int(found.group(1))] = Source(file.rsplit("/", 1)[-1], function, int(found.group(4)))
  frames = {}
  for line in tables["StackFrames"]:
    found = _FRAME.match(line)
    if found and int(found.group(2)) in locations:
      frames[int(found.group(1))] = locations[int(found.group(2))]
  return frames


def parse(text: str) -> Module:
  """The computations of an HLO module's text."""
  computations: dict[str, Computation] = {}
  entry: Computation | None = None
  current: Computation | None = None
  tables: dict[str, list[str]] = {t: [] for t in _TABLES}
  table: str | None = None
  for line in text.splitlines():
    if current is None:
      if line in _TABLES:
        table = line
        continue
      if table is not None:
        if line.strip():
          tables[table].append(line.strip())
          continue
        table = None
      header = _HEADER.match(line)
      if header:
        current = Computation(header.group(2), bool(header.group(1)), [])
      continue
    if line.startswith("}"):
      computations[current.name] = current
      entry = current if current.entry else entry
      current = None
      continue
    instruction = _instruction(line, current.name)
    if instruction is not None:
      current.instructions.append(instruction)
  if entry is None:
    raise ValueError("no ENTRY computation in the HLO text")
  return Module(computations, entry, _frames(tables))
