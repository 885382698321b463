"""A mixture-of-experts layer with top-2 routing, trained on a piecewise-linear toy task.

The layer, as in Switch/GShard/Mixtral-style MoE blocks:

* a linear router scores every expert for every token;
* ``dml.top_k(scores, 2)`` keeps the two best experts; the gates are a softmax over the two kept *values*, so
  the router learns only through TOP_K's value gradient (the indices carry none);
* ``dml.gather_nd(expert_outputs, indices[..., None], batch_dims=1)`` picks each token's two expert outputs
  (the token is the batch dimension), which the gates mix;
* a Switch-style load-balancing loss counts the tokens sent to each expert through ``dml.one_hot``.

The task: 2-D inputs, a different affine map on each quadrant. No single affine map fits it (its best
least-squares fit is computed with NumPy as a baseline); eight affine experts behind a router can. The program
asserts that the loss decreases, that the trained layer beats the best single affine map several times over,
and that the router's gradient through ``dml.top_k`` equals the one through ``jax.lax.top_k``. With matplotlib
installed it draws the loss curve and the learned routing to ``examples/_output/moe_layer.png``.

Run: ``python examples/moe_layer.py`` (``--fast`` for the reduced settings the test suite uses).
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dmljax as dml

EXPERTS, TOP = 8, 2
FULL = {"tokens": 4096, "steps": 1500}
FAST = {"tokens": 1024, "steps": 400}
BALANCE_WEIGHT = 1e-2
OUTPUT = pathlib.Path(__file__).resolve().parent / "_output"

Params = dict[str, jax.Array]
TopK = Callable[[jax.Array, int], tuple[jax.Array, jax.Array]]


def make_task(tokens: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Points in [-1, 1]^2 and targets ``A_q x + b_q`` for the quadrant ``q`` of each point (plus a little noise)."""
  rng = np.random.default_rng(seed)
  maps = rng.normal(size=(4, 2, 2)).astype(np.float32)
  offsets = rng.normal(size=(4, 2)).astype(np.float32)
  x = rng.uniform(-1, 1, size=(tokens, 2)).astype(np.float32)
  quadrant = (x[:, 0] < 0).astype(int) + 2 * (x[:, 1] < 0).astype(int)
  y = np.einsum("nij,nj->ni", maps[quadrant], x) + offsets[quadrant]
  return x, (y + 0.01 * rng.normal(size=y.shape)).astype(np.float32)


def init(key: jax.Array) -> Params:
  k1, k2, k3 = jax.random.split(key, 3)
  return {
    "router": 0.1 * jax.random.normal(k1, (2, EXPERTS), jnp.float32),
    "weights": jax.random.normal(k2, (EXPERTS, 2, 2), jnp.float32) * np.float32(np.sqrt(0.5)),
    "biases": 0.1 * jax.random.normal(k3, (EXPERTS, 2), jnp.float32),
  }


def dml_top_k(scores: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  return dml.top_k(scores, k)


def moe(params: Params, x: jax.Array, top_k: TopK = dml_top_k) -> tuple[jax.Array, jax.Array]:
  """The layer's output ``(tokens, 2)`` and its load-balancing loss."""
  scores = x @ params["router"]
  kept, experts = top_k(scores, TOP)
  gates = jax.nn.softmax(kept, axis=-1)
  every_output = jnp.einsum("nj,eij->nei", x, params["weights"]) + params["biases"][None]
  chosen = dml.gather_nd(every_output, experts[..., None], batch_dims=1)
  out = jnp.sum(gates[..., None] * chosen, axis=1)

  first_choice = dml.one_hot(experts[:, 0], EXPERTS)
  fraction_routed = jnp.mean(first_choice, axis=0)
  mean_probability = jnp.mean(jax.nn.softmax(scores, axis=-1), axis=0)
  balance = EXPERTS * jnp.sum(fraction_routed * mean_probability)
  return out, balance


def task_loss(params: Params, x: jax.Array, y: jax.Array, top_k: TopK = dml_top_k) -> jax.Array:
  out, _ = moe(params, x, top_k)
  return jnp.mean(jnp.sum((out - y) ** 2, axis=-1))


def loss(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
  out, balance = moe(params, x)
  return jnp.mean(jnp.sum((out - y) ** 2, axis=-1)) + BALANCE_WEIGHT * balance


def adam_step(
  params: Params, grads: Params, state: tuple[Params, Params], step: jax.Array, lr: float = 5e-2
) -> tuple[Params, tuple[Params, Params]]:
  b1, b2, eps = 0.9, 0.999, 1e-8
  m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state[0], grads)
  v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state[1], grads)
  scale = lr * jnp.sqrt(1 - b2**step) / (1 - b1**step)
  params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
  return params, (m, v)


