"""Decode-step sampling per path, compiled (not run) for an H100 and a TPU v5e, against the recipes it replaces.

``python -m benchmarks.sampling.compiled [--rows 8x32000,...] [--dtypes float32,bfloat16] [--targets h100,tpu-v5e]``
(the ``aot`` extra; about 15 minutes on two cores) writes ``benchmarks/results/sampling-compiled.{md,json}``.

Each dmljax program is priced along the two paths it can take (:mod:`benchmarks.compiled.paths`): the one where the
row's 64 candidates decide (every ``lax.cond`` skips its whole-row work) and the one where the whole-row search runs
(its guide loop and exact loop, the whole-row draw). The path is recorded by running the program on the CPU on rows
that take it; the compiled program for each target is then priced along it, loop bodies times their trip counts,
each conditional's branch apart. The programs, with the inputs of each path:

* the README's call, ``sample(key, x, temperature=0.7, top_k=k, top_p=0.95)``: candidates with ``k = 50``; search
  with ``k = 100`` (a runtime ``k`` past the candidates: the top-k search, then top-p's among what it keeps);
* ``sample(key, x, top_p=0.95)``: candidates on rows whose 64 largest entries hold 95% of the softmax (logits
  N(0, 8²)); search on the sampling benchmark's rows (N(0, 3²)), whose nucleus holds over a thousand entries;
* ``top_k_mask(x, k)``: candidates with ``k = 50``; search with ``k = 100``.

Each is compared with the recipe it replaces (:mod:`benchmarks.sampling.bench`): the README's call with the
``lax.top_k(x / T, 64)`` recipe (candidates) and the sort recipe with both filters (search); top_p with the sort
recipe; ``top_k_mask`` with static-k ``jax.lax.top_k(x, 50)`` (candidates) and a sort-based mask for a runtime k
(search). The recipes have no control flow: one path each.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import RESULTS
from benchmarks.compiled import availability

COMMAND = "python -m benchmarks.sampling.compiled"
ROWS = ((8, 32000), (64, 32000), (8, 128256))
DTYPES = ("float32", "bfloat16")
TARGETS = ("h100", "tpu-v5e")
K, P, TEMPERATURE, FALLBACK_K = 50, 0.95, 0.7, 100
SPREAD, PEAKED = 3.0, 8.0  # the logits' scale: N(0, 3²) rows (the sampling benchmark's), N(0, 8²) rows
README_CALL = "sample(T=0.7, top_k=k, top_p=0.95)"
TOP_P = "sample(top_p=0.95)"
TOP_K_MASK = "top_k_mask(x, k)"


@dataclasses.dataclass(frozen=True)
class Scenario:
  """A path of a dmljax program: the parameters and rows it runs on, and the recipe it must not exceed."""

  path: str  # "candidates" or "search"
  scale: float
  k: int | None
  recipe: str


@dataclasses.dataclass(frozen=True)
class Program:
  name: str
  fn: Callable[..., Any]
  inputs: tuple[str, ...]  # "key", "x", "k", "p" in the function's order
  scenarios: tuple[Scenario, ...] = ()


def _programs() -> tuple[list[Program], list[Program]]:
  """dmljax's programs (with their paths) and the recipes."""
  import jax
  import jax.numpy as jnp

  import dmljax as dml
  from benchmarks.sampling import bench

  def readme(key: Any, x: Any, k: Any, p: Any) -> Any:
    return dml.sampling.sample(key, x, temperature=TEMPERATURE, top_k=k, top_p=p)

  def top_p(key: Any, x: Any, p: Any) -> Any:
    return dml.sampling.sample(key, x, top_p=p)

  def top_k_mask(x: Any, k: Any) -> Any:
    return dml.sampling.top_k_mask(x, k)

  def static_top_k(x: Any) -> Any:
    return jax.lax.top_k(x, K)

  def sort_mask(x: Any, k: Any) -> Any:
    """The runtime-k mask users write: sort descending, the k-th value as a threshold."""
    ordered = -jnp.sort(-x, axis=-1)
    kth = jax.lax.dynamic_index_in_dim(ordered, k - 1, axis=-1, keepdims=True)
    return jnp.where(x >= kth, x, -jnp.inf)

  def sort_both(key: Any, x: Any, p: Any) -> Any:
    return bench.sort_top_p(key, x / TEMPERATURE, p, K)

  recipe, sort_p = "lax.top_k(x / T, 64) recipe", "sort recipe, top_p"
  dmljax = [
    Program(
      README_CALL,
      readme,
      ("key", "x", "k", "p"),
      (Scenario("candidates", SPREAD, K, recipe), Scenario("search", SPREAD, FALLBACK_K, "sort recipe, top_k+top_p")),
    ),
    Program(
      TOP_P,
      top_p,
      ("key", "x", "p"),
      (Scenario("candidates", PEAKED, None, sort_p), Scenario("search", SPREAD, None, sort_p)),
    ),
    Program(
      TOP_K_MASK,
      top_k_mask,
      ("x", "k"),
      (Scenario("candidates", SPREAD, K, "lax.top_k(x, 50)"), Scenario("search", SPREAD, FALLBACK_K, "sort mask")),
    ),
  ]
  recipes = [
    Program(recipe, bench.top_k_recipe, ("key", "x", "p")),
    Program("sort recipe, top_k+top_p", sort_both, ("key", "x", "p")),
    Program("sort recipe, top_p", bench.sort_top_p, ("key", "x", "p")),
    Program("lax.top_k(x, 50)", static_top_k, ("x",)),
    Program("sort mask", sort_mask, ("x", "k")),
  ]
  return dmljax, recipes


