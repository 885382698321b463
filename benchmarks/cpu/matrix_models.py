"""Model-level trace + compile: dmljax inside whole programs, against the same programs written with native calls.

* ``moe_step``: one training step (loss and gradient of every parameter) of a transformer whose ``layers`` blocks
  (one attention head, a mixture-of-experts feed-forward network routed by a top-2 of the router's logits) are
  unrolled in Python, as a model without ``lax.scan`` over layers is: ``layers`` top_k calls in one program;
* ``decode_loop``: a jitted sampling loop (``lax.fori_loop``; each step an embedding lookup, a projection to the
  vocabulary, the top-k candidates and a Gumbel-max draw among them by argmax).

Each comes as ``{"dmljax": fn, "native": fn}`` (dmljax's ``top_k``, ``argmax`` and ``gather_nd`` against
``jax.lax.top_k``, ``jnp.argmax`` and ``x[i]``; nothing else differs) with the shapes to compile them for, so that
:func:`benchmarks.harness.timing.compile_times` times both alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import dmljax as dml

Ops = dict[str, Callable[..., Any]]
DMLJAX: Ops = {
  "top_k": lambda x, k: dml.top_k(x, k),
  "argmax": lambda x: dml.argmax(x, -1),
  "take_rows": lambda table, i: dml.gather_nd(table, i[:, None]),
}
NATIVE: Ops = {
  "top_k": lambda x, k: lax.top_k(x, k),
  "argmax": lambda x: jnp.argmax(x, axis=-1),
  "take_rows": lambda table, i: table[i],
}


def _spec(shape: tuple[int, ...], dtype: Any = np.float32) -> jax.ShapeDtypeStruct:
  return jax.ShapeDtypeStruct(shape, np.dtype(dtype))


def moe_step(
  layers: int = 32, tokens: int = 64, width: int = 32, experts: int = 8, hidden: int = 64, k: int = 2
) -> tuple[dict[str, Callable[..., Any]], tuple[Any, ...]]:
  """A transformer training step with a top-``k`` router in each of ``layers`` unrolled blocks."""

  def make(ops: Ops) -> Callable[..., Any]:
    def block(h: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
      q, key, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
      h = h + jax.nn.softmax(q @ key.T / np.sqrt(width), axis=-1) @ v @ p["wo"]
      gates, chosen = ops["top_k"](h @ p["router"], k)  # (tokens, k) logits and expert ids
      weights = jax.nn.softmax(gates, axis=-1)
      inner = jax.nn.gelu(jnp.einsum("td,edf->tef", h, p["w_in"]))
      outputs = jnp.einsum("tef,efd->ted", inner, p["w_out"])  # every expert's output, (tokens, experts, width)
      picked = jnp.take_along_axis(outputs, chosen[:, :, None], axis=1)
      return h + (weights[..., None] * picked).sum(1)

    def loss(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
      h = x
      for p in params:
        h = block(h, p)
      return jnp.mean(h * h)

    return jax.value_and_grad(loss)

  layer = {
    "wq": _spec((width, width)),
    "wk": _spec((width, width)),
    "wv": _spec((width, width)),
    "wo": _spec((width, width)),
    "router": _spec((width, experts)),
    "w_in": _spec((experts, width, hidden)),
    "w_out": _spec((experts, hidden, width)),
  }
  params = [dict(layer) for _ in range(layers)]
  return {"dmljax": make(DMLJAX), "native": make(NATIVE)}, (params, _spec((tokens, width)))


def decode_loop(
  steps: int = 64, batch: int = 8, vocab: int = 1000, width: int = 64, k: int = 40
) -> tuple[dict[str, Callable[..., Any]], tuple[Any, ...]]:
  """``steps`` sampling steps in one ``lax.fori_loop``: top-``k`` candidates, a Gumbel-max draw by argmax."""

  def make(ops: Ops) -> Callable[..., Any]:
    def run(embedding: jax.Array, projection: jax.Array, first: jax.Array, key_data: jax.Array) -> jax.Array:
      key = jax.random.wrap_key_data(key_data)

      def step(i: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        tokens, out = carry
        h = jnp.tanh(ops["take_rows"](embedding, tokens))
        candidates, ids = ops["top_k"](h @ projection, k)
        noise = jax.random.gumbel(jax.random.fold_in(key, i), candidates.shape)
        choice = ops["argmax"](candidates + noise)
        tokens = jnp.take_along_axis(ids, choice[:, None], axis=-1)[:, 0]
        return tokens, out.at[:, i].set(tokens)

      return lax.fori_loop(0, steps, step, (first, jnp.zeros((batch, steps), jnp.int32)))[1]

    return run

  key_data = jax.random.key_data(jax.random.key(0))
  args = (_spec((vocab, width)), _spec((width, vocab)), _spec((batch,), np.int32), _spec(key_data.shape, np.uint32))
  return {"dmljax": make(DMLJAX), "native": make(NATIVE)}, args


def models(short: bool) -> dict[str, tuple[dict[str, Callable[..., Any]], tuple[Any, ...]]]:
  """The model-level programs by name (``short``: 2 layers, 4 steps)."""
  layers, steps = (2, 4) if short else (32, 64)
  return {
    f"MoE transformer training step, {layers} layers (router top_k per layer)": moe_step(layers=layers),
    f"decode loop, lax.fori_loop of {steps} steps (top_k + argmax + embedding per step)": decode_loop(steps=steps),
  }
