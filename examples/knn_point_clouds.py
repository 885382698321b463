"""k-nearest neighbours on a batch of point clouds: INCREASING ``dml.top_k`` on distances, batched ``dml.gather_nd``.

Every point of every cloud finds its ``k`` nearest neighbours in the same cloud (itself included), the way
point-cloud networks (PointNet++, DGCNN) group points:

* ``dml.top_k(distances, k, direction="increasing")`` gives, per query, the ``k`` smallest squared distances,
  nearest first, ties in ascending index order;
* ``dml.gather_nd(features, indices[..., None], batch_dims=1)`` collects the neighbours' features from the
  query's own cloud (the cloud is the batch dimension), giving a ``(clouds, points, k, features)`` block.

The neighbourhoods then do two classic jobs: estimating surface normals (the smallest principal axis of each
neighbourhood) and cleaning noisy per-point labels by a majority vote. Everything is checked against a
brute-force NumPy answer: the same neighbour indices (``np.argsort`` on the same distances, stable), the same
neighbour distances as a float64 computation from scratch, and the same gathered features. With matplotlib
installed it draws one cloud with a query's neighbourhood to ``examples/_output/knn_point_clouds.png``.

Run: ``python examples/knn_point_clouds.py`` (``--fast`` for the reduced settings the test suite uses).
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dmljax as dml

FULL = {"clouds": 8, "points": 1024, "k": 16}
FAST = {"clouds": 2, "points": 512, "k": 12}
LABEL_NOISE = 0.15
OUTPUT = pathlib.Path(__file__).resolve().parent / "_output"


def make_clouds(clouds: int, points: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """Noisy spheres of random centre and radius; returns points, true normals, true and noisy labels.

  A point's label is 1 on the upper hemisphere, 0 on the lower; ``LABEL_NOISE`` of the labels are flipped.
  """
  rng = np.random.default_rng(seed)
  directions = rng.normal(size=(clouds, points, 3))
  directions /= np.linalg.norm(directions, axis=-1, keepdims=True)
  radius = rng.uniform(0.5, 2.0, size=(clouds, 1, 1))
  centre = rng.uniform(-3.0, 3.0, size=(clouds, 1, 3))
  xyz = centre + radius * directions * (1 + 0.005 * rng.normal(size=(clouds, points, 1)))
  labels = (directions[..., 2] > 0).astype(np.float32)
  flip = rng.random(labels.shape) < LABEL_NOISE
  noisy = np.where(flip, 1 - labels, labels).astype(np.float32)
  return xyz.astype(np.float32), directions.astype(np.float32), labels, noisy


@jax.jit
def squared_distances(xyz: jax.Array) -> jax.Array:
  """``(clouds, points, points)`` squared distances between every pair of points of a cloud."""
  diff = xyz[:, :, None, :] - xyz[:, None, :, :]
  return jnp.sum(diff * diff, axis=-1)


@functools.partial(jax.jit, static_argnames="k")
def nearest(distances: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """The ``k`` smallest distances of every row and their column indices, nearest first."""
  return dml.top_k(distances, k, axis=-1, direction="increasing")


@jax.jit
def neighbourhoods(features: jax.Array, indices: jax.Array) -> jax.Array:
  """``features[c, indices[c, p, j]]`` for every cloud ``c``: the cloud is gather_nd's batch dimension."""
  return dml.gather_nd(features, indices[..., None], batch_dims=1)


