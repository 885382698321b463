"""Top-k along a vocabulary axis sharded over 8 CPU devices: dmljax vs jax.lax.top_k.

Prints, for each, the bytes its collectives produce (from the compiled HLO) and
the median wall time of a call. Run: ``python -m benchmarks.compiled.sharded_top_k``.
"""

import argparse
import os

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()

import math
import re

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import dmljax as dml
from benchmarks.harness import timing

_BYTES = {"f32": 4, "s32": 4, "u32": 4}
_COLLECTIVE = re.compile(r"=\s*(.+?)\s+(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)(-start)?\(")


def collective_bytes(compiled_text: str) -> int:
  total = 0
  for line in compiled_text.splitlines():
    match = _COLLECTIVE.search(line)
    if match:
      for dtype, dims in re.findall(r"\b([a-z]+\d*)\[([\d,]*)\]", match.group(1)):
        total += _BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
  return total


def main(batch: int = 32, vocab: int = 8 * 32768, k: int = 64, repeats: int = 20) -> None:
  mesh = jax.make_mesh((8,), ("v",), axis_types=(jax.sharding.AxisType.Auto,))
  sharding = NamedSharding(mesh, P(None, "v"))
  logits = jax.device_put(np.random.default_rng(0).normal(size=(batch, vocab)).astype(np.float32), sharding)
  print(f"logits {batch}x{vocab} float32 sharded 8 ways on the vocabulary axis; one shard = {logits.nbytes // 8} bytes")
  for name, fn in [("dmljax.top_k", lambda x: dml.top_k(x, k)), ("jax.lax.top_k", lambda x: jax.lax.top_k(x, k))]:
    jitted = jax.jit(fn, in_shardings=sharding)
    moved = collective_bytes(jitted.lower(logits).compile().as_text())
    median = timing.medians({name: lambda jitted=jitted: jitted(logits)}, rounds=repeats, inner=1)[name]
    print(f"{name:14s} k={k}: collectives move {moved} bytes, median {1e3 * median:.2f} ms")


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--vocab", type=int, default=8 * 32768)
  parser.add_argument("--k", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=20)
  args = parser.parse_args()
  main(args.batch, args.vocab, args.k, args.repeats)
