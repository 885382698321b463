"""The chart: per workload, each family's best time over dmljax's (right of 1: dmljax faster), log scale.

Needs matplotlib (the bench and test extras install it); :func:`chart` raises ImportError without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.measure import best

COLOURS = {
  "jax": "#4c72b0",
  "jax-approx": "#8fa9d6",
  "baseline": "#999999",
  "torch": "#dd8452",
  "onnxruntime": "#55a868",
}
LABELS = {
  "jax": "native JAX, exact",
  "jax-approx": "native JAX, approximate (≈)",
  "baseline": "float32 / single-axis baseline",
  "torch": "PyTorch",
  "onnxruntime": "ONNX Runtime",
}


def _ratios(rows: list[dict[str, Any]], phase: str, family: str) -> list[float]:
  values = []
  for w in rows:
    section = w[phase]
    _, other = best(section, family)
    mine = section.get("dmljax", {}).get("median_s")
    values.append(other / mine if other and mine else np.nan)
  return values


def chart(report: dict[str, Any], path: Path) -> None:
  """Writes the two-panel (forward, forward+backward) bar chart of ``report`` to ``path`` (PNG)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  rows = report["workloads"]
  fig, axes = plt.subplots(1, 2, figsize=(15, 0.42 * len(rows) + 2), sharey=True)
  y = np.arange(len(rows))
  height = 0.8 / len(COLOURS)
  for ax, phase, title in zip(axes, ("forward", "fwd_bwd"), ("forward", "forward + backward"), strict=True):
    for j, family in enumerate(COLOURS):
      ax.barh(y + (j - 2) * height, _ratios(rows, phase, family), height, color=COLOURS[family], label=LABELS[family])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_title(f"{title}: other / dmljax time (right of 1: dmljax faster)")
    ax.grid(axis="x", which="both", alpha=0.3)
  axes[0].set_yticks(y, [w["name"] for w in rows], fontsize=8)
  axes[0].invert_yaxis()
  axes[1].legend(loc="lower right", fontsize=8)
  env = report["environment"]
  v = env["versions"]
  fig.suptitle(
    f"dmljax {v['dmljax']} on {env['device']['kind']} ({env['host']['cpu']}, {env['host']['cores']} cores): "
    f"medians of {report['settings']['repeats']} interleaved runs; jax {v['jax']}, torch {v['torch']}, "
    f"onnxruntime {v['onnxruntime']}"
  )
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
