"""The device check's benchmarks: dmljax against native JAX (and ``torch.topk``), every dmljax result checked.

``python -m benchmarks.device.bench --json PATH [--short] [--deadline SECONDS]`` (``benchmarks/device/check.sh``
runs it). Cases, most important first: ``dml.top_k`` (the table's pick) against ``jax.lax.top_k`` and
``torch.topk`` (CUDA), argmax, REDUCE's SUM/MAX/LOG_SUM_EXP against ``jnp.sum``/``jnp.max``/
``jax.nn.logsumexp``, decode-step sampling against the native recipes of :mod:`benchmarks.sampling.bench`, then every
top-k strategy of the local table forced by name. Each case is compiled, warmed up, then timed in interleaved
rounds (medians per call, each sample long enough to hide the launch). dmljax's results are judged against the
self-check's NumPy reference (:mod:`dmljax._src.selfcheck.reference`): bits for top_k, argmax and MAX, a stated
tolerance for SUM and LOG_SUM_EXP, kept tokens for sampling; a wrong one makes the device check fail. Whether
native JAX and PyTorch agree with dmljax is shown, never judged. A case that errors is recorded and the next one
runs; cases left when ``--deadline`` comes are recorded as skipped. The JSON is rewritten after every case.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dmljax as dml
from benchmarks.harness import timing
from benchmarks.sampling import bench as recipes
from dmljax._src import cpu_kernel_library, platform
from dmljax._src.selfcheck import reference
from dmljax._src.selfcheck.runner import local_branch
from dmljax._src.strategies import cpu_kernel, dispatch
from dmljax._src.strategies.case import Case

Call = tuple[Callable[[], Any], Callable[[Any], Any]]  # (run once, wait for its result)


def _torch() -> Any:
  try:
    import torch
  except Exception:  # not installed, or broken: no PyTorch contender
    return None
  return torch if torch.cuda.is_available() else None


def _medians(calls: dict[str, Call], rounds: int, min_sample: float) -> dict[str, float]:
  """Median seconds per call of each contender, interleaved round by round, after two warm-up calls."""
  runs = {name: run for name, (run, _) in calls.items()}
  waits = {name: wait for name, (_, wait) in calls.items()}
  return timing.medians(runs, rounds=rounds, min_sample=min_sample, warmup=2, waits=waits)


def _jax_call(fn: Callable[..., Any], *args: Any) -> tuple[Call, float]:
  compiled, parts = timing.traced_and_compiled(fn, args)
  return (lambda: compiled(*args), jax.block_until_ready), sum(parts)


def _error_text(error: BaseException) -> str:
  where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
  first = (str(error).splitlines() or [""])[0][:300]
  return f"{type(error).__name__}: {first}" + (f" ({Path(where.filename).name}:{where.lineno})" if where else "")


def _logits(shape: tuple[int, int], dtype: Any, seed: int) -> np.ndarray:
  x = np.random.default_rng(seed).standard_normal(shape) * 3
  if np.dtype(dtype).kind == "i":
    return (x * 1e6).astype(dtype)
  return x.astype(dtype)


def _selection_problem(x: np.ndarray, ranked: np.ndarray, k: int, out: Any) -> str | None:
  values, indices = (np.asarray(o) for o in out)
  want = ranked[..., :k]
  if indices.shape != want.shape or not np.array_equal(indices, want):
    bad = np.argwhere(indices != want)[0] if indices.shape == want.shape else None
    return f"indices differ from the reference (first at {None if bad is None else bad.tolist()})"
  if not np.array_equal(reference.bits_of(values), np.take_along_axis(reference.bits_of(x), want, axis=-1)):
    return "value bits differ from the input's at the reference's indices"
  return None


class Bench:
  """The cases run so far, written to JSON after each."""

  def __init__(self, path: Path, short: bool, deadline: float, torch: bool) -> None:
    self.path, self.short, self.deadline, self.start = path, short, deadline, time.monotonic()
    self.rounds, self.min_sample = (3, 0.002) if short else (7, 0.02)
    self.cases: list[dict[str, Any]] = []
    self.torch = _torch() if torch else None
    self.branch = local_branch()
    self.device = jax.devices()[0]

  def case(self, name: str, build: Callable[[dict[str, Any]], None]) -> None:
    record: dict[str, Any] = {"name": name, "seconds": {}, "compile_seconds": {}, "agrees": {}, "wrong": None}
    if time.monotonic() - self.start > self.deadline:
      record["skipped"] = "out of time"
    else:
      try:
        build(record)
      except Exception as error:  # reported, not fatal: the next case runs
        record["error"] = _error_text(error)
    shown = record.get("error") or record.get("skipped") or record.get("wrong") or "ok"
    print(f"{time.monotonic() - self.start:6.1f} s  {name}: {shown}", flush=True)
    self.cases.append(record)
    self.write()

  def time(self, record: dict[str, Any], calls: dict[str, Call]) -> None:
    record["seconds"] = _medians(calls, self.rounds, self.min_sample)

  def write(self) -> None:
    data = {
      "device": f"{self.device.platform} {self.device.device_kind}",
      "jax": jax.__version__,
      "short": self.short,
      "rounds": self.rounds,
      "min_sample_s": self.min_sample,
      "strategy_table": self.branch,
      "torch_cuda": self.torch is not None,
      "cases": self.cases,
      "markdown": markdown(self.cases),
      "summary": summary(self.cases),
    }
    self.path.write_text(json.dumps(data, indent=1) + "\n")

  # The cases.

  def top_k(self, x_np: np.ndarray, ranked: np.ndarray, k: int, strategies: bool) -> Callable[[dict[str, Any]], None]:
    def build(record: dict[str, Any]) -> None:
      x = jax.device_put(x_np)
      calls: dict[str, Call] = {}
      outputs: dict[str, Any] = {}
      labels: list[tuple[str, str | None]] = [("dmljax", None)]
      if strategies:
        case = Case(np.dtype(x_np.dtype), x_np.shape, k, True)
        labels = [(s.name, s.name) for s in dispatch.TABLES[self.branch] if s.handles(case)]
      for label, strategy in labels:
        if label == cpu_kernel.NAME and not cpu_kernel_library.available():
          # Forced, it would run its XLA fallback under the kernel's name: shown as absent instead.
          record.setdefault("absent", {})[label] = cpu_kernel_library.status()
          continue
        try:
          with platform.choosing(top_k=strategy):  # traced (at lower) under the choice
            calls[label], record["compile_seconds"][label] = _jax_call(lambda x: dml.top_k(x, k), x)
          outputs[label] = jax.device_get(calls[label][0]())
        except Exception as error:  # one strategy that fails is shown; the others run
          if not strategies:
            raise
          calls.pop(label, None)
          record.setdefault("errors", {})[label] = _error_text(error)
      record["native"] = "jax.lax.top_k"
      calls["jax.lax.top_k"], record["compile_seconds"]["jax.lax.top_k"] = _jax_call(lambda x: jax.lax.top_k(x, k), x)
      native = jax.device_get(calls["jax.lax.top_k"][0]())
      problems = {label: _selection_problem(x_np, ranked, k, out) for label, out in outputs.items()}
      record["wrong"] = "; ".join(f"{label}: {p}" for label, p in problems.items() if p) or None
      record["agrees"]["jax.lax.top_k"] = _selection_problem(x_np, ranked, k, native) is None
      if self.torch is not None and not strategies:
        torch = self.torch
        try:
          t = torch.from_numpy(x_np.astype(np.float32) if x_np.dtype.kind == "V" else x_np).cuda()
          t = t.to(torch.bfloat16) if x_np.dtype.name == "bfloat16" else t
          got = torch.topk(t, k)
          record["agrees"]["torch.topk"] = bool(np.array_equal(got.indices.cpu().numpy(), ranked[..., :k]))
          calls["torch.topk"] = (lambda: torch.topk(t, k), lambda _: torch.cuda.synchronize())
        except Exception as error:  # PyTorch's failure is shown, not dmljax's
          record.setdefault("errors", {})["torch.topk"] = _error_text(error)
      self.time(record, calls)

    return build

  def argmax(self, x_np: np.ndarray, ranked: np.ndarray) -> Callable[[dict[str, Any]], None]:
    def build(record: dict[str, Any]) -> None:
      x = jax.device_put(x_np)
      calls = {}
      calls["dmljax"], record["compile_seconds"]["dmljax"] = _jax_call(lambda x: dml.argmax(x, -1), x)
      record["native"] = "jnp.argmax"
      calls["jnp.argmax"], record["compile_seconds"]["jnp.argmax"] = _jax_call(lambda x: jnp.argmax(x, -1), x)
      want = ranked[..., 0]
      if not np.array_equal(np.asarray(calls["dmljax"][0]()), want):
        record["wrong"] = "argmax differs from the reference's first largest index"
      record["agrees"]["jnp.argmax"] = bool(np.array_equal(np.asarray(calls["jnp.argmax"][0]()), want))
      self.time(record, calls)

    return build

  def reduce(self, x_np: np.ndarray, function: str) -> Callable[[dict[str, Any]], None]:
    natives: dict[str, tuple[str, Callable[..., Any]]] = {
      "sum": ("jnp.sum", jnp.sum),
      "max": ("jnp.max", jnp.max),
      "logsumexp": ("logsumexp", jax.nn.logsumexp),
    }

    def build(record: dict[str, Any]) -> None:
      x = jax.device_put(x_np)
      name, native = natives[function]
      calls = {}
      calls["dmljax"], record["compile_seconds"]["dmljax"] = _jax_call(lambda x: dml.reduce(x, function, -1), x)
      record["native"] = name
      calls[name], record["compile_seconds"][name] = _jax_call(lambda x: native(x, axis=-1), x)
      got = np.asarray(calls["dmljax"][0]())
      n, dtype = x_np.shape[-1], x_np.dtype
      if function == "max":
        record["wrong"] = None if reference.equal_to_extreme(x_np, got, True).all() else "not the row's largest"
      else:
        if function == "sum":
          want, magnitude = reference.float_sum(x_np)
          tolerance = 2 * reference.ulp(want, dtype) + n * reference.accumulator_epsilon(dtype) * magnitude
        else:
          want = reference.log_sum_exp(x_np)
          tolerance = 2 * reference.ulp(want, dtype) + (n + 8) * reference.accumulator_epsilon(dtype)
        error = np.abs(reference.decoded(got) - want)
        record["largest_error"] = float(error.max())
        record["wrong"] = None if (error <= tolerance).all() else f"error {error.max():.3g} above the tolerance"
      self.time(record, calls)

    return build

  def sampling(self, x_np: np.ndarray, workload: str) -> Callable[[dict[str, Any]], None]:
    k, p = recipes.K, recipes.P

    def build(record: dict[str, Any]) -> None:
      x = jax.device_put(x_np)
      key, kk, pp = jax.random.key(0), jnp.int32(k), jnp.float32(p)
      workloads: dict[str, dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]] = {
        "top_k": {"dmljax": (recipes.dml_top_k, (key, x, kk)), "native": (recipes.native_top_k, (key, x))},
        "top_p": {"dmljax": (recipes.dml_top_p, (key, x, pp)), "native": (recipes.sort_top_p, (key, x, pp))},
        "top_k_top_p": {
          "dmljax": (recipes.dml_top_k_top_p, (key, x, kk, pp)),
          "native": (lambda key, x, p: recipes.sort_top_p(key, x, p, k), (key, x, pp)),
        },
      }
      contenders = workloads[workload]
      calls = {}
      record["native"] = "native"
      for label, (fn, args) in contenders.items():
        calls[label], record["compile_seconds"][label] = _jax_call(fn, *args)
      tokens = np.asarray(calls["dmljax"][0]())
      # p is not kept away from the cumulative sums here: a token is accepted in the nucleus of p + 1e-4.
      keep = np.ones(x_np.shape, bool)
      if workload != "top_p":
        keep = reference.top_k_keep(x_np, np.int32(k))
      if workload != "top_k":
        keep &= reference.top_p_keep(np.where(keep, x_np, -np.inf), np.float32(p + 1e-4))
      bad = [r for r, t in enumerate(tokens.tolist()) if not keep[r, t]]
      record["wrong"] = f"rows {bad}: token outside the kept entries" if bad else None
      self.time(record, calls)

    return build


def _ms(seconds: float | None) -> str:
  return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _native(record: dict[str, Any]) -> str | None:
  native = record.get("native")
  return native if native in record["seconds"] else None


def markdown(cases: list[dict[str, Any]]) -> str:
  lines = [
    "Medians per call in ms (interleaved rounds). `ratio`: dmljax over native JAX (below 1: dmljax faster). "
    "`exact`: dmljax's result against the self-check's reference (bits; SUM and LOG_SUM_EXP within a tolerance; "
    "sampling: the token is a kept entry). `agrees`: whether native JAX / PyTorch give the same indices.",
    "",
    "| case | contender | ms | native | native ms | ratio | compile s (dmljax / native) | exact | agrees |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  for c in cases:
    if c.get("error") or c.get("skipped"):
      lines.append(f"| {c['name']} | - | - | - | - | - | - | {c.get('error') or c.get('skipped')} | - |")
      continue
    native = _native(c)
    mine = [n for n in c["seconds"] if n != native and n != "torch.topk"]
    agrees = ", ".join(f"{n} {'yes' if v else 'no'}" for n, v in c["agrees"].items()) or "-"
    for label in mine:
      native_s = c["seconds"].get(native) if native else None
      ratio = f"{c['seconds'][label] / native_s:.2f}" if native_s else "-"
      compiled = f"{c['compile_seconds'].get(label, 0):.2f} / {c['compile_seconds'].get(native, 0):.2f}"
      exact = "WRONG: " + c["wrong"] if c.get("wrong") else "yes"
      lines.append(
        f"| {c['name']} | {label} | {_ms(c['seconds'][label])} | {native} | {_ms(native_s)} | {ratio} "
        f"| {compiled} | {exact} | {agrees} |"
      )
    if "torch.topk" in c["seconds"]:
      lines.append(f"| {c['name']} | torch.topk | {_ms(c['seconds']['torch.topk'])} | | | | | | |")
    for label, text in c.get("errors", {}).items():
      lines.append(f"| {c['name']} | {label} | - | | | | | error: {text} | |")
    for label, text in c.get("absent", {}).items():
      lines.append(f"| {c['name']} | {label} | - | | | | | not loaded: {text} | |")
  return "\n".join(lines) + "\n"


def summary(cases: list[dict[str, Any]]) -> str:
  """One line per case: dmljax's ms, native's ms and the ratio, or the error."""
  lines = ["benchmarks (ms per call: dmljax / native = ratio; torch):"]
  for c in cases:
    if c.get("error") or c.get("skipped"):
      lines.append(f"  {c['name']}: {c.get('error') or c.get('skipped')}")
      continue
    native = _native(c)
    parts = []
    for label, seconds in c["seconds"].items():
      if label in (native, "torch.topk"):
        continue
      ratio = f" = {seconds / c['seconds'][native]:.2f}" if native else ""
      parts.append(f"{label} {_ms(seconds)} / {_ms(c['seconds'].get(native))}{ratio}")
    if "torch.topk" in c["seconds"]:
      parts.append(f"torch {_ms(c['seconds']['torch.topk'])}")
    wrong = f"  WRONG: {c['wrong']}" if c.get("wrong") else ""
    failed = "".join(f"; {label} failed: {text}" for label, text in c.get("errors", {}).items())
    failed += "".join(f"; {label} not loaded" for label in c.get("absent", {}))
    lines.append(f"  {c['name']}: {'; '.join(parts)}{wrong}{failed}")
  return "\n".join(lines) + "\n"


def main() -> None:
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--json", type=Path, required=True)
  parser.add_argument("--short", action="store_true", help="small sizes, few rounds (a CPU smoke run)")
  parser.add_argument("--deadline", type=float, default=300.0, help="seconds after which no new case starts")
  parser.add_argument("--no-torch", action="store_true", help="no torch.topk contender (and no import of torch)")
  args = parser.parse_args()
  bench = Bench(args.json, args.short, args.deadline, not args.no_torch)
  short = args.short
  rows, n = (8, 4096) if short else (64, 131072)
  vocab = ((4, 8192),) if short else ((8, 128256), (64, 32000))
  ks = (8, 64) if short else (1, 8, 64, 1024)
  # The short run (a CPU smoke run) takes one case of each kind.
  x32 = _logits((rows, n), np.float32, 0)
  ranked32 = reference.ranked(x32, largest_first=True)
  for k in ks:
    bench.case(f"top_k float32 {rows}x{n} k={k}", bench.top_k(x32, ranked32, k, strategies=False))
  bench.case(f"argmax float32 {rows}x{n}", bench.argmax(x32, ranked32))
  for function in ("sum", "max", "logsumexp"):
    bench.case(f"{function} float32 {rows}x{n}", bench.reduce(x32, function))
  for batch, size in vocab:
    logits = _logits((batch, size), np.float32, batch + size)
    for workload in ("top_k_top_p",) if short else ("top_k", "top_p", "top_k_top_p"):
      bench.case(f"sample {workload} float32 {batch}x{size}", bench.sampling(logits, workload))
  x16 = _logits((rows, n), jnp.bfloat16, 1)
  ranked16 = reference.ranked(x16, largest_first=True)
  for k in ks[1:3]:
    bench.case(f"top_k bfloat16 {rows}x{n} k={k}", bench.top_k(x16, ranked16, k, strategies=False))
  if not short:
    bench.case(f"argmax bfloat16 {rows}x{n}", bench.argmax(x16, ranked16))
    for function in ("sum", "max", "logsumexp"):
      bench.case(f"{function} bfloat16 {rows}x{n}", bench.reduce(x16, function))
    xi = _logits((rows, n), np.int32, 2)
    bench.case(f"top_k int32 {rows}x{n} k=64", bench.top_k(xi, reference.ranked(xi, largest_first=True), 64, False))
  for k in ks[1:2] if short else ks:
    bench.case(f"top_k float32 {rows}x{n} k={k}, strategies", bench.top_k(x32, ranked32, k, strategies=True))
  if not short:
    bench.case(f"top_k bfloat16 {rows}x{n} k=64, strategies", bench.top_k(x16, ranked16, 64, strategies=True))
  bench.write()


if __name__ == "__main__":
  main()
