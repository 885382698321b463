"""The report: the run's environment (versions, host, the thread settings in force) and its Markdown.

Every contender that could not be built or run appears in the tables ("error") and, with its
error, in a section of its own.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

import jax
import numpy as np

import dmljax as dml
from benchmarks.harness.measure import NATIVE, best
from benchmarks.peers import adapters_onnx, adapters_torch


def device_name() -> str:
  d = jax.devices()[0]
  if d.platform == "cpu":
    return "cpu"
  return re.sub(r"[^a-z0-9]+", "-", f"{d.platform}-{d.device_kind}".lower()).strip("-")


def _dist_version(name: str) -> str | None:
  from importlib import metadata

  try:
    return metadata.version(name)
  except metadata.PackageNotFoundError:
    return None


def _cpu_model() -> str:
  try:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def environment(peers: bool = True) -> dict[str, Any]:
  """Versions, device, host and thread settings; ``peers=False`` leaves PyTorch and ONNX Runtime unimported."""
  torch, ort = (adapters_torch.load(), adapters_onnx.load()) if peers else (None, None)
  versions = {"python": platform.python_version(), "jax": jax.__version__, "dmljax": dml.__version__}
  versions["jaxlib"] = getattr(jax.lib, "__version__", None) or _dist_version("jaxlib")
  versions["numpy"] = np.__version__
  versions["torch"] = torch.__version__ if torch else None
  versions["onnxruntime"] = ort.__version__ if ort else None
  d = jax.devices()[0]
  return {
    "versions": versions,
    "device": {"platform": d.platform, "kind": d.device_kind, "count": jax.device_count()},
    "host": {"cpu": _cpu_model(), "cores": os.cpu_count(), "system": platform.system()},
    "thread_settings": {
      "torch": adapters_torch.settings(torch),
      "onnxruntime": adapters_onnx.settings(ort),
      "xla_flags": os.environ.get("XLA_FLAGS", ""),
    },
    "malloc_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("MALLOC_")},
  }


def _ms(seconds: float | None) -> str:
  return "–" if seconds is None else f"{seconds * 1e3:.3g}"


def _spread(s: dict[str, Any]) -> str:
  return f"±{100 * (s['q3_s'] - s['q1_s']) / 2 / s['median_s']:.0f}%"


def _timed(s: dict[str, Any] | None) -> str:
  return f"{_ms(s['median_s'])} {_spread(s)}" if s else "–"


def _native_label(w: dict[str, Any], name: str, phase: str) -> str:
  """The form's name marked ≡ (same compiled program as dmljax), ≈ (approximates the semantics) or exact."""
  c = w["contenders"].get(name, {})
  key = "same_compiled_program_as_dmljax" if phase == "forward" else "same_compiled_fwd_bwd_program_as_dmljax"
  if c.get(key):
    return f"{name} ≡"
  return f"≈ {name}" if c.get("approx_reason") else f"{name}, exact"


def _failed(w: dict[str, Any], *families: str) -> bool:
  return any(f in w.get("failed_families", ()) for f in families)


def _settings_line(env: dict[str, Any]) -> str:
  threads = env.get("thread_settings", {})
  t, o = threads.get("torch", {}), threads.get("onnxruntime", {})
  parts = []
  if t.get("installed"):
    parts.append(
      f"PyTorch {t['intra_op_threads']} intra-op / {t['inter_op_threads']} inter-op threads, "
      f"OMP_WAIT_POLICY {t['omp_wait_policy']}"
    )
  if o.get("installed"):
    parts.append(
      f"ONNX Runtime intra-op threads {o['intra_op_num_threads']} ({o['threads_note']}), spinning {o['allow_spinning']}"
    )
  tuned = env.get("malloc_env") or {}
  if tuned:
    parts.append("glibc malloc tuned: " + ", ".join(f"{k}={v}" for k, v in tuned.items()))
  return "; ".join(parts)