def best_affine_mse(x: np.ndarray, y: np.ndarray) -> float:
  """The smallest mean squared error any single affine map can reach (least squares, float64)."""
  design = np.concatenate([x, np.ones((len(x), 1))], axis=1).astype(np.float64)
  solution, *_ = np.linalg.lstsq(design, y.astype(np.float64), rcond=None)
  return float(np.mean(np.sum((design @ solution - y) ** 2, axis=-1)))


def plot(losses: list[float], params: Params, path: pathlib.Path) -> bool:
  try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    return False
  grid = np.stack(np.meshgrid(np.linspace(-1, 1, 200), np.linspace(-1, 1, 200)), axis=-1).reshape(-1, 2)
  _, first = dml.top_k(jnp.asarray(grid, jnp.float32) @ params["router"], 1)
  fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
  left.plot(losses)
  left.set(xlabel="step", ylabel="training loss", yscale="log", title="loss")
  right.imshow(np.asarray(first).reshape(200, 200), origin="lower", extent=(-1, 1, -1, 1), cmap="tab10", vmax=9)
  right.set(xlabel="x0", ylabel="x1", title="first-choice expert (dml.top_k)")
  fig.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return True


def main(fast: bool = False, out_dir: pathlib.Path | None = OUTPUT, seed: int = 0) -> dict[str, Any]:
  settings = FAST if fast else FULL
  x_np, y_np = make_task(settings["tokens"], seed)
  x, y = jnp.asarray(x_np), jnp.asarray(y_np)
  params = init(jax.random.key(seed))
  state = (jax.tree.map(jnp.zeros_like, params), jax.tree.map(jnp.zeros_like, params))

  router_grad = jax.jit(jax.grad(task_loss))(params, x, y)["router"]
  lax_grad = jax.jit(jax.grad(functools.partial(task_loss, top_k=jax.lax.top_k)))(params, x, y)["router"]

  @jax.jit
  def train_step(params: Params, state: tuple[Params, Params], step: jax.Array) -> tuple[Params, Any, jax.Array]:
    value, grads = jax.value_and_grad(loss)(params, x, y)
    params, state = adam_step(params, grads, state, step)
    return params, state, value

  losses = []
  start = time.perf_counter()
  for step in range(1, settings["steps"] + 1):
    params, state, value = train_step(params, state, jnp.float32(step))
    losses.append(float(value))
  seconds = time.perf_counter() - start

  final_mse = float(jax.jit(task_loss)(params, x, y))
  baseline = best_affine_mse(x_np, y_np)
  window = max(1, len(losses) // 10)
  first, last = float(np.mean(losses[:window])), float(np.mean(losses[-window:]))
  print(f"{settings['tokens']} tokens, {EXPERTS} experts, top-{TOP}: {settings['steps']} steps in {seconds:.1f} s")
  print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} (mean of first/last tenth {first:.4f} -> {last:.4f})")
  print(f"task MSE {final_mse:.4f}; best single affine map {baseline:.4f} ({baseline / final_mse:.1f}x worse)")
  print(
    f"router gradient at init: norm {float(jnp.linalg.norm(router_grad)):.4f} through dml.top_k, "
    f"max difference {float(jnp.max(jnp.abs(router_grad - lax_grad))):.1e} from jax.lax.top_k's"
  )
  plotted = out_dir is not None and plot(losses, params, out_dir / "moe_layer.png")
  if plotted:
    print(f"figure: {out_dir / 'moe_layer.png'}")

  assert float(jnp.linalg.norm(router_grad)) > 0, "the router must get a gradient through the top_k values"
  np.testing.assert_allclose(router_grad, lax_grad, rtol=1e-4, atol=1e-6)
  assert last < 0.5 * first, "the loss must decrease"
  assert final_mse < baseline / 4, "the mixture must beat the best single affine map"
  return {"first_loss": first, "last_loss": last, "task_mse": final_mse, "affine_mse": baseline, "plotted": plotted}


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--fast", action="store_true", help="reduced settings (as in the test suite)")
  main(fast=parser.parse_args().fast)
