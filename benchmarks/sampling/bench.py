"""Decode-step sampling: dmljax.sampling against the recipes users write today (issue 23, point 6).

Rows: batch 1, 8 and 64 over vocabularies of 32,000, 128,256 and 256,000 float32 logits. Contenders:

* ``top_k``: ``dml.sampling.sample(key, x, top_k=k)`` with ``k`` traced (the default route, no ``max_k``), against
  the static-k native recipe (``jax.lax.top_k`` + ``jax.random.categorical`` over the k candidates, k = 50);
* ``top_p``: ``sample(key, x, top_p=p)`` with ``p`` traced, against the sort recipe (``jnp.argsort``, softmax,
  ``cumsum``, mask, scatter back, ``categorical``) and PyTorch's (``torch.sort`` + ``cumsum`` + ``multinomial``);
* ``top_k_top_p``: ``sample(key, x, temperature=0.7, top_k=k, top_p=p)`` (the README's call) against the recipe a
  JAX user writes (``jax.lax.top_k(x, 64)``, temperature, softmax, ``cumsum``, mask, ``categorical``), the sort
  recipe with both filters, the composed masks (``top_k_mask``, ``top_p_mask``, then ``categorical``) and
  PyTorch's (``torch.topk`` then the sort recipe over the k candidates);
* trace + compile seconds of each JAX program (``jax.jit(f).lower(...).compile()`` on fresh functions).

Timings interleave the contenders round by round and report medians. Results:
``benchmarks/results/sampling-cpu.{json,md}``. The same programs compiled (not run) for an H100 and a TPU v5e, priced
per path: :mod:`benchmarks.sampling.compiled`.

Run: ``python -m benchmarks.sampling.bench`` (``--quick`` for batch 8 x 32,000 only; ``--rows 1x32000,8x128256``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dmljax as dml
from benchmarks import RESULTS
from benchmarks.harness import timing

ROWS = tuple((b, v) for b in (1, 8, 64) for v in (32000, 128256, 256000))
K, P, TEMPERATURE, RECIPE_K = 50, 0.9, 0.7, 64


def native_top_k(key: jax.Array, x: jax.Array) -> jax.Array:
  values, indices = jax.lax.top_k(x, K)
  choice = jax.random.categorical(key, values, axis=-1)
  return jnp.take_along_axis(indices, choice[:, None], axis=-1)[:, 0]


def sort_top_p_mask(x: jax.Array, p: jax.Array | float, k: int | None = None) -> jax.Array:
  """The sort-based nucleus filter users write: sort descending, cumulative softmax, mask, scatter back."""
  order = jnp.argsort(-x, axis=-1)
  ordered = jnp.take_along_axis(x, order, axis=-1)
  if k is not None:
    ordered = jnp.where(jnp.arange(x.shape[-1]) < k, ordered, -jnp.inf)
  probs = jax.nn.softmax(ordered, axis=-1)
  before = jnp.cumsum(probs, axis=-1) - probs
  ordered = jnp.where(before < p, ordered, -jnp.inf)
  rows = jnp.arange(x.shape[0])[:, None]
  return jnp.full_like(x, -jnp.inf).at[rows, order].set(ordered)


def sort_top_p(key: jax.Array, x: jax.Array, p: jax.Array | float, k: int | None = None) -> jax.Array:
  """The sort-based nucleus users write: :func:`sort_top_p_mask`, then a draw."""
  return jax.random.categorical(key, sort_top_p_mask(x, p, k), axis=-1)


def top_k_then_top_p(
  key: jax.Array, x: jax.Array, temperature: float, k: int, p: jax.Array | float, candidates: int = RECIPE_K
) -> jax.Array:
  """The static-k recipe with a nucleus: ``jax.lax.top_k(x / T, candidates)``, then :func:`sort_top_p` over them."""
  values, indices = jax.lax.top_k(x / temperature, candidates)
  choice = sort_top_p(key, values, p, k)
  return jnp.take_along_axis(indices, choice[:, None], axis=-1)[:, 0]


def top_k_recipe(key: jax.Array, x: jax.Array, p: jax.Array) -> jax.Array:
  """What a JAX user writes for the README's call: ``lax.top_k(x / 0.7, 64)``, then top-k 50 and top-p over them."""
  return top_k_then_top_p(key, x, TEMPERATURE, K, p, RECIPE_K)


def dml_top_k(key: jax.Array, x: jax.Array, k: jax.Array) -> jax.Array:
  return dml.sampling.sample(key, x, top_k=k)