def _header(report: dict[str, Any]) -> list[str]:
  env, settings = report["environment"], report["settings"]
  v = env["versions"]
  return [
    f"# dmljax benchmark: {report['device_name']}",
    "",
    f"Device: {env['device']['kind']} ({env['device']['platform']}); host CPU {env['host']['cpu']}, "
    f"{env['host']['cores']} cores. Versions: jax {v['jax']}, jaxlib {v['jaxlib']}, torch {v['torch']}, "
    f"onnxruntime {v['onnxruntime']}, numpy {v['numpy']}, Python {v['python']}. "
    f"Every framework runs at its defaults: {_settings_line(env) or 'none recorded'}. "
    f"{settings['repeats']} interleaved runs per contender after {settings['warmup']} warm-up calls; medians in "
    "ms (± half the interquartile range). Ratio = dmljax / other (below 1: dmljax faster); (paired) is the "
    "median of same-round ratios, which cancels slow drifts of the machine's load. dmljax and native JAX both "
    f"run under `jax.jit`. Run at {report['timestamp']}" + (" (--quick sizes)" if settings["quick"] else "") + ".",
    "",
    "JAX (form) is the fastest native JAX form, labelled by what it computes: *exact* (DirectML's semantics, "
    "tie order, NaN and signed-zero rules included), *≡* (its optimised HLO program is identical to dmljax's, "
    "names aside, so any measured difference is timing noise) or *≈* (it only approximates the semantics; "
    "why is listed under the tables).",
  ]


def _contender_cells(w: dict[str, Any], phase: str, families_list: tuple[tuple[str, ...], ...]) -> list[str]:
  """Per family of contenders: the fastest one's time (native JAX: with its form) and dmljax's ratio to it."""
  f = w[phase]
  mine = f.get("dmljax")
  cells: list[str] = []
  for families in families_list:
    name, median = best(f, *families)
    if name is None:
      cells += ["error" if _failed(w, *families) else "–", "–"]
      continue
    ratio = f"{mine['median_s'] / median:.2f}" if mine else "–"
    if families == NATIVE:
      paired = w["ratios"].get(phase, {}).get("jax", {}).get("paired_ratio")
      ratio += f" ({paired:.2f})" if paired is not None else ""
      cells += [f"{_timed(f[name])} ({_native_label(w, name, phase)})", ratio]
    else:
      cells += [_timed(f[name]), ratio]
  return cells


def _compile_cell(w: dict[str, Any]) -> str:
  """Median trace + compile for a new static parameter, dmljax / the native form of target 1, and their ratio."""
  times = w.get("trace_compile") or {}
  jname, _ = best(w["forward"], *NATIVE)
  mine, native = times.get("dmljax"), times.get(jname) if jname else None
  if mine is None:
    return "–"
  if native is None:
    return f"{_ms(mine['median_s'])} / –"
  return f"{_ms(mine['median_s'])} / {_ms(native['median_s'])} ({mine['median_s'] / native['median_s']:.1f}×)"


