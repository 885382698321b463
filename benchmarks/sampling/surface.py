"""Every setting a decoding server passes, against the call it would otherwise make (issue 33).

The README's step, ``sample(key, logits, temperature=t, top_k=k, top_p=p)`` jitted with every parameter traced,
measured where a serving loop spends its time besides the benchmarked call (``benchmarks.sampling.bench``):

* ``greedy``: the README's greedy line (k = 0, p = 1, temperature 0) against ``jnp.argmax`` (same tokens);
* ``one row k=0``: a batch of 8 where one row has k = 0 (top-k off; its top-p then needs its whole row) against the
  same batch with k = 50 everywhere, and ``one row off``: that row with every filter off (k = 0, p = 1; drawn from
  its whole row, no search);
* ``top_p off``: ``top_p_mask(x, 1.0)`` (keeps every entry) against ``top_p_mask(x, 0.9)``;
* ``vmap keys``: ``jax.vmap`` of the README's call over keys with shared logits against the vmapped ``lax.top_k(64)``
  recipe, with both programs' temporaries;
* ``compile``: trace + compile (the benchmarks' one warm method, ``timing.compile_times``: a fresh function,
  dmljax's jit caches cleared) of the step, each mask and the vmapped step against the recipe a user writes for it
  (``lax.top_k(64)`` + softmax + ``cumsum`` + categorical;
  the sort recipes for runtime k and p; softmax and a comparison for min-p).

Speed ratios are paired medians: contenders alternate within each round, and the ratio is taken per round.
Results: ``benchmarks/results/sampling-surface.{md,json}``. Run: ``python -m benchmarks.sampling.surface``
(``--rounds``, ``--compile-rounds``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dmljax as dml
from benchmarks import RESULTS
from benchmarks.harness import timing
from benchmarks.sampling import bench

S = dml.sampling
BATCH, VOCAB = 8, 128256
VMAP_ROWS = ((64, 8, 32000), (1000, 8, 128256))  # (keys, batch, vocabulary)
TEMPERATURE, P, K = 0.7, 0.9, 50


@jax.jit
def step(key: jax.Array, logits: jax.Array, k: Any, p: Any, temperature: Any) -> jax.Array:
  """The README's decode step: every parameter traced."""
  return S.sample(key, logits, temperature=temperature, top_k=k, top_p=p)


def _logits(shape: tuple[int, ...]) -> jax.Array:
  return jnp.asarray(np.random.default_rng(sum(shape)).standard_normal(shape, np.float32) * 3)


def _paired(calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, Any]:
  """Per-call medians of both contenders and the median of their per-round ratio (first over second)."""
  samples = timing.round_samples(calls, rounds=rounds, min_sample=0.05, warmup=2)
  (a, sa), (b, sb) = samples.items()
  return {
    "seconds": {a: statistics.median(sa), b: statistics.median(sb)},
    "ratio": statistics.median(x / y for x, y in zip(sa, sb, strict=True)),
  }


def speed(rounds: int) -> dict[str, Any]:
  x = _logits((BATCH, VOCAB))
  key = jax.random.key(1)
  k50 = jnp.full((BATCH,), K, jnp.int32)
  k0 = k50.at[0].set(0)
  p9 = jnp.full((BATCH,), P, jnp.float32)
  p_off = p9.at[0].set(1.0)
  argmax = jax.jit(lambda x: jnp.argmax(x, axis=-1).astype(jnp.int32))
  greedy_same = bool(jnp.array_equal(step(key, x, 0, 1.0, 0.0), argmax(x)))
  top_p = jax.jit(lambda x, p: S.top_p_mask(x, p))
  out: dict[str, Any] = {
    "greedy": _paired({"step greedy": lambda: step(key, x, 0, 1.0, 0.0), "jnp.argmax": lambda: argmax(x)}, rounds),
    "one row k=0": _paired(
      {"k=0 in row 0": lambda: step(key, x, k0, p9, TEMPERATURE), "k=50": lambda: step(key, x, k50, p9, TEMPERATURE)},
      rounds,
    ),
    "one row off": _paired(
      {
        "k=0, p=1 in row 0": lambda: step(key, x, k0, p_off, TEMPERATURE),
        "k=50": lambda: step(key, x, k50, p9, TEMPERATURE),
      },
      rounds,
    ),
    "top_p off": _paired({"top_p_mask 1.0": lambda: top_p(x, 1.0), "top_p_mask 0.9": lambda: top_p(x, 0.9)}, rounds),
  }
  out["greedy"]["same tokens"] = greedy_same
  for keys, batch, vocab in VMAP_ROWS:
    logits = _logits((batch, vocab))
    many = jax.random.split(jax.random.key(2), keys)
    ours = jax.jit(jax.vmap(lambda key, x: S.sample(key, x, temperature=TEMPERATURE, top_k=K, top_p=P), (0, None)))
    recipe = jax.jit(jax.vmap(lambda key, x: bench.top_k_then_top_p(key, x, TEMPERATURE, K, P), (0, None)))
    calls = {name: (lambda fn=fn, a=(many, logits): fn(*a)) for name, fn in (("dmljax", ours), ("recipe", recipe))}
    row = _paired(calls, rounds)
    row["temporary_mib"] = {
      name: fn.lower(many, logits).compile().memory_analysis().temp_size_in_bytes / 2**20
      for name, fn in (("dmljax", ours), ("recipe", recipe))
    }
    row["logits_mib"] = batch * vocab * 4 / 2**20
    out[f"vmap {keys} keys x ({batch}, {vocab})"] = row
  return out