def _logits(batch: int, vocab: int, dtype: str, scale: float) -> np.ndarray:
  import ml_dtypes

  x = np.random.default_rng(vocab + batch).standard_normal((batch, vocab), np.float32) * np.float32(scale)
  return x.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else x


def _cpu_args(program: Program, x: np.ndarray, k: int | None) -> tuple[Any, ...]:
  import jax
  import jax.numpy as jnp

  values = {"key": jax.random.key(0), "x": jnp.asarray(x), "k": jnp.int32(k or K), "p": jnp.float32(P)}
  return tuple(values[name] for name in program.inputs)


def _placed_args(program: Program, shape: tuple[int, int], dtype: str, device: Any) -> tuple[Any, ...]:
  import jax
  import jax.numpy as jnp

  from benchmarks.compiled import devices

  x = devices.place(shape, jnp.dtype(dtype), device)
  values = {
    "key": jax.ShapeDtypeStruct((), jax.random.key(0).dtype, sharding=x.sharding),
    "x": x,
    "k": devices.place((), jnp.int32, device),
    "p": devices.place((), jnp.float32, device),
  }
  return tuple(values[name] for name in program.inputs)


def _priced(target: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
  """The compiled program's tree (:func:`paths.tree`) for ``target``."""
  from benchmarks.compiled import devices, launches, paths, program

  compiled = program.compile_program(fn, *args)
  if compiled.kind == "tpu":
    assert compiled.codegen is not None
    return paths.tree(compiled.codegen, paths.tpu_pricer(compiled.codegen))
  sequence = (
    launches.from_thunks(compiled.module, compiled.thunks)
    if compiled.thunks is not None
    else launches.from_hlo(compiled.module)
  )
  return paths.tree(compiled.module, paths.gpu_pricer(compiled.module, sequence, devices.gpu_spec()))


def _figures(cost: Any) -> dict[str, Any]:
  return {
    "us": round(cost.seconds * 1e6, 2),
    "launches": cost.launches,
    "round_trips": cost.round_trips,
    "mb": round(cost.bytes / 1e6, 3),
  }


def _log(message: str) -> None:
  print(message, file=sys.stderr, flush=True)


def run(
  rows: Sequence[tuple[int, int]] = ROWS, dtypes: Sequence[str] = DTYPES, targets: Sequence[str] = TARGETS
) -> dict[str, Any]:
  """Every program on every row, dtype and target, along each of its paths: the record the reports render."""
  availability.configure()  # before anything starts JAX's backends: the CPU runs the paths, nothing else
  from benchmarks.compiled import devices, paths
  from benchmarks.harness import timing

  dmljax, recipes = _programs()
  clock = timing.Stopwatch()
  figures: list[dict[str, Any]] = []
  details: list[dict[str, Any]] = []
  for batch, vocab in rows:
    for dtype in dtypes:
      recorded = {}
      for program in dmljax:
        for scenario in program.scenarios:
          x = _logits(batch, vocab, dtype, scenario.scale)
          recorded[program.name, scenario.path] = paths.record(program.fn, *_cpu_args(program, x, scenario.k))
      for target in targets:
        device = devices.devices(target)[0]
        gpu = target == "h100"
        where = {"target": target, "dtype": dtype, "rows": f"{batch}x{vocab}"}
        for program in recipes:
          tree = _priced(target, program.fn, _placed_args(program, (batch, vocab), dtype, device))
          cost = paths.cost(tree, paths.Path({}, {}, {}), gpu=gpu)
          figures.append({**where, "program": program.name, "path": "only", **_figures(cost)})
        for program in dmljax:
          tree = _priced(target, program.fn, _placed_args(program, (batch, vocab), dtype, device))
          for scenario in program.scenarios:
            path = recorded[program.name, scenario.path]
            missing = paths.keyed(path, tree)
            if missing:
              raise ValueError(f"{program.name} on {target}: the recorded path names what XLA compiled away: {missing}")
            cost = paths.cost(tree, path, gpu=gpu)
            figures.append(
              {**where, "program": program.name, "path": scenario.path, **_figures(cost), "recipe": scenario.recipe}
            )
            details.append(
              {**where, "program": program.name, "path": scenario.path, "parts": paths.describe(tree, path, gpu=gpu)}
            )
        _log(f"{target} {dtype} {batch}x{vocab}: {clock.seconds():.0f} s")
  return compact(
    {"command": COMMAND, "versions": availability.versions(), "model": _model(), "figures": figures, "details": details}
  )


def compact(record: dict[str, Any]) -> dict[str, Any]:
  """The record as committed: each figure's ratio to its recipe and its whole-row passes (the loops' trips
  summed), and the conditionals' and loops' parts only for the first rows and dtype."""
  figures, details = record["figures"], record["details"]
  passes = {
    (d["target"], d["dtype"], d["rows"], d["program"], d["path"]): sum(
      p["trips"] or 0 for p in d["parts"] if "loop" in p
    )
    for d in details
  }
  columns = ("target", "dtype", "rows", "program", "path", "recipe", "us", "launches", "round_trips", "mb", "passes")
  figures = [
    {
      **{c: f.get(c) for c in columns},
      "passes": passes.get((f["target"], f["dtype"], f["rows"], f["program"], f["path"]), 0),
    }
    for f in figures
  ]
  _judge(figures)
  first = (details[0]["rows"], details[0]["dtype"]) if details else None
  return {**record, "figures": figures, "details": [d for d in details if (d["rows"], d["dtype"]) == first]}


def _model() -> dict[str, Any]:
  from benchmarks.compiled import paths, roofline

  return {
    "gpu_launch_s": roofline.LAUNCH_LATENCY_S,
    "gpu_host_round_trip_s": paths.HOST_ROUND_TRIP_S,
    "tpu_clock_hz": paths.TPU_CLOCK_HZ,
    "tpu_hbm_bytes_per_s": paths.TPU_HBM_BYTES_PER_S,
    "k": K,
    "fallback_k": FALLBACK_K,
    "p": P,
    "temperature": TEMPERATURE,
  }


def _judge(figures: list[dict[str, Any]]) -> None:
  """Each dmljax path's ratio to its recipe (same target, dtype and rows)."""
  recipes = {(f["target"], f["dtype"], f["rows"], f["program"]): f["us"] for f in figures if f["path"] == "only"}
  for f in figures:
    recipe = None if f["path"] == "only" else recipes[f["target"], f["dtype"], f["rows"], f["recipe"]]
    f["ratio"] = None if recipe is None else round(f["us"] / recipe, 3)


# --- the Markdown -------------------------------------------------------------------------------------------------


def markdown(record: dict[str, Any]) -> str:
  """``sampling-compiled.md`` from the record (or its summary, :func:`benchmarks.harness.results.load`)."""
  figures, model = record["figures"], record["model"]
  versions = ", ".join(f"{k} {v}" for k, v in record["versions"].items() if v)
  columns = list(dict.fromkeys((f["rows"], f["dtype"]) for f in figures))
  lines = [
    "# Sampling per path, compiled (not run) for an H100 SXM and a TPU v5e",
    "",
    f"`{record['command']}` in the `aot` venv ({versions}). Nothing here ran on a GPU or TPU: every figure is an "
    "estimate of a program compiled for one (`benchmarks/compiled/paths.py` says how).",
    "",
    "How each figure is derived:",
    "",
    "- **Paths.** Each dmljax program is priced along the path its rows take, recorded by running it on the CPU "
    "(which branch each `lax.cond` took, how many passes each loop made): *candidates*, the row's 64 candidates "
    f"decide (`k = {model['k']}`; for top_p alone, N(0, 8²) logits whose 64 largest entries hold 95%), every "
    f"conditional skipping its whole-row work; *search*, the whole-row search runs (`k = {model['fallback_k']}`, a "
    "runtime k past the candidates; for top_p alone the sampling benchmark's N(0, 3²) logits).",
    "- **Loops** cost their trip count times their body. The search's guide loop runs 32 passes, a bit of the "
    "32-bit order key a pass (float32 and bfloat16 keys alike); its exact loop runs as many passes as the CPU run "
    "made (listed below; 1 where the guide's threshold was already exact). Each pass reads the whole row.",
    "- **Conditionals** cost the branch the path takes; both branches of each are listed below.",
    f"- **H100**: each launch {model['gpu_launch_s'] * 1e6:.0f} µs plus its bytes at the HBM bandwidth its grid can "
    f"use (benchmarks/compiled/roofline.py), plus {model['gpu_host_round_trip_s'] * 1e6:.0f} µs for each host round "
    "trip: XLA:GPU copies a conditional's predicate, and the condition of a loop whose trip count it does not know, "
    "to the host and waits for the stream before it launches the next kernel (an assumption of this model; the "
    "round trips are counted apart).",
    f"- **TPU v5e**: XLA's own per-operation estimate (`estimated_cycles` of the compiled HLO) at "
    f"{model['tpu_clock_hz'] / 1e9:.1f} GHz; a Mosaic kernel, which XLA does not estimate, its bytes at "
    f"{model['tpu_hbm_bytes_per_s'] / 1e9:.0f} GB/s. No host round trips: the chip runs its own control flow.",
    "",
  ]
  for target in dict.fromkeys(f["target"] for f in figures):
    mine = [f for f in figures if f["target"] == target]
    lines += [
      f"## {target}: µs per call (ratio to the recipe; at or below 1.00 meets the target)",
      "",
      "| program | path | against | " + " | ".join(f"{r} {d}" for r, d in columns) + " |",
      "|---|---|---|" + "---|" * len(columns),
    ]
    keys = list(dict.fromkeys((f["program"], f["path"]) for f in mine if f["path"] != "only"))
    for program, path in keys:
      cells, recipe = [], ""
      for r, d in columns:
        found = next(f for f in mine if (f["program"], f["path"], f["rows"], f["dtype"]) == (program, path, r, d))
        recipe = found["recipe"]
        trips = f", {found['round_trips']} rt" if found["round_trips"] else ""
        trips += f", {found['passes']:g} p" if found["passes"] else ""
        cells.append(f"{found['us']:.1f} ({found['ratio']:.2f}{trips})")
      lines.append(f"| {program} | {path} | {recipe} | " + " | ".join(cells) + " |")
    for program in dict.fromkeys(f["program"] for f in mine if f["path"] == "only"):
      cells = [
        f"{next(f for f in mine if (f['program'], f['rows'], f['dtype']) == (program, r, d))['us']:.1f}"
        for r, d in columns
      ]
      lines.append(f"| {program} | (recipe) | | " + " | ".join(cells) + " |")
    lines += ["", "rt: host round trips included in the figure; p: whole-row passes of the search's loops.", ""]
  lines += _parts(record)
  return "\n".join(lines) + "\n"


def _parts(record: dict[str, Any]) -> list[str]:
  """Each conditional's branches and each loop's trips, for the first rows and dtype of the record."""
  details = record["details"]
  if not details:
    return []
  first = (details[0]["rows"], details[0]["dtype"])
  lines = [
    f"## Conditionals and loops ({first[0]} {first[1]}), µs",
    "",
    "Each conditional's two branches (0: the candidates decide and the whole-row work is skipped; 1: it runs) as "
    "the search path prices them (— where the path never enters a branch), and each loop's trips per run and "
    "one pass's cost.",
    "",
    "| target | program | path | conditional or loop | taken / trips | branch 0 / branch 1, or one pass |",
    "|---|---|---|---|---|---|",
  ]
  for d in details:
    if (d["rows"], d["dtype"]) != first or d["path"] != "search":
      continue
    for part in d["parts"]:
      if "conditional" in part:
        shown = " / ".join("—" if s is None else f"{s * 1e6:.1f}" for s in part["branch_seconds"])
        taken = "—" if part["taken"] is None else str(part["taken"])
        lines.append(f"| {d['target']} | {d['program']} | {d['path']} | `{part['conditional']}` | {taken} | {shown} |")
      else:
        body = "—" if part["body_seconds"] is None else f"{part['body_seconds'] * 1e6:.2f}"
        trips = "—" if part["trips"] is None else f"{part['trips']:g}"
        lines.append(f"| {d['target']} | {d['program']} | {d['path']} | `{part['loop']}` | {trips} | {body} |")
  return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog=COMMAND, description=(__doc__ or "").split("\n")[0])
  parser.add_argument("--rows", help="comma-separated BATCHxVOCAB (default 8x32000,64x32000,8x128256)")
  parser.add_argument("--dtypes", default=",".join(DTYPES))
  parser.add_argument("--targets", default=",".join(TARGETS))
  parser.add_argument("--out", type=Path, default=RESULTS)
  parser.add_argument("--render", type=Path, help="a raw record (results/raw/sampling-compiled.json): nothing compiled")
  args = parser.parse_args(argv)
  from benchmarks.harness import results

  if args.render:
    record = compact(json.loads(args.render.read_text()))
    summary = results.write(record, args.out, "sampling-compiled")
    (args.out / "sampling-compiled.md").write_text(markdown(summary))
    return 0
  for kind in ("gpu", "tpu"):
    reason = availability.problem(kind)
    if reason is not None:
      print(f"cannot compile for {kind.upper()}: {reason}", file=sys.stderr)
      return 2
  rows = ROWS if not args.rows else tuple(tuple(int(n) for n in r.split("x")) for r in args.rows.split(","))
  record = run(rows, args.dtypes.split(","), args.targets.split(","))  # type: ignore[arg-type]
  summary = results.write(record, args.out, "sampling-compiled")
  (args.out / "sampling-compiled.md").write_text(markdown(summary))
  print(args.out / "sampling-compiled.md")
  return 0


if __name__ == "__main__":
  sys.exit(main())