def _forward_table(report: dict[str, Any]) -> list[str]:
  lines = [
    "",
    "## Forward",
    "",
    "| workload | dmljax | JAX (form) | dmljax/JAX (paired) | PyTorch | dmljax/torch | ONNX Runtime | dmljax/ORT "
    "| eager dmljax | trace+compile dmljax / JAX (ms) |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for w in report["workloads"]:
    f = w["forward"]
    mine = f.get("dmljax")
    row = [w["name"], "error" if mine is None and _failed(w, "dmljax") else _timed(mine)]
    row += _contender_cells(w, "forward", (NATIVE, ("torch",), ("onnxruntime",)))
    eager = f.get("dmljax (eager)")
    row.append(_ms(eager["median_s"]) if eager else "–")
    row.append(_compile_cell(w))
    lines.append("| " + " | ".join(row) + " |")
  return lines


def _fwd_bwd_table(report: dict[str, Any]) -> list[str]:
  lines = [
    "",
    "## Forward + backward (value and input gradient for a random cotangent)",
    "",
    "| workload | dmljax | JAX (form) | dmljax/JAX (paired) | PyTorch | dmljax/torch |",
    "|---|---|---|---|---|---|",
  ]
  for w in report["workloads"]:
    f = w["fwd_bwd"]
    if "dmljax" not in f:
      continue
    row = [w["name"], _timed(f["dmljax"]), *_contender_cells(w, "fwd_bwd", (NATIVE, ("torch",)))]
    lines.append("| " + " | ".join(row) + " |")
  return lines


def _approximations(report: dict[str, Any]) -> list[str]:
  reasons: dict[str, str] = {}
  for w in report["workloads"]:
    for name, c in w["contenders"].items():
      if c.get("approx_reason"):
        reasons.setdefault(f"{name} ({w['group']})", c["approx_reason"])
  if not reasons:
    return []
  lines = ["", "## Why a native form is marked ≈", ""]
  return lines + [f"- `{name}`: {reason}" for name, reason in reasons.items()]


def _slow_paths(report: dict[str, Any]) -> list[str]:
  lines = [
    "",
    "## Slow paths of native JAX (target 2: dmljax within 1.5× of the float32 / single-axis case)",
    "",
    "| workload | dmljax / float32 DECREASING or single-axis | dmljax / native form (form) | holds |",
    "|---|---|---|---|",
  ]
  for row in report["summary"]["target2_slow_path_within_1.5"]["rows"]:
    native = "–"
    if row["ratio_to_native_form"] is not None:
      mark = "exact" if row["native_form_is_exact"] else "≈"
      native = f"{row['ratio_to_native_form']:.3f} ({row['native_form']}, {mark})"
    lines.append(
      f"| {row['workload']} | {row['ratio_to_float32_or_single_axis']:.2f} | {native} | "
      f"{'yes' if row['holds'] else 'no'} |"
    )
  return lines


def _bandwidth(report: dict[str, Any]) -> list[str]:
  copy = report["copy_bandwidth"]
  lines = [
    "",
    "## Reduction bandwidth (target 3: ≥ 0.7)",
    "",
    "Bytes read per second by each reduction over bytes read+written per second by the fastest in-place "
    "update `x += 1` of an array as large as the reduction's input (cycling through as many distinct arrays "
    "as the reductions cycle inputs), timed interleaved with the reductions "
    f"(on its own, before them: {copy['bytes_per_s'] / 1e9:.1f} GB/s by {copy['method']}).",
    "",
    "| workload | copy GB/s | dmljax GB/s read | dmljax | JAX | PyTorch | ONNX Runtime |",
    "|---|---|---|---|---|---|---|",
  ]
  for w in report["workloads"]:
    fr = w.get("bandwidth_fraction")
    if not fr:
      continue
    cells = [f"{w['copy_bytes_per_s'] / 1e9:.1f}"]
    mine = w["forward"].get("dmljax")
    cells.append(f"{w['reduction_bytes'] / mine['median_s'] / 1e9:.1f}" if mine else "–")
    for families in (("dmljax",), NATIVE, ("torch",), ("onnxruntime",)):
      name, _ = best(w["forward"], *families)
      cells.append(f"{fr[name]:.2f}" if name else "–")
    lines.append(f"| {w['name']} | " + " | ".join(cells) + " |")
  return lines


def _targets(report: dict[str, Any]) -> list[str]:
  s = report["summary"]
  lines = ["", "## Targets", ""]
  for key, label in (
    ("target1_native_ratio_le_1.05", "1. dmljax ≤ 1.05 × native JAX (forward and forward+backward)"),
    ("target2_slow_path_within_1.5", "2. slow paths: within 1.5× of the float32 / single-axis case"),
    ("target3_bandwidth_ge_0.7", "3. reductions read at ≥ 0.7 of copy bandwidth"),
    ("target4_fastest_of_three", "4. fastest of dmljax, PyTorch, ONNX Runtime (forward; aim ≥ 3/4)"),
    ("target5_trace_compile_within_2", "5. trace + compile within 2× of native JAX's (a new static parameter)"),
  ):
    if key not in s:
      continue
    lines.append(f"- {label}: {s[key]['holds']}/{s[key]['of']}")
    if "holds_paired" in s[key]:
      lines.append(
        f"  - by the median of same-round ratios: {s[key]['holds_paired']}/{s[key]['of']}; "
        f"identical compiled program to a native form: {s[key]['same_compiled_program']}/{s[key]['of']}"
      )
    for row in s[key]["rows"]:
      if not row["holds"]:
        detail = ", ".join(
          f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
          for k, v in row.items()
          if k not in ("workload", "holds")
        )
        lines.append(f"  - not met: {row['workload']} ({detail})")
  return lines


def _errors(report: dict[str, Any]) -> list[str]:
  errors = [(w["name"], k, e) for w in report["workloads"] for k, e in w["errors"].items()]
  lines = [f"- {name}: {k}: {e}" for name, k, e in errors]
  lines += [f"- chart: {report['chart_error']}"] if report.get("chart_error") else []
  return ["", "## Contenders that could not run", "", *lines] if lines else []


def markdown(report: dict[str, Any]) -> str:
  sections = (_header, _forward_table, _fwd_bwd_table, _approximations, _slow_paths, _bandwidth, _targets, _errors)
  return "\n".join(line for section in sections for line in section(report)) + "\n"