def _sort_k_mask(x: jax.Array, k: jax.Array) -> jax.Array:
  """The runtime-k top-k mask users write without a static bound: sort, take the k-th value, compare."""
  kth = jnp.take_along_axis(jnp.sort(x, axis=-1), jnp.broadcast_to(x.shape[-1] - k, (*x.shape[:-1], 1)), axis=-1)
  return jnp.where(x >= kth, x, -jnp.inf)


def _min_p_recipe(x: jax.Array, min_p: jax.Array) -> jax.Array:
  probs = jax.nn.softmax(x, axis=-1)
  return jnp.where(probs >= min_p * jnp.max(probs, axis=-1, keepdims=True), x, -jnp.inf)


def compile_ratios(rounds: int) -> dict[str, Any]:
  x = jax.ShapeDtypeStruct((BATCH, 32000), jnp.float32)
  key = jax.random.key(0)
  k = jax.ShapeDtypeStruct((), jnp.int32)
  p = jax.ShapeDtypeStruct((), jnp.float32)
  keys = jax.random.split(key, 64)
  pairs = {
    "step": (
      lambda key, x, k, p, t: S.sample(key, x, temperature=t, top_k=k, top_p=p),
      (key, x, k, p, p),
      lambda key, x, p: bench.top_k_then_top_p(key, x, TEMPERATURE, K, p),
      (key, x, p),
    ),
    "top_k_mask": (lambda x, k: S.top_k_mask(x, k), (x, k), _sort_k_mask, (x, k)),
    "top_p_mask": (lambda x, p: S.top_p_mask(x, p), (x, p), bench.sort_top_p_mask, (x, p)),
    "min_p_mask": (lambda x, p: S.min_p_mask(x, p), (x, p), _min_p_recipe, (x, p)),
    "vmapped step": (
      jax.vmap(lambda key, x: S.sample(key, x, temperature=TEMPERATURE, top_k=K, top_p=P), (0, None)),
      (keys, x),
      jax.vmap(lambda key, x: bench.top_k_then_top_p(key, x, TEMPERATURE, K, P), (0, None)),
      (keys, x),
    ),
  }
  out = {}
  for name, (ours, args, recipe, recipe_args) in pairs.items():
    times = timing.compile_times({"dmljax": ours, "recipe": recipe}, {"dmljax": args, "recipe": recipe_args}, rounds)
    mine, theirs = times["dmljax"]["samples_s"], times["recipe"]["samples_s"]
    out[name] = {
      "seconds": {who: t["median_s"] for who, t in times.items()},
      "ratio": statistics.median(a / b for a, b in zip(mine, theirs, strict=True)),
    }
  return out


def markdown(result: dict[str, Any]) -> str:
  lines = ["# Sampling: every setting a server passes, CPU", "", result["conditions"], ""]
  lines += ["| setting | contender | median | other | median | ratio (paired) |", "|---|---|---|---|---|---|"]
  for name, row in result["speed"].items():
    (a, sa), (b, sb) = row["seconds"].items()
    note = ""
    if "temporary_mib" in row:
      t = row["temporary_mib"]
      note = f" (temporaries {t['dmljax']:.1f} / {t['recipe']:.1f} MiB; logits {row['logits_mib']:.1f} MiB)"
    if "same tokens" in row:
      note = f" (same tokens: {row['same tokens']})"
    lines.append(f"| {name}{note} | {a} | {sa * 1e3:.3f} ms | {b} | {sb * 1e3:.3f} ms | {row['ratio']:.2f} |")
  lines += ["", "| first-call trace + compile | dmljax | recipe | ratio (paired) |", "|---|---|---|---|"]
  for name, row in result["compile"].items():
    s = row["seconds"]
    lines.append(f"| {name} | {s['dmljax']:.3f} s | {s['recipe']:.3f} s | {row['ratio']:.2f} |")
  return "\n".join(lines) + "\n"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rounds", type=int, default=15)
  parser.add_argument("--compile-rounds", type=int, default=5)
  parser.add_argument("--out", default=str(RESULTS))
  args = parser.parse_args()
  load = os.getloadavg()[0]
  result: dict[str, Any] = {"speed": speed(args.rounds), "compile": compile_ratios(args.compile_rounds)}
  result["conditions"] = (
    f"{jax.devices()[0].device_kind}, jax {jax.__version__}; ({BATCH}, {VOCAB}) float32 logits (normal x 3), "
    f"k = {K}, p = {P}, temperature {TEMPERATURE}; {args.rounds} rounds (compile: {args.compile_rounds}); load "
    f"average {load:.2f} before, {os.getloadavg()[0]:.2f} after."
  )
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "sampling-surface.json").write_text(json.dumps(result, indent=1))
  (out / "sampling-surface.md").write_text(markdown(result))
  print(markdown(result))


if __name__ == "__main__":
  main()
