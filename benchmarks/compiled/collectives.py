"""What a sharded program moves between devices: its collectives, read from the optimized HLO.

Every collective of the program (``all-gather``, ``all-reduce``, ``reduce-scatter``, ``all-to-all``,
``collective-permute``, ``collective-broadcast``, their asynchronous ``-start`` forms, and those that XLA
wraps in an ``async-start`` computation), with its operand and result types and the size of its device
groups (``replica_groups``: listed, as ``{{0,1},{2,3}}``; as an iota, ``[2,8]<=[16]``: 2 groups of 8; over
named mesh axes, ``mesh['axis_0'=4,'axis_1'=4] {'axis_1'}``: groups of 4; none: every device of the program).
A permute's pairs say which devices receive. Loop bodies count once, as in :mod:`benchmarks.compiled.launches`.

:attr:`Collective.received_bytes` is what each device receives from the others, the same as what it sends,
for a collective over groups of ``G`` devices with operands of ``B`` bytes on each device, under the
bandwidth-optimal algorithm (a ring):

* all-gather: ``(G - 1) * B`` (every other device's part);
* reduce-scatter and all-to-all: ``(G - 1) / G * B`` (the other devices' share of its part);
* all-reduce: ``2 (G - 1) / G * B`` (a reduce-scatter, then an all-gather of the reduced parts);
* collective-permute and collective-broadcast: ``B`` (a permute: on each device it sends to).

XLA may run a collective by another algorithm (a tree, or two stages over a torus's dimensions), which
moves the same bytes or more: these are the least any algorithm moves. :func:`received_bytes` sums them
for the device that receives most.
"""

from __future__ import annotations

import dataclasses
import math
import re

from benchmarks.compiled import hlo
from benchmarks.compiled.launches import COLLECTIVES

_IOTA_GROUPS = re.compile(r"replica_groups=\[(\d+),(\d+)\]<=")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_PAIR = re.compile(r"\{(\d+),(\d+)\}")


@dataclasses.dataclass(frozen=True)
class Collective:
  """One collective: its kind, operand and result types (layouts dropped), device group size and bytes."""

  instruction: str
  kind: str  # all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute, collective-broadcast
  operands: tuple[str, ...]
  results: tuple[str, ...]
  group: int  # devices per group (2 for a permute: a sender and a receiver)
  operand_bytes: int  # on each device
  targets: tuple[int, ...] | None = None  # a permute's receiving devices (None: every device of its groups)

  @property
  def received_bytes(self) -> int:
    """Bytes each receiving device of a group receives from the others (see the module's formulas)."""
    g, b = self.group, self.operand_bytes
    if self.kind == "all-gather":
      return (g - 1) * b
    if self.kind in ("reduce-scatter", "all-to-all"):
      return (g - 1) * b // g
    if self.kind == "all-reduce":
      return 2 * (g - 1) * b // g
    return b

  def describe(self) -> str:
    """``all-gather s32[1,1,512] → s32[16,1,512], groups of 16`` (a permute: its receiving devices)."""
    change = ", ".join(self.operands) + " → " + ", ".join(self.results)
    if self.targets is not None:
      return f"{self.kind} {change}, to {len(self.targets)} device(s)"
    return f"{self.kind} {change}, groups of {self.group}"


def _type(dtype: str, dims: tuple[int, ...]) -> str:
  return f"{dtype}[{','.join(map(str, dims))}]"


def group_size(instruction: hlo.Instruction, devices: int) -> int:
  """Devices per group of a collective (``devices``: the program's, where it names no groups)."""
  if instruction.opcode.startswith("collective-permute"):
    return 2
  text = instruction.attributes
  iota = _IOTA_GROUPS.search(text)
  if iota:
    return int(iota.group(2))
  mesh = _MESH_GROUPS.search(text)
  if mesh:
    sizes = {name.strip("' "): int(size) for name, size in (a.split("=") for a in mesh.group(1).split(","))}
    return math.prod(sizes[name.strip("' ")] for name in mesh.group(2).split(",") if name.strip())
  groups = instruction.attribute("replica_groups")
  if not groups or groups == "{}":
    return devices
  first = re.match(r"\{\{([^}]*)\}", groups)
  if first is None:
    raise ValueError(f"unreadable replica_groups in {instruction.name}: {groups!r}")
  return len([d for d in first.group(1).split(",") if d.strip()])


def _targets(instruction: hlo.Instruction) -> tuple[int, ...] | None:
  pairs = instruction.attribute("source_target_pairs")
  return None if pairs is None else tuple(int(target) for _, target in _PAIR.findall(pairs))


def _collective(module: hlo.Module, instruction: hlo.Instruction, devices: int) -> Collective:
  kind = COLLECTIVES.match(instruction.opcode)
  assert kind is not None
  operands = [module.instructions[o] for o in instruction.operands if o in module.instructions]
  operand_arrays = [a for o in operands for a in hlo.arrays(o.shape)]
  arrays = hlo.arrays(instruction.shape)
  n = len(operand_arrays)
  # A -start's result is a tuple that holds its operands before its results (and a permute's two flags after).
  results = arrays[n : 2 * n] if instruction.opcode.endswith("-start") and len(arrays) >= 2 * n else arrays
  return Collective(
    instruction=instruction.name,
    kind=kind.group(1),
    operands=tuple(_type(t, d) for t, d in operand_arrays),
    results=tuple(_type(t, d) for t, d in results),
    group=group_size(instruction, devices),
    operand_bytes=sum(math.prod(d) * hlo.element_bits(t) // 8 for t, d in operand_arrays),
    targets=_targets(instruction),
  )


def read(module: hlo.Module, devices: int) -> list[Collective]:
  """Every collective of a program of ``devices`` devices, in program order (the ``-done`` halves left out)."""
  return [
    _collective(module, instruction, devices)
    for computation in module.computations.values()
    for instruction in computation.instructions
    if COLLECTIVES.match(instruction.opcode) and not instruction.opcode.endswith("-done")
  ]


def received_bytes(found: list[Collective]) -> int:
  """Bytes the device that receives most receives from the others over all of ``found``.

  Every device of a group receives the same from a symmetric collective; a permute reaches its targets only.
  """
  permuted: dict[int, int] = {}
  for c in found:
    for target in c.targets or ():
      permuted[target] = permuted.get(target, 0) + c.received_bytes
  symmetric = sum(c.received_bytes for c in found if c.targets is None)
  return symmetric + max(permuted.values(), default=0)


def result_bytes(found: list[Collective]) -> int:
  """Bytes the collectives produce on each device (every result summed, a device's own part included)."""
  return sum(math.prod(d) * hlo.element_bits(t) // 8 for c in found for t, d in map(_array, c.results))


def _array(text: str) -> tuple[str, tuple[int, ...]]:
  ((dtype, dims),) = hlo.arrays(text)
  return dtype, dims
