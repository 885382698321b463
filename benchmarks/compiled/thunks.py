"""A reader for XLA:GPU's thunk dumps: what the compiled program launches, in order, with each kernel's grid.

XLA writes ``*thunk_sequence.txt`` (one numbered line per thunk, nested under loops and conditionals:
``002: kCustomKernel [prev=001 (1) | sink] input_reduce_fusion grid: [64, 1, 1] threads: [64, 1, 1] ...``)
and ``*thunk_metadata.txt`` (each thunk's id, kind and the HLO instruction it runs, its
``profile_annotation``) only when compilation finishes; a program with a CUB sort stops just before
(see :mod:`benchmarks.compiled.compile`).
"""

from __future__ import annotations

import dataclasses
import math
import re

_LINE = re.compile(r"^\s*(\d+):\s+(k\w+)\s+(?:\[[^\]]*\])?\s*(.*)$")
_GRID = re.compile(r"grid: \[(\d+), (\d+), (\d+)\]")
_METADATA = re.compile(
  r'thunk_info\s*\{\s*(?:profile_annotation:\s*"([^"]*)"\s*)?(?:thunk_id:\s*(\d+)\s*)?\}\s*thunk_kind:\s*"(\w+)"'
)
# Thunks that only hold, order or wait for others (their contents are listed, nested, after them).
CONTROL = frozenset(
  {
    "kWhile",
    "kConditional",
    "kSequential",
    "kCommandBuffer",
    "kDynamicSliceFusion",
    "kWaitForStreams",
    "kAsyncStart",
    "kAsyncDone",
  }
)
# Copies, and the scalar writes of a device's partition or replica id.
MEMCPY = frozenset(
  {"kCopy", "kMemcpy", "kCopyDone", "kDeviceToDevice", "kDeviceToHost", "kHostToDevice", "kPartitionId", "kReplicaId"}
)
MEMSET = frozenset({"kMemset32BitValue", "kMemzero"})


@dataclasses.dataclass(frozen=True)
class Thunk:
  """One thunk: its id, kind (``kCustomKernel``, ``kCopy``...), kernel name, HLO instruction and grid size."""

  id: int
  kind: str
  kernel: str
  instruction: str | None
  blocks: int | None

  @property
  def category(self) -> str:
    """``control``, ``memcpy``, ``memset``, ``collective`` or ``kernel``."""
    if self.kind in CONTROL:
      return "control"
    if self.kind in MEMCPY:
      return "memcpy"
    if self.kind in MEMSET:
      return "memset"
    if re.search(r"Nccl|Collective|All(Reduce|Gather|ToAll)|ReduceScatter|CollectivePermute", self.kind):
      return "collective"
    return "kernel"


def parse(sequence: str, metadata: str) -> list[Thunk]:
  """Every thunk of a program, in order, nested ones included."""
  annotations = {int(i): name for name, i, _ in _METADATA.findall(metadata) if i}
  thunks = []
  for line in sequence.splitlines():
    found = _LINE.match(line)
    if found is None:
      continue
    number, kind, rest = found.groups()
    grid = _GRID.search(rest)
    kernel = rest[: grid.start()].strip() if grid else rest.split(" ")[0]
    blocks = math.prod(int(g) for g in grid.groups()) if grid else None
    thunks.append(Thunk(int(number), kind, kernel, annotations.get(int(number)), blocks))
  return thunks
