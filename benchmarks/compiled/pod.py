"""The sharded workloads compiled for TPU pod slices of 16, 64 and 256 chips, without the hardware.

``python -m benchmarks.compiled.pod [--slices v5e:4x4 v5p:4x4x4 v5e:16x16] [--only REGEX] [--out DIR]``

Compiles, with libtpu's topology descriptions and no TPU (:mod:`benchmarks.compiled`), each workload of a
language model's step whose operand is split across every chip of a slice, dmljax against native JAX, on a
mesh with automatic axes and on one with explicit axes:

* decode top-k: ``k=50`` of logits (512, 262144) float32, the vocabulary split across the chips;
* argmax over the same logits, as given and inside a step (of ``logits / T``);
* log-sum-exp over the same logits;
* an embedding lookup: 512 rows of a (262144, 4096) bfloat16 table split by rows across the chips.

For each program it reads the collectives and their operand and result types, the bytes each chip receives
from the others (:mod:`benchmarks.compiled.collectives`) and XLA's ``optimal_seconds``, and writes
``benchmarks/results/tpu-pod-compiled.md`` and a JSON beside it. A program that does not compile (native
``jax.lax.top_k`` on explicit axes raises) is a row with its error. Every figure is compiled, not run.
The whole run takes about two minutes on two cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import RESULTS
from benchmarks.compiled import availability

SLICES = ("v5e:4x4", "v5p:4x4x4", "v5e:16x16")
NAME = "tpu-pod-compiled"
AXIS = "chips"  # the one mesh axis, over every chip of the slice
BATCH, VOCAB, K = 512, 262144, 50
TABLE, LOOKUPS = (262144, 4096), 512
TEMPERATURE = 0.8
INDEX_BYTES = 4  # int32 indices
EQUAL = 1e-3  # estimates this close count as equal (dmljax's argmax adds about 1.4 ns to jnp.argmax's in a step)


@dataclasses.dataclass(frozen=True)
class Input:
  """One operand: its shape, type, and the mesh axis (or ``None``) that splits each of its dimensions."""

  shape: tuple[int, ...]
  dtype: str
  split: tuple[str | None, ...]


@dataclasses.dataclass(frozen=True)
class Workload:
  """A sharded workload: its operands, the dmljax call and the native forms (each with the axes it is for).

  ``candidates``: what a selection keeps of each shard's part of a row (k for top_k, 1 for argmax), for the
  byte target; ``None`` where there is no such target. ``candidate_bytes``: one candidate, value (or key)
  and index. ``row``: the length of the operated axis, for the whole-row sort count. ``baseline`` and
  ``allowance``: the estimate target, dmljax's at most ``allowance`` times the ``baseline`` native form's (the
  fastest native form's where ``baseline`` is ``None``).
  """

  name: str
  inputs: tuple[Input, ...]
  dmljax: Callable[..., Any]
  native: dict[str, tuple[Callable[..., Any], tuple[str, ...]]]
  candidates: int | None = None
  candidate_bytes: int = 0
  row: int | None = None
  baseline: str | None = None  # the native form the target compares with (None: the fastest)
  allowance: float = 1 + EQUAL  # the target: dmljax's estimate at most this times the baseline's


BOTH = ("automatic", "explicit")


def _replicated(x: Any) -> Any:
  """Whole on every device of the mesh that ``x``'s type names (explicit axes)."""
  import jax
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P

  return NamedSharding(jax.typeof(x).sharding.mesh, P())


INDICES_USED = "jax.lax.top_k, indices used"


def _top_k_indices_used(x: Any) -> Any:
  """Native top-k whose indices a step uses: returned as they are, XLA's partitioner keeps only the values of its
  TopK (the indices become a constant of the program), which no caller of a selection wants."""
  import jax

  values, indices = jax.lax.top_k(x, K)
  return values, indices + 1


def workloads() -> list[Workload]:
  import jax
  import jax.numpy as jnp
  import numpy as np

  import dmljax as dml

  logits = Input((BATCH, VOCAB), "float32", (None, AXIS))
  table = Input(TABLE, "bfloat16", (AXIS, None))
  ids = Input((LOOKUPS, 1), "int32", (None, None))
  scale = np.float32(1 / TEMPERATURE)
  candidate = 4 + INDEX_BYTES  # a float32 value, or argmax's int32 key, and its index
  return [
    Workload(
      f"decode top_k k={K}, logits {BATCH}x{VOCAB} f32",
      (logits,),
      lambda x: dml.top_k(x, K),
      {
        "jax.lax.top_k": (lambda x: jax.lax.top_k(x, K), BOTH),
        INDICES_USED: (_top_k_indices_used, BOTH),
      },
      candidates=K,
      candidate_bytes=candidate,
      row=VOCAB,
      baseline=INDICES_USED,
      allowance=1.1,
    ),
    Workload(
      f"argmax, logits {BATCH}x{VOCAB} f32",
      (logits,),
      lambda x: dml.argmax(x, 1),
      {"jnp.argmax": (lambda x: jnp.argmax(x, 1), BOTH)},
      candidates=1,
      candidate_bytes=candidate,
      row=VOCAB,
    ),
    Workload(
      f"argmax(logits / T) in a step, {BATCH}x{VOCAB} f32",
      (logits,),
      lambda x: dml.argmax(x * scale, 1),
      {"jnp.argmax": (lambda x: jnp.argmax(x * scale, 1), BOTH)},
      candidates=1,
      candidate_bytes=candidate,
      row=VOCAB,
    ),
    Workload(
      f"log-sum-exp, logits {BATCH}x{VOCAB} f32",
      (logits,),
      lambda x: dml.reduce(x, "log_sum_exp", 1),
      {"jax.nn.logsumexp": (lambda x: jax.nn.logsumexp(x, axis=1), BOTH)},
      row=VOCAB,
    ),
    Workload(
      f"embedding lookup, {LOOKUPS} rows of a {TABLE[0]}x{TABLE[1]} bf16 table split by rows",
      (table, ids),
      lambda t, i: dml.gather_nd(t, i),
      {
        "x[i]": (lambda t, i: t[i[:, 0]], BOTH),
        "x.at[i].get(out_sharding=P())": (lambda t, i: t.at[i[:, 0]].get(out_sharding=_replicated(t)), ("explicit",)),
      },
    ),
  ]


@dataclasses.dataclass
class Row:
  """One compiled program (or its failure) on one slice and kind of mesh axes."""

  slice: str
  chips: int
  axes: str  # "automatic" or "explicit"
  workload: str
  program: str  # "dmljax" or the native form's name
  error: str | None = None
  estimate_s: float | None = None
  collectives: list[Any] = dataclasses.field(default_factory=list)
  received_bytes: int = 0
  result_bytes: int = 0
  hlo_ops: int = 0
  custom_calls: dict[str, int] = dataclasses.field(default_factory=dict)
  whole_row_sorts: int = 0
  compile_s: float = 0.0
  bound_bytes: int | None = None  # the candidate bound on the collectives' results
  ratio: float | None = None  # estimate / the baseline native form's on the same slice and axes
  # A program with conditionals: XLA estimates each path as a program of its own (paths.inlined); estimate_s is
  # the path that skips every conditional's work (for top_k: no selected value read from the input).
  conditional: bool = False  # the program has a conditional: its figures are its skip path's (see compile_row)
  work_estimate_s: float | None = None
  work_result_bytes: int | None = None  # the other path's collectives' results (estimate_s's are result_bytes)
  baseline: str | None = None  # the workload's target (dmljax rows): see Workload
  allowance: float = 1 + EQUAL

  @property
  def within_bound(self) -> bool | None:
    return None if self.bound_bytes is None or self.error else self.result_bytes <= self.bound_bytes


def candidate_bound(workload: Workload, chips: int) -> int | None:
  """Bytes of every shard's candidates for every row: what a chip's collectives may hold when only candidates move."""
  if workload.candidates is None:
    return None
  return chips * BATCH * workload.candidates * workload.candidate_bytes


def _log(message: str) -> None:
  print(message, file=sys.stderr, flush=True)


def compile_row(workload: Workload, name: str, fn: Callable[..., Any], topology: str, explicit: bool) -> Row:
  """``fn`` on ``workload``'s operands, split over every chip of ``topology``, compiled and read."""
  from jax.sharding import PartitionSpec as P

  from benchmarks.compiled import collectives, devices, program
  from benchmarks.harness import timing

  chips = devices.devices(topology)
  mesh = devices.mesh(chips, (len(chips),), (AXIS,), explicit=explicit)
  specs = [devices.place(i.shape, i.dtype, mesh, P(*i.split)) for i in workload.inputs]
  row = Row(topology, len(chips), "explicit" if explicit else "automatic", workload.name, name)
  row.baseline, row.allowance = workload.baseline, workload.allowance
  clock = timing.Stopwatch()
  try:
    compiled = program.compile_program(fn, *specs)
  except Exception as failure:  # a program that does not compile is a finding, not a stop
    row.error = f"{type(failure).__name__}: {str(failure).splitlines()[0][:160]}"
    return row
  finally:
    row.compile_s = clock.seconds()
  shard_row = None if workload.row is None else workload.row // len(chips)
  summary = program.summarize(compiled, row=shard_row)
  found = collectives.read(compiled.module, len(chips))
  if any(i.opcode == "conditional" for i in compiled.module.instructions.values()):
    skip, work = (_path(fn, specs, branch, len(chips)) for branch in (0, 1))
    summary = dataclasses.replace(summary, estimate_s=skip[0])
    found = skip[1]
    row.conditional = True
    row.work_estimate_s, row.work_result_bytes = work[0], collectives.result_bytes(work[1])
  row.estimate_s = summary.estimate_s
  row.collectives = found
  row.received_bytes = collectives.received_bytes(found)
  row.result_bytes = collectives.result_bytes(found)
  row.hlo_ops = summary.launches
  row.custom_calls = summary.custom_calls
  row.whole_row_sorts = summary.whole_row_sorts
  if name == "dmljax":
    row.bound_bytes = candidate_bound(workload, len(chips))
  return row


def _path(fn: Callable[..., Any], specs: Sequence[Any], branch: int, chips: int) -> tuple[float | None, list[Any]]:
  """XLA's optimal_seconds and the collectives of the program of one path: every ``lax.cond`` its ``branch``."""
  from benchmarks.compiled import collectives, paths, program

  with paths.inlined(branch):
    compiled = program.compile_program(fn, *specs)
  return program.summarize(compiled).estimate_s, collectives.read(compiled.module, chips)


def compile_slice(topology: str, selected: Sequence[Workload]) -> list[Row]:
  """Every program of every workload on ``topology``, on automatic then explicit axes, with ratios to native."""
  rows: list[Row] = []
  for workload in selected:
    for explicit in (False, True):
      axes = "explicit" if explicit else "automatic"
      group = [compile_row(workload, "dmljax", workload.dmljax, topology, explicit)]
      for name, (fn, kinds) in workload.native.items():
        if axes in kinds:
          group.append(compile_row(workload, name, fn, topology, explicit))
      natives = [r.estimate_s for r in group[1:] if r.estimate_s and workload.baseline in (None, r.program)]
      for row in group:
        if natives and row.estimate_s is not None:
          row.ratio = row.estimate_s / min(natives)
        _log(f"  {topology} {axes} {workload.name} / {row.program}: {row.compile_s:.1f} s")
      rows += group
  return rows


# The report ---------------------------------------------------------------------------------------------------


def _us(seconds: float | None) -> str:
  return "—" if seconds is None else f"{seconds * 1e6:.1f}"


def _bytes(size: int | None) -> str:
  return "—" if size is None else f"{size:,}"


def _collectives(row: Row) -> str:
  counted: dict[str, int] = {}
  for c in row.collectives:
    counted[c.describe()] = counted.get(c.describe(), 0) + 1
  return "<br>".join(f"{text}" + (f" ×{n}" if n > 1 else "") for text, n in counted.items()) or "none"


def _note(row: Row) -> str:
  if row.error:
    return f"does not compile: {row.error}"
  notes = []
  if row.conditional:
    notes.append(
      "XLA estimates no program with a conditional: the figures are the path that skips its work (no selected "
      "value read from the input); the other path "
      + ("has no XLA estimate" if row.work_estimate_s is None else f"{_us(row.work_estimate_s)} µs")
      + f", results / chip {_bytes(row.work_result_bytes)}"
    )
  if row.estimate_s is None:
    calls = ", ".join(f"`{t}`" for t in sorted(row.custom_calls)) or "none"
    notes.append(f"XLA gives no optimal_seconds (custom calls: {calls})")
  if row.whole_row_sorts:
    notes.append(f"{row.whole_row_sorts} sort(s) of a whole shard's row")
  return "; ".join(notes)


def _targets(rows: Sequence[Row], slices: Sequence[str]) -> list[str]:
  lines = [
    "| slice | axes | workload | a shard | received / chip | results / chip / candidate bound | within "
    "| dmljax µs / baseline µs | target met |",
    "|---|---|---|--:|--:|--:|---|--:|---|",
  ]
  for topology in slices:
    for row in rows:
      if row.slice != topology or row.program != "dmljax" or row.bound_bytes is None:
        continue
      natives = [
        r
        for r in rows
        if (r.slice, r.axes, r.workload) == (row.slice, row.axes, row.workload)
        and r.program != "dmljax"
        and row.baseline in (None, r.program)
      ]
      best = min((r.estimate_s for r in natives if r.estimate_s), default=None)
      within = {True: "yes", False: "**no**", None: "—"}[row.within_bound]
      if row.error or row.estimate_s is None:
        faster = "unknown (no dmljax estimate)"
      elif best is None:
        faster = "— (native does not compile)"
      elif row.estimate_s <= best:
        faster = "yes"
      elif row.estimate_s <= best * (1 + EQUAL):
        faster = f"equal (+{100 * (row.estimate_s / best - 1):.3f}%)"
      elif row.estimate_s <= best * row.allowance:
        faster = f"yes (≤ {row.allowance:g}×: {row.estimate_s / best:.3f})"
      else:
        faster = "**no**"
      lines.append(
        f"| {row.slice} | {row.axes} | {row.workload} | {_bytes(BATCH * VOCAB * 4 // row.chips)} "
        f"| {_bytes(row.received_bytes)} | {_bytes(row.result_bytes)} / {_bytes(row.bound_bytes)} "
        f"| {within} | {_us(row.estimate_s)} / {_us(best)} | {faster} |"
      )
  return lines


def markdown(rows: Sequence[Row], meta: dict[str, Any], slices: Sequence[str]) -> str:
  versions = ", ".join(f"{n} {meta['versions'].get(n) or 'missing'}" for n in ("jax", "jaxlib", "libtpu"))
  described = ", ".join(f"`{s}` ({meta['slices'][s]['chips']} chips of {meta['slices'][s]['kind']})" for s in slices)
  lines = [
    "# Sharded workloads on TPU pod slices: compiled, not run",
    "",
    f"Generated by `python -m benchmarks.compiled.pod` at {meta['generated']} with {versions}"
    + (f", workloads matching `{meta['only']}`" if meta["only"] else "")
    + f", in {meta['seconds']:.0f} s on this machine. Nothing here ran on a TPU: each program was compiled by "
    f"libtpu for a slice ({described}) on a CPU machine and read back from XLA's optimized HLO and its cost "
    "analysis. Each operand is split across every chip of the slice: a one-axis mesh over the slice's chips in "
    "libtpu's order, with automatic axes (`AxisType.Auto`, XLA's partitioner splits the program) and with "
    "explicit ones (`AxisType.Explicit`, the split is part of the arrays' types).",
    "",
    "- **collectives**: each collective of the program (loop bodies once) with its operand and result types on "
    "one chip and its device groups.",
    "- **received / chip**: the bytes each chip receives from the other chips in those collectives, which a ring "
    "also has it send: an all-gather over G chips of B bytes each receives (G − 1)·B, an all-reduce "
    "2(G − 1)/G·B, a reduce-scatter or all-to-all (G − 1)/G·B, a permute B (`benchmarks/compiled/collectives.py`)."
    " **results / chip**: the collectives' results summed, a chip's own part included (the measure of the "
    "guide's CPU tables).",
    "- **candidate bound** (top_k, argmax): k candidates of every shard for every row, chips × 512 rows × k × "
    "(4 + 4) bytes (a float32 value or int32 key, and an int32 index; k = 50 for top_k, 1 for argmax): the "
    "most a chip's collectives hold when only candidates cross chips. The target is results / chip within it. "
    "An all-gather of them has each chip receive (chips − 1)/chips of it; XLA may gather through an all-reduce "
    "of a zero-filled array with a slot per shard, which a ring runs at twice that. **a shard**: one chip's part "
    "of the logits, 512 × 262144 × 4 bytes / chips.",
    "- **optimal µs**: XLA's `optimal_seconds` for one chip's program, collectives included (— where XLA gives "
    "none); **× native**: over the baseline native form's on the same slice and axes (top_k: "
    f"`{INDICES_USED}`, native top-k whose indices a step uses; returned as they are, XLA's partitioner keeps only "
    "its values; the others: the fastest native form). In the targets, estimates within 0.1% of the baseline's "
    "count as equal, and top_k's target is 1.1× it. XLA estimates no program with a conditional: such a program "
    "(dmljax's top_k on automatic axes, which reads values from the input only when a selected one is a zero, a "
    "NaN or a subnormal) is estimated per path, each path compiled as a program of its own "
    "(`benchmarks/compiled/paths.py`, `inlined`): its collectives, bytes and estimate are those of the path that "
    "skips the read, and the note gives the other's.",
    "",
    "## Targets (compiled, not run)",
    "",
    *_targets(rows, slices),
    "",
  ]
  for workload in dict.fromkeys(r.workload for r in rows):
    lines += [
      f"## {workload} (compiled, not run)",
      "",
      "| slice | axes | program | collectives | received / chip | results / chip | optimal µs | × native | note |",
      "|---|---|---|---|--:|--:|--:|--:|---|",
    ]
    for row in rows:
      if row.workload != workload:
        continue
      ratio = "—" if row.ratio is None else f"{row.ratio:.2f}"
      collectives, received, results = "—", "—", "—"
      if not row.error:
        collectives, received, results = _collectives(row), _bytes(row.received_bytes), _bytes(row.result_bytes)
      lines.append(
        f"| {row.slice} | {row.axes} | {row.program} | {collectives} | {received} | {results} "
        f"| {_us(row.estimate_s)} | {ratio} | {_note(row)} |"
      )
    lines.append("")
  return "\n".join(lines)


def row_json(row: Row) -> dict[str, Any]:
  data: dict[str, Any] = {
    "slice": row.slice,
    "chips": row.chips,
    "axes": row.axes,
    "workload": row.workload,
    "program": row.program,
  }
  if row.error:
    return {**data, "error": row.error}
  return {
    **data,
    "estimate_us": None if row.estimate_s is None else round(row.estimate_s * 1e6, 3),
    "conditional": row.conditional,
    "work_estimate_us": None if row.work_estimate_s is None else round(row.work_estimate_s * 1e6, 3),
    "work_result_bytes": row.work_result_bytes,
    "baseline": row.baseline,
    "allowance": row.allowance,
    "ratio": None if row.ratio is None else round(row.ratio, 3),
    "received_bytes": row.received_bytes,
    "result_bytes": row.result_bytes,
    "bound_bytes": row.bound_bytes,
    "collectives": [
      {"kind": c.kind, "operands": c.operands, "results": c.results, "group": c.group, "received": c.received_bytes}
      for c in row.collectives
    ],
    "hlo_ops": row.hlo_ops,
    "custom_calls": row.custom_calls,
    "whole_row_sorts": row.whole_row_sorts,
    "compile_s": round(row.compile_s, 1),
  }


def write(rows: Sequence[Row], meta: dict[str, Any], slices: Sequence[str], out: Path) -> list[Path]:
  """Writes the report and its JSON (one row a line) into ``out``; returns their paths."""
  out.mkdir(parents=True, exist_ok=True)
  md, js = out / f"{NAME}.md", out / f"{NAME}.json"
  md.write_text(markdown(rows, meta, slices))
  head = "".join(f" {json.dumps(key)}: {json.dumps(value)},\n" for key, value in meta.items())
  body = ",\n".join(f"  {json.dumps(row_json(row))}" for row in rows)
  js.write_text("{\n" + head + ' "rows": [\n' + body + "\n ]\n}\n")
  return [md, js]


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.compiled.pod", description=__doc__.split("\n")[0])
  parser.add_argument("--slices", nargs="+", default=SLICES, help=f"TPU slices (default: {' '.join(SLICES)})")
  parser.add_argument("--only", help="compile only the workloads whose name matches this regular expression")
  parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the report (default: benchmarks/results)")
  args = parser.parse_args(argv)
  reason = availability.problem("tpu")
  if reason is not None:
    print(f"cannot compile for TPU: {reason}", file=sys.stderr)
    return 2

  from benchmarks.compiled import devices
  from benchmarks.harness import timing

  clock = timing.Stopwatch()
  selected = [w for w in workloads() if args.only is None or re.search(args.only, w.name)]
  rows: list[Row] = []
  slices = {}
  for topology in args.slices:
    chips = devices.devices(topology)
    slices[topology] = {"chips": len(chips), "kind": chips[0].device_kind}
    _log(f"{topology}: {len(chips)} chips of {chips[0].device_kind}, {len(selected)} workloads")
    rows += compile_slice(topology, selected)
  meta: dict[str, Any] = {
    "label": "compiled, not run",
    "generated": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ"),
    "versions": availability.versions(),
    "only": args.only,
    "slices": slices,
    "seconds": round(clock.seconds(), 1),
  }
  for path in write(rows, meta, args.slices, args.out):
    print(path)
  _log(f"{len(rows)} programs in {meta['seconds']:.0f} s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