def dml_top_p(key: jax.Array, x: jax.Array, p: jax.Array) -> jax.Array:
  return dml.sampling.sample(key, x, top_p=p)


def dml_top_k_top_p(key: jax.Array, x: jax.Array, k: jax.Array, p: jax.Array) -> jax.Array:
  return dml.sampling.sample(key, x, temperature=TEMPERATURE, top_k=k, top_p=p)


def composed_masks(key: jax.Array, x: jax.Array, k: jax.Array, p: jax.Array) -> jax.Array:
  filtered = dml.sampling.top_p_mask(dml.sampling.top_k_mask(x / TEMPERATURE, k), p)
  return jax.random.categorical(key, filtered, axis=-1)


def _jax_contenders(batch: int, vocab: int) -> dict[str, dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]]:
  x = jnp.asarray(np.random.default_rng(vocab + batch).standard_normal((batch, vocab), np.float32) * 3)
  key, k, p = jax.random.key(0), jnp.int32(K), jnp.float32(P)
  return {
    "top_k": {"dmljax (traced k)": (dml_top_k, (key, x, k)), "native (static k)": (native_top_k, (key, x))},
    "top_p": {"dmljax": (dml_top_p, (key, x, p)), "sort recipe": (sort_top_p, (key, x, p))},
    "top_k_top_p": {
      "dmljax": (dml_top_k_top_p, (key, x, k, p)),
      "top_k recipe": (top_k_recipe, (key, x, p)),
      "sort recipe": (lambda key, x, p: sort_top_p(key, x / TEMPERATURE, p, K), (key, x, p)),
      "composed masks": (composed_masks, (key, x, k, p)),
    },
  }


