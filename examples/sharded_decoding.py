"""Top-k sampling from a vocabulary split over the devices of two processes, as over the hosts of a cluster.

A toy decoder (an embedding table and an output projection) generates tokens for a batch of prompts: each
step looks up the last token's embedding with ``dml.gather_nd``, computes the logits over the whole
vocabulary and draws the next token with ``dml.sampling.sample``, whose ``top_k`` and ``top_p`` change at
every step (they are data: one compiled program serves every schedule, asserted). The output projection's
columns (the vocabulary) and the embedding table's rows are split over 8 CPU
devices in 2 processes (``examples/local_cluster.py`` starts them on this machine and joins them through
``jax.distributed``), so the logits of one step lie on 8 devices, 4 in each process.

``jax.lax.top_k`` gathers all the logits onto every device first. ``dml.top_k`` lets every device select its
own ``k`` candidates and exchanges only those, then picks the ``k`` first of the ``8 k`` candidates with the
same order and tie rule as on one device. The program prints the bytes each selection moves between devices
(read from the compiled programs) and checks (asserted) that the two processes generate exactly the tokens
one process generates alone, though integer logits tie everywhere.

Run: ``python examples/sharded_decoding.py`` (``--fast`` for the reduced settings the test suite uses). On a
GPU cluster or a TPU pod the same ``decode`` runs unchanged on a mesh of their devices (see the docs' "Scaling
out" page).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import local_cluster  # examples/local_cluster.py, beside this file
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import dmljax as dml

FULL = {"vocab": 65536, "hidden": 64, "batch": 16, "steps": 32, "k": 50}
FAST = {"vocab": 16384, "hidden": 32, "batch": 8, "steps": 12, "k": 40}
PROCESSES, DEVICES = 2, 4  # CPU devices in each process
TEMPERATURE = 8.0
MAX_K = 64  # a static bound on the top_k values of the schedule: above it, sample still filters exactly


def init(settings: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
  """Small integers (as float32): every logit is an exact sum, whatever the order XLA adds it in."""
  rng = np.random.default_rng(seed)
  vocab, hidden = settings["vocab"], settings["hidden"]
  return {
    "embedding": rng.integers(-3, 4, (vocab, hidden)).astype(np.float32),
    "projection": rng.integers(-3, 4, (hidden, vocab)).astype(np.float32),
    "prompt": rng.integers(0, vocab, (settings["batch"],)).astype(np.int32),
  }


def schedule(settings: dict[str, int], shift: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """Per-step ``top_k`` and ``top_p``, changed at every step (data, not static arguments: no recompilation)."""
  steps, k = settings["steps"], settings["k"]
  ks = np.array([k, k // 2, 0, k, 3, k // 4][shift:] * steps, np.int32)[:steps]  # 0: top-k off
  ps = np.array([1.0, 0.9, 0.95, 0.5, 0.99][shift:] * steps, np.float32)[:steps]
  return ks, ps


def decode(params: dict[str, jax.Array], prompt: jax.Array, ks: jax.Array, ps: jax.Array, seed: int = 1) -> jax.Array:
  """A token for every prompt token at each step, drawn with that step's ``top_k`` and ``top_p``."""

  def step(token: jax.Array, per_step: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    key, k, p = per_step
    hidden = dml.gather_nd(params["embedding"], token[:, None])  # (batch, hidden)
    logits = hidden @ params["projection"]  # (batch, vocab), split over the devices along the vocabulary
    # Every device filters its own part of the vocabulary; only per-row sums and candidates cross devices.
    token = dml.sampling.sample(key, logits, temperature=TEMPERATURE, top_k=k, top_p=p, max_k=MAX_K)
    return token, token

  keys = jax.random.split(jax.random.key(seed), ks.shape[0])
  _, tokens = jax.lax.scan(step, prompt, (keys, ks, ps))
  return tokens.T


DECODE = jax.jit(decode)


def generate(arrays: dict[str, Any], settings: dict[str, int], shift: int = 0) -> jax.Array:
  """:func:`decode` under ``jax.jit`` on the arrays of :func:`init` (NumPy, or placed on devices)."""
  params = dict(arrays)
  prompt = params.pop("prompt")
  ks, ps = schedule(settings, shift)
  return DECODE(params, prompt, ks, ps)


def selection_bytes(select: Any, logits: jax.Array) -> int:
  return local_cluster.collective_bytes(jax.jit(select).lower(logits).compile())


def worker(settings: dict[str, int], out_dir: pathlib.Path) -> None:
  """In each of the processes: the decoding on a mesh of every process's devices."""
  devices = jax.devices()
  assert len(devices) == PROCESSES * DEVICES and jax.process_count() == PROCESSES
  mesh = Mesh(np.array(devices), ("vocab",))
  shardings = {
    "embedding": NamedSharding(mesh, P("vocab", None)),  # rows
    "projection": NamedSharding(mesh, P(None, "vocab")),  # columns
    "prompt": NamedSharding(mesh, P()),
  }
  arrays = init(settings)
  # Both processes hold the same NumPy arrays; each places the parts its own devices hold.
  placed = {
    name: jax.make_array_from_callback(a.shape, shardings[name], lambda index, a=a: a[index])
    for name, a in arrays.items()
  }
  tokens = np.asarray(generate(placed, settings).addressable_data(0))  # replicated: every device holds all of it
  other = generate(placed, settings, shift=2)  # another k and p schedule: the same compiled program
  assert DECODE._cache_size() == 1, "a new top_k/top_p schedule must not recompile"
  del other

  k = settings["k"]
  logits = jax.ShapeDtypeStruct(
    (settings["batch"], settings["vocab"]), np.float32, sharding=NamedSharding(mesh, P(None, "vocab"))
  )
  moved = {
    "dml_bytes": selection_bytes(lambda x: dml.top_k(x, k), logits),
    "lax_bytes": selection_bytes(lambda x: jax.lax.top_k(x, k), logits),
    "sample_bytes": selection_bytes(
      lambda x: dml.sampling.sample(jax.random.key(0), x, top_k=jnp.int32(k), top_p=jnp.float32(0.9), max_k=MAX_K),
      logits,
    ),
  }
  np.savez(out_dir / f"process_{jax.process_index()}.npz", tokens=tokens, **moved)


def main(fast: bool = False) -> dict[str, Any]:
  settings = FAST if fast else FULL
  with tempfile.TemporaryDirectory() as folder:
    out_dir = pathlib.Path(folder)
    args = ["--worker", str(out_dir), *(["--fast"] if fast else [])]
    local_cluster.launch(__file__, args, processes=PROCESSES, devices=DEVICES, timeout=300)
    runs = []
    for process in range(PROCESSES):
      with np.load(out_dir / f"process_{process}.npz") as data:
        runs.append({name: data[name] for name in data.files})

  alone = np.asarray(generate(init(settings), settings))  # the same decoding in this process alone, on one device

  batch, vocab, k, shards = settings["batch"], settings["vocab"], settings["k"], PROCESSES * DEVICES
  candidates = shards * k * batch * (4 + 4)  # every shard's k values (float32) and indices (int32), per device
  logits = batch * vocab * 4
  dml_bytes, lax_bytes = int(runs[0]["dml_bytes"]), int(runs[0]["lax_bytes"])
  sample_bytes = int(runs[0]["sample_bytes"])
  print(f"vocabulary {vocab} over {shards} devices in {PROCESSES} processes, batch {batch}, k {k}")
  print(f"bytes one selection moves to each device: dml.top_k {dml_bytes:,} | jax.lax.top_k {lax_bytes:,}")
  print(f"  (the candidates of every shard: {candidates:,}; all the logits: {logits:,})")
  print(f"bytes of the collectives of one sample(top_k, top_p) step (each counted once): {sample_bytes:,}")
  print("first prompt's tokens:", alone[0].tolist())
  same = all(np.array_equal(run["tokens"], alone) for run in runs)
  print("two processes generate the one-process tokens:", same)

  assert same, "the processes must generate exactly the tokens one process generates"
  assert dml_bytes <= candidates < logits <= lax_bytes, "only candidates should cross devices"
  return {
    "same_tokens": same,
    "dml_bytes": dml_bytes,
    "lax_bytes": lax_bytes,
    "sample_bytes": sample_bytes,
    "candidate_bytes": candidates,
    "logit_bytes": logits,
    "distinct_tokens": len(np.unique(alone)),
  }


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--fast", action="store_true", help="reduced settings (as in the test suite)")
  parser.add_argument("--worker", type=pathlib.Path, help=argparse.SUPPRESS)  # set by local_cluster.launch
  options = parser.parse_args(sys.argv[1:])
  if options.worker is None:
    main(fast=options.fast)
  else:
    worker(FAST if options.fast else FULL, options.worker)
