"""One workload: build its contenders, time them (forward, then forward+backward), compare with dmljax.

A contender that cannot be built or run is recorded with its error (shown in the report); it never
stops the run. Ratios are dmljax's median over each family's best median (below 1: dmljax faster),
and the median of same-round ratios (paired), which cancels slow drifts of the machine's load.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import bandwidth, timing
from benchmarks.harness.adapters_jax import add_jax_fwd_bwd, fwd_bwd_function, jax_contender, value
from benchmarks.harness.timing import Contender, Progress, error_text, time_interleaved
from benchmarks.harness.workload import Workload
from benchmarks.peers import adapters_onnx, adapters_torch

NATIVE = ("jax", "jax-approx")
FAMILIES = ("jax", "jax-approx", "baseline", "torch", "onnxruntime", "dmljax-eager")


def _cotangent(rng: np.random.Generator, example: Any) -> np.ndarray:
  ct = rng.standard_normal(example.shape, dtype=np.float32)
  ct[ct == 0] = 0.5
  return ct.astype(np.dtype(example.dtype))


def build_contenders(
  w: Workload, args: argparse.Namespace, progress: Progress, rng: np.random.Generator
) -> tuple[list[Contender], dict[str, str], dict[str, str], list[tuple[np.ndarray, ...]]]:
  """Every contender of ``w`` (compiled and ready), the errors and families of those that failed, the inputs."""
  np_inputs = [w.make(rng) for _ in range(args.pool)]
  inputs = [tuple(jnp.asarray(a) for a in xs) for xs in np_inputs]
  base_inputs = []
  if w.baseline_make is not None:
    base_inputs = [tuple(jnp.asarray(a) for a in w.baseline_make(rng)) for _ in range(args.pool)]
  np_cts: list[np.ndarray] | None = None
  if w.grad:
    example = jax.eval_shape(lambda *a: value(w.dmljax(*a), w.value_output), *inputs[0])
    np_cts = [_cotangent(rng, example) for _ in range(args.pool)]
  cotangents = None if np_cts is None else [jnp.asarray(ct) for ct in np_cts]
  contenders: list[Contender] = []
  errors: dict[str, str] = {}
  failed_families: dict[str, str] = {}

  def guarded(name: str, family: str, build: Callable[[], Contender]) -> None:
    progress.show(f"{w.name}: compiling {name}")
    try:
      contenders.append(build())
    except Exception as e:
      errors[name] = error_text(e)
      failed_families[name] = family

  def jax_form(name: str, family: str, fn: Callable[..., Any], data: Sequence[tuple[Any, ...]]) -> Contender:
    c = jax_contender(name, family, fn, data)
    if cotangents is not None and data is inputs:
      add_jax_fwd_bwd(c, fn, data, cotangents, w.value_output)
    c.approx_reason = w.approx_reasons.get(name)
    return c

  guarded("dmljax", "dmljax", lambda: jax_form("dmljax", "dmljax", w.dmljax, inputs))
  if not args.no_eager:
    eager = "dmljax (eager)"
    guarded(eager, "dmljax-eager", lambda: jax_contender(eager, "dmljax-eager", w.dmljax, inputs, eager=True))
  for name, fn in w.jax.items():
    family = "jax-approx" if name in w.approx_reasons else "jax"
    guarded(name, family, lambda name=name, fn=fn, family=family: jax_form(name, family, fn, inputs))
  for name, fn in w.baseline.items():
    guarded(name, "baseline", lambda name=name, fn=fn: jax_form(name, "baseline", fn, base_inputs))
  torch = None if args.no_torch else adapters_torch.load()
  if torch is not None:
    build = adapters_torch.contender
    for name, fn in w.torch.items():
      label = name if name.startswith("torch") else f"torch {name}"
      guarded(label, "torch", lambda fn=fn, label=label: build(torch, label, fn, np_inputs, np_cts, w.value_output))
  ort = None if args.no_onnx else adapters_onnx.load()
  if ort is not None:
    for name, node in w.onnx.items():
      label = f"onnxruntime {name}"
      guarded(label, "onnxruntime", lambda node=node, label=label: adapters_onnx.contender(ort, label, node, np_inputs))
  names = [c.name for c in contenders]
  assert len(set(names)) == len(names), f"contender names must be unique: {names}"
  return contenders, errors, failed_families, np_inputs


def run_workload(w: Workload, args: argparse.Namespace, progress: Progress, seed: int) -> dict[str, Any]:
  """Times every contender of ``w``; returns the workload's record of the JSON report."""
  contenders, errors, failed, np_inputs = build_contenders(w, args, progress, np.random.default_rng(seed))
  options = dict(pool=args.pool, warmup=args.warmup, repeats=args.repeats, min_sample=args.min_sample)
  options["evict"] = getattr(args, "evict", True)
  runners = [(c.name, c.forward) for c in contenders]
  copies: list[str] = []
  if w.reduction_bytes:
    # The copy bandwidth of target 3, measured interleaved with the reductions (same conditions).
    extra = bandwidth.copy_runners(args, (w.reduction_bytes // 4,))
    copies = [name for name, _ in extra]
    runners += extra
  forward, fwd_errors = time_interleaved(runners, progress=progress, label=f"{w.name}: forward", **options)
  fwd_bwd_runners = [(c.name, c.fwd_bwd) for c in contenders if c.fwd_bwd is not None]
  fwd_bwd: dict[str, Any] = {}
  bwd_errors: dict[str, str] = {}
  if fwd_bwd_runners:
    fwd_bwd, bwd_errors = time_interleaved(
      fwd_bwd_runners, progress=progress, label=f"{w.name}: forward+backward", **options
    )
  families = {c.name: c.family for c in contenders} | {name: "copy" for name in copies}
  failed |= {name: families[name] for name in (*fwd_errors, *bwd_errors)}
  mine = next((c for c in contenders if c.name == "dmljax"), None)

  def same_program(c: Contender, phase: str) -> bool | None:
    if mine is None or c.family not in NATIVE:
      return None
    a, b = (mine.program, c.program) if phase == "forward" else (mine.fwd_bwd_program, c.fwd_bwd_program)
    return None if a is None or b is None else a == b

  result = {
    "name": w.name,
    "group": w.group,
    "target": w.target,
    "shapes": [list(a.shape) for a in np_inputs[0]],
    "dtypes": [str(a.dtype) for a in np_inputs[0]],
    "has_gradient": w.grad,
    "slow_native": w.slow_native,
    "reduction_bytes": w.reduction_bytes,
    "contenders": {
      c.name: {
        "family": c.family,
        "semantics": "approximate" if c.approx_reason else ("exact" if c.family in NATIVE else None),
        "approx_reason": c.approx_reason,
        "compile_s": c.compile_s,
        "fwd_bwd_compile_s": c.fwd_bwd_compile_s,
        "temp_bytes": c.temp_bytes,
        "fwd_bwd_temp_bytes": c.fwd_bwd_temp_bytes,
        "same_compiled_program_as_dmljax": same_program(c, "forward"),
        "same_compiled_fwd_bwd_program_as_dmljax": same_program(c, "fwd_bwd"),
      }
      for c in contenders
    },
    "forward": {name: {"family": families[name], **s} for name, s in forward.items()},
    "fwd_bwd": {name: {"family": families[name], **s} for name, s in fwd_bwd.items()},
    "errors": {
      **errors,
      **{f"{k} (forward)": v for k, v in fwd_errors.items()},
      **{f"{k} (fwd_bwd)": v for k, v in bwd_errors.items()},
    },
    "failed_families": sorted(set(failed.values())),
  }
  result["ratios"] = ratios(result)
  if args.compile_rounds and mine is not None:
    native = {name: fn for name, fn in w.jax.items() if name in result["forward"]}
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in np_inputs[0]]
    progress.show(f"{w.name}: trace + compile")
    result["trace_compile"] = timing.compile_times({"dmljax": w.dmljax, **native}, shapes, args.compile_rounds)
    if fwd_bwd:
      # The gradient programs too, each as the timed one: the value and the input's gradient for a cotangent.
      cotangent = jax.eval_shape(lambda *a: value(w.dmljax(*a), w.value_output), *shapes)
      grads = {name: fwd_bwd_function(fn, w.value_output) for name, fn in {"dmljax": w.dmljax, **native}.items()}
      grads = {name: fn for name, fn in grads.items() if name in fwd_bwd}
      progress.show(f"{w.name}: trace + compile (forward+backward)")
      result["trace_compile_fwd_bwd"] = timing.compile_times(grads, [*shapes, cotangent], args.compile_rounds)
  return result


def best(section: dict[str, Any], *families: str) -> tuple[str | None, float | None]:
  """The fastest contender (name, median) of the given families in one phase's timings."""
  found = [(s["median_s"], name) for name, s in section.items() if s["family"] in families]
  if not found:
    return None, None
  median, name = min(found)
  return name, median


def ratios(result: dict[str, Any]) -> dict[str, Any]:
  """dmljax's median over each family's best median (below 1: dmljax is faster), and paired ratios.

  ``jax`` compares with the fastest native form, exact or approximate (``jax-approx`` alone also
  has its entry).
  """
  out: dict[str, Any] = {}
  for phase in ("forward", "fwd_bwd"):
    section = result[phase]
    if "dmljax" not in section:
      continue
    mine = section["dmljax"]["median_s"]
    phase_out: dict[str, Any] = {}
    for family in FAMILIES:
      name, median = best(section, *(NATIVE if family == "jax" else (family,)))
      if name is None or median is None:
        continue
      # Same-round ratios: both samples ran back to back, so slow drifts of the machine's load cancel.
      paired = np.array(section["dmljax"]["samples_s"]) / np.array(section[name]["samples_s"])
      q1, mid, q3 = (float(v) for v in np.percentile(paired, [25, 50, 75]))
      phase_out[family] = {"form": name, "ratio": mine / median, "paired_ratio": mid, "paired_q1": q1, "paired_q3": q3}
    out[phase] = phase_out
  return out