def _torch_contenders(batch: int, vocab: int) -> dict[str, Callable[[], Any]]:
  try:
    import torch
  except ImportError:
    return {}
  x = torch.from_numpy(np.random.default_rng(vocab + batch).standard_normal((batch, vocab), np.float32) * 3)
  generator = torch.Generator().manual_seed(0)

  def top_p(logits: Any) -> Any:
    ordered, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(ordered, dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs
    ordered = ordered.masked_fill(before >= P, float("-inf"))
    choice = torch.multinomial(torch.softmax(ordered, dim=-1), 1, generator=generator)
    return torch.gather(order, -1, choice)

  def top_k_top_p() -> Any:
    values, indices = torch.topk(x, K, dim=-1)
    return torch.gather(indices, -1, top_p(values))

  return {"top_p": lambda: top_p(x), "top_k_top_p": top_k_top_p}


def _wait(out: Any) -> None:
  """Waits for a JAX result (a PyTorch CPU tensor is ready when returned)."""
  if not hasattr(out, "numpy"):
    jax.block_until_ready(out)


def measure_row(batch: int, vocab: int, rounds: int, compile_repeats: int) -> dict[str, Any]:
  row: dict[str, Any] = {"batch": batch, "vocab": vocab}
  torch_calls = _torch_contenders(batch, vocab)
  for workload, contenders in _jax_contenders(batch, vocab).items():
    calls: dict[str, Callable[[], Any]] = {}
    temporaries = {}
    for name, (fn, args) in contenders.items():
      compiled = jax.jit(fn).lower(*args).compile()
      calls[name] = lambda compiled=compiled, args=args: compiled(*args)
      temporaries[name] = compiled.memory_analysis().temp_size_in_bytes
    times = timing.compile_times(
      {name: fn for name, (fn, _) in contenders.items()},
      {name: args for name, (_, args) in contenders.items()},
      compile_repeats,
    )
    compile_s = {name: t["median_s"] for name, t in times.items()}
    if workload in torch_calls:
      calls["pytorch"] = torch_calls[workload]
    inner = 3 if batch * vocab >= 8 * 128256 else 10
    row[workload] = {
      "seconds": timing.medians(calls, rounds=rounds, inner=inner, warmup=0, wait=_wait),
      "trace_compile_seconds": compile_s,
      "temporary_bytes": temporaries,
    }
  return row


def _ratios(row: dict[str, Any]) -> dict[str, float]:
  k, p, kp = row["top_k"], row["top_p"], row["top_k_top_p"]
  out = {
    "top_k / native": k["seconds"]["dmljax (traced k)"] / k["seconds"]["native (static k)"],
    "top_p / sort": p["seconds"]["dmljax"] / p["seconds"]["sort recipe"],
    "top_k+top_p / sort": kp["seconds"]["dmljax"] / kp["seconds"]["sort recipe"],
    "top_k+top_p / top_k recipe": kp["seconds"]["dmljax"] / kp["seconds"]["top_k recipe"],
    "composed masks / dmljax": kp["seconds"]["composed masks"] / kp["seconds"]["dmljax"],
    "compile top_k+top_p / top_k recipe": kp["trace_compile_seconds"]["dmljax"]
    / kp["trace_compile_seconds"]["top_k recipe"],
    "compile top_k / native": k["trace_compile_seconds"]["dmljax (traced k)"]
    / k["trace_compile_seconds"]["native (static k)"],
    "compile top_p / sort": p["trace_compile_seconds"]["dmljax"] / p["trace_compile_seconds"]["sort recipe"],
  }
  if "pytorch" in p["seconds"]:
    out["top_p / pytorch"] = p["seconds"]["dmljax"] / p["seconds"]["pytorch"]
    out["top_k+top_p / pytorch"] = kp["seconds"]["dmljax"] / kp["seconds"]["pytorch"]
  return out


def _markdown(rows: list[dict[str, Any]], conditions: str) -> str:
  lines = [
    "# Sampling decode step, CPU (medians, interleaved)",
    "",
    conditions,
    "",
    "| batch x vocab | dmljax top_k (traced k) | native top_k (k=50) | ratio | dmljax top_p | sort top_p | ratio "
    "| pytorch top_p | dmljax top_k+top_p | top_k recipe | ratio | sort top_k+top_p | composed masks "
    "| pytorch top_k+top_p | compile dmljax top_k / native | compile dmljax top_p / sort "
    "| compile top_k+top_p / recipe | temporaries dmljax top_p / top_k+top_p (MiB) |",
    "|---" * 18 + "|",
  ]
  for row in rows:
    k, p, kp, r = row["top_k"]["seconds"], row["top_p"]["seconds"], row["top_k_top_p"]["seconds"], row["ratios"]

    def ms(s: float | None) -> str:
      return "-" if s is None else f"{s * 1e3:.3f} ms"

    def mib(workload: dict[str, Any], name: str) -> str:
      return f"{workload['temporary_bytes'][name] / 2**20:.1f}"

    lines.append(
      f"| {row['batch']} x {row['vocab']} | {ms(k['dmljax (traced k)'])} | {ms(k['native (static k)'])} "
      f"| {r['top_k / native']:.2f} | {ms(p['dmljax'])} | {ms(p['sort recipe'])} | {r['top_p / sort']:.2f} "
      f"| {ms(p.get('pytorch'))} | {ms(kp['dmljax'])} | {ms(kp['top_k recipe'])} "
      f"| {r['top_k+top_p / top_k recipe']:.2f} | {ms(kp['sort recipe'])} | {ms(kp['composed masks'])} "
      f"| {ms(kp.get('pytorch'))} | {r['compile top_k / native']:.2f} | {r['compile top_p / sort']:.2f} "
      f"| {r['compile top_k+top_p / top_k recipe']:.2f} "
      f"| {mib(row['top_p'], 'dmljax')} / {mib(row['top_k_top_p'], 'dmljax')} |"
    )
  return "\n".join(lines) + "\n"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="batch 8 x vocab 32,000 only")
  parser.add_argument("--rows", default=None, help="comma-separated BATCHxVOCAB, e.g. 1x32000,64x256000")
  parser.add_argument("--rounds", type=int, default=7)
  parser.add_argument("--compile-repeats", type=int, default=3)
  parser.add_argument("--out", default=str(RESULTS))
  args = parser.parse_args()
  rows = ROWS
  if args.quick:
    rows = ((8, 32000),)
  elif args.rows:
    rows = tuple(tuple(int(n) for n in r.split("x")) for r in args.rows.split(","))  # type: ignore[misc]
  out = pathlib.Path(args.out)
  results = []
  for batch, vocab in rows:
    row = measure_row(batch, vocab, args.rounds, args.compile_repeats)
    row["ratios"] = _ratios(row)
    print(json.dumps({"batch": batch, "vocab": vocab, **row["ratios"]}), flush=True)
    results.append(row)
  conditions = (
    f"{jax.devices()[0].device_kind}, jax {jax.__version__}, {args.rounds} interleaved rounds; "
    f"k = {K} (dmljax: traced, no max_k), p = {P} (traced), temperature {TEMPERATURE} in top_k+top_p; "
    f"load average before the run {os.getloadavg()[0]:.2f}."
  )
  out.mkdir(parents=True, exist_ok=True)
  (out / "sampling-cpu.json").write_text(json.dumps({"conditions": conditions, "rows": results}, indent=1))
  (out / "sampling-cpu.md").write_text(_markdown(results, conditions))


if __name__ == "__main__":
  main()