@jax.jit
def normals_and_votes(grouped: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Per point: the unit normal of its neighbourhood (PCA) and the majority label of its neighbours."""
  xyz, labels = grouped[..., :3], grouped[..., 3]
  centred = xyz - jnp.mean(xyz, axis=-2, keepdims=True)
  covariance = jnp.einsum("cpki,cpkj->cpij", centred, centred)
  _, vectors = jnp.linalg.eigh(covariance)
  votes = (jnp.mean(labels, axis=-1) > 0.5).astype(jnp.float32)
  return vectors[..., :, 0], votes


def brute_force_check(
  xyz: np.ndarray, distances: np.ndarray, values: np.ndarray, indices: np.ndarray, grouped: np.ndarray, k: int
) -> dict[str, float]:
  """Compares the dmljax answer with NumPy; returns the largest discrepancies (all asserted by the caller)."""
  order = np.argsort(distances, axis=-1, kind="stable")[..., :k]
  index_mismatches = int(np.sum(order != indices))
  exact = np.sum((xyz[:, :, None, :].astype(np.float64) - xyz[:, None, :, :]) ** 2, axis=-1)
  nearest64 = np.sort(exact, axis=-1)[..., :k]
  distance_error = float(np.max(np.abs(nearest64 - values)))
  features = np.take_along_axis(
    np.broadcast_to(xyz[:, None], (*indices.shape[:2], *xyz.shape[1:])), indices[..., None], axis=2
  )
  feature_mismatches = int(np.sum(features != grouped[..., :3]))
  return {
    "index_mismatches": index_mismatches,
    "distance_error": distance_error,
    "feature_mismatches": feature_mismatches,
  }


def plot(xyz: np.ndarray, indices: np.ndarray, angles: np.ndarray, path: pathlib.Path) -> bool:
  try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    return False
  fig = plt.figure(figsize=(9, 4))
  ax = fig.add_subplot(1, 2, 1, projection="3d")
  cloud, query = xyz[0], 0
  ax.scatter(*cloud.T, s=2, c="lightgray")
  ax.scatter(*cloud[indices[0, query]].T, s=12, c="tab:orange", label="k nearest (dml.top_k)")
  ax.scatter(*cloud[query], s=40, c="tab:red", label="query")
  ax.set_title("one cloud, one neighbourhood")
  ax.legend(loc="upper left", fontsize=8)
  right = fig.add_subplot(1, 2, 2)
  right.hist(angles.ravel(), bins=40)
  right.set(xlabel="angle between estimated and true normal (degrees)", ylabel="points", title="normal estimation")
  fig.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return True


def main(fast: bool = False, out_dir: pathlib.Path | None = OUTPUT, seed: int = 0) -> dict[str, Any]:
  settings = FAST if fast else FULL
  k = settings["k"]
  xyz, true_normals, labels, noisy = make_clouds(settings["clouds"], settings["points"], seed)

  start = time.perf_counter()
  distances = squared_distances(jnp.asarray(xyz))
  values, indices = nearest(distances, k)
  features = jnp.concatenate([jnp.asarray(xyz), jnp.asarray(noisy)[..., None]], axis=-1)
  grouped = neighbourhoods(features, indices)
  normals, votes = normals_and_votes(grouped)
  jax.block_until_ready((normals, votes))
  seconds = time.perf_counter() - start

  check = brute_force_check(xyz, np.asarray(distances), np.asarray(values), np.asarray(indices), np.asarray(grouped), k)
  cosine = np.abs(np.sum(np.asarray(normals) * true_normals, axis=-1))
  angles = np.degrees(np.arccos(np.clip(cosine, 0.0, 1.0)))
  noisy_accuracy = float(np.mean(noisy == labels))
  voted_accuracy = float(np.mean(np.asarray(votes) == labels))

  clouds, points = settings["clouds"], settings["points"]
  print(f"{clouds} clouds x {points} points, k={k}: neighbours, normals and votes in {seconds:.2f} s")
  print(
    f"vs NumPy brute force: {check['index_mismatches']} index mismatches, {check['feature_mismatches']} "
    f"feature mismatches, largest distance difference {check['distance_error']:.2e}"
  )
  print(f"normals: median angle error {np.median(angles):.2f} deg, 99th percentile {np.percentile(angles, 99):.2f}")
  print(f"labels: {noisy_accuracy:.1%} correct with {LABEL_NOISE:.0%} noise, {voted_accuracy:.1%} after a k-NN vote")
  plotted = out_dir is not None and plot(xyz, np.asarray(indices), angles, out_dir / "knn_point_clouds.png")
  if plotted:
    print(f"figure: {out_dir / 'knn_point_clouds.png'}")

  assert check["index_mismatches"] == 0, "top_k disagrees with a stable NumPy argsort of the same distances"
  assert check["feature_mismatches"] == 0, "gather_nd disagrees with NumPy's take_along_axis"
  assert check["distance_error"] < 1e-4, "neighbour distances disagree with a float64 brute force"
  assert np.all(np.diff(np.asarray(values), axis=-1) >= 0), "INCREASING top_k must sort nearest first"
  assert np.all(np.asarray(indices)[..., 0] == np.arange(points)), "every point is its own nearest neighbour"
  assert np.median(angles) < 5.0, "estimated normals should follow the spheres' radial directions"
  assert voted_accuracy > noisy_accuracy + 0.05, "a k-NN vote should clean the noisy labels"
  return {
    **check,
    "median_normal_angle": float(np.median(angles)),
    "noisy_accuracy": noisy_accuracy,
    "voted_accuracy": voted_accuracy,
    "plotted": plotted,
  }


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--fast", action="store_true", help="reduced settings (as in the test suite)")
  main(fast=parser.parse_args().fast)
