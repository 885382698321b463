"""The program of the multi-process test (tests/test_multiprocess.py); not a test module itself.

``examples/local_cluster.py`` runs it as 2 processes with 4 CPU devices each (gloo collectives). Every case
runs under ``jax.jit`` on a global mesh of the 8 devices, ``("p", "x")`` of shape (2, 4), whose row ``p`` is
process ``p``'s devices: an axis split over ``"p"`` (or over both axes) is split across the two processes.
Each case runs on automatic axes (``jax.sharding.Mesh``) and on explicit ones (``jax.make_mesh``), on
global arrays built from the same NumPy inputs in both processes. Each process writes what it got
(every output, fetched whole) to ``process_<i>.npz``, and the bytes each case's collectives move to each
device to ``process_<i>.json``, in the folder it is given; the test compares them with a one-process run of
``CASES``.

Inputs are small integers (as floats), so ties are everywhere and sums are exact in any order; the
largest (smallest) values of ``X`` sit on both sides of the boundary between the processes.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import export
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import dmljax as dml

_RNG = np.random.default_rng(19)
K = 8
ROWS, LENGTH = 4, 2048  # 256 elements a device, 1024 a process
BOUNDARY = LENGTH // 2  # the first index the second process holds


def _ties(shape: tuple[int, ...], low: int = -3, high: int = 4) -> np.ndarray:
  return _RNG.integers(low, high, shape).astype(np.float32)


X = _ties((ROWS, LENGTH))
# Equal extremes on both sides of the process boundary, and in the last shard: the tie rule picks across processes.
X[:, [BOUNDARY - 1, BOUNDARY, LENGTH - 1]] = 5.0
X[:, [BOUNDARY - 2, BOUNDARY + 1, 0]] = -5.0
X3 = X.reshape(ROWS, 16, LENGTH // 16)
# Positive, mostly ones: every sum, norm and product of a row is exact (a product is at most 2**30 or so).
POSITIVE = (1 + (_RNG.random((8, 512)) < 0.05)).astype(np.float32)
TABLE = _ties((64, 16))  # an embedding table, its rows split over the 8 devices
# Rows of every device, counted from the end, repeated (their gradients add) and past the end (clamped).
IDS = np.array([[0], [7], [8], [31], [32], [63], [-1], [-64], [40], [40], [99], [-99]], np.int32)
LABELS = _RNG.integers(-20, 20, (8, 1)).astype(np.int32)
WEIGHTS = np.arange(1, K + 1, dtype=np.float32).reshape(1, K)
VALUES_AT = np.arange(12 * 16, dtype=np.float32).reshape(12, 16)  # gather_nd's output cotangent


@dataclasses.dataclass(frozen=True)
class Case:
  """A function of NumPy inputs and the PartitionSpec of each input over the ("p", "x") mesh."""

  name: str
  fn: Callable[..., Any]
  args: tuple[np.ndarray, ...]
  specs: tuple[P, ...]


def _every_reduction(x: jax.Array, axes: Any) -> tuple[jax.Array, ...]:
  return tuple(dml.reduce(x, function, axes) for function in dml.ReduceFunction)


def _grad_top_k(x: jax.Array) -> jax.Array:
  return jax.grad(lambda x: jnp.sum(dml.top_k(x, K)[0] * WEIGHTS))(x)


def _grad_gather(table: jax.Array, ids: jax.Array) -> jax.Array:
  return jax.grad(lambda t: jnp.sum(dml.gather_nd(t, ids) * VALUES_AT))(table)


def _sampling(x: jax.Array) -> tuple[jax.Array, ...]:
  """Every sampling filter and a draw, per-row k and p, over the split vocabulary."""
  k = jnp.array([1, 8, 1500, 0], jnp.int32)
  p = jnp.array([0.5, 0.9, 0.99, 1.0], jnp.float32)
  key = jax.random.key(23)
  return (
    dml.sampling.top_k_mask(x, k),
    dml.sampling.top_p_mask(x, p),
    dml.sampling.min_p_mask(x, 0.2),
    dml.sampling.sample(key, x, temperature=0.8, top_k=k, top_p=p, min_p=0.05),
  )


ACROSS = P(None, ("p", "x"))  # the last axis over all 8 devices, 4 in each process
CASES = [
  Case("top_k", lambda x: dml.top_k(x, K), (X,), (ACROSS,)),
  Case("top_k_increasing", lambda x: dml.top_k(x, K, direction="increasing"), (X,), (ACROSS,)),
  # The batch split within each process, the sequence across the two.
  Case("top_k_batch_and_sequence", lambda x: dml.top_k(x, K), (X,), (P("x", "p"),)),
  Case("argmin", lambda x: dml.argmin(x, 1), (X,), (ACROSS,)),
  Case("argmax_last", lambda x: dml.argmax(x, 1, ties="last"), (X,), (ACROSS,)),
  Case(
    "arg_several_axes",
    lambda x: (dml.argmin(x, (1, 2)), dml.argmax(x, (1, 2), ties="last"), dml.argmax(x, (0, 2))),
    (X3,),
    (P(None, "p", "x"),),
  ),
  Case("reduce", lambda x: _every_reduction(x, 1), (POSITIVE,), (ACROSS,)),
  Case("reduce_two_axes", lambda x: _every_reduction(x, (0, 1)), (POSITIVE,), (P("x", "p"),)),
  Case("gather_nd", dml.gather_nd, (TABLE, IDS), (P(("p", "x")), P())),
  Case("one_hot", lambda i: dml.one_hot(i[:, 0], 16, on_value=3.0, off_value=-1.0), (LABELS,), (P(("p", "x")),)),
  Case("grad_top_k", _grad_top_k, (X,), (ACROSS,)),
  Case("grad_gather_nd", _grad_gather, (TABLE, IDS), (P(("p", "x")), P())),
  Case("sampling", _sampling, (X,), (ACROSS,)),
]
# Sums of exponentials are not exact: their order may move the last bit (relative tolerance).
INEXACT = {"reduce": 4 * float(np.finfo(np.float32).eps), "reduce_two_axes": 4 * float(np.finfo(np.float32).eps)}


def export_case(x: jax.Array) -> Any:
  """The function the explicit-axes export round trip carries."""
  return dml.top_k(x, K), dml.argmax(x, 1, ties="last"), dml.reduce(x, "sum", 1)


def _meshes() -> dict[str, Mesh]:
  devices = np.array(jax.devices()).reshape(2, 4)
  assert [{d.process_index for d in row} for row in devices] == [{0}, {1}], "mesh row p must be process p"
  return {
    "auto": Mesh(devices, ("p", "x")),
    "explicit": Mesh(devices, ("p", "x"), axis_types=(AxisType.Explicit,) * 2),
  }


def _global(array: np.ndarray, sharding: NamedSharding) -> jax.Array:
  return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def _fetch(leaf: jax.Array) -> np.ndarray:
  """The whole of a global array, in every process."""
  if leaf.is_fully_replicated:
    return np.asarray(leaf.addressable_data(0))
  from jax.experimental import multihost_utils

  return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))


def main(out_dir: pathlib.Path) -> None:
  from local_cluster import collective_bytes  # examples/, the launcher's folder, is on this process's path

  jax.config.update("jax_numpy_dtype_promotion", "strict")
  jax.config.update("jax_numpy_rank_promotion", "raise")
  assert jax.process_count() == 2 and len(jax.devices()) == 8 and len(jax.local_devices()) == 4
  results: dict[str, np.ndarray] = {}
  moved: dict[str, int] = {}
  for kind, mesh in _meshes().items():
    for case in CASES:
      args = [_global(a, NamedSharding(mesh, s)) for a, s in zip(case.args, case.specs, strict=True)]
      compiled = jax.jit(case.fn).lower(*args).compile()
      for n, leaf in enumerate(jax.tree.leaves(compiled(*args))):
        results[f"{kind}/{case.name}/{n}"] = _fetch(leaf)
      moved[f"{kind}/{case.name}"] = collective_bytes(compiled)
  across = NamedSharding(_meshes()["auto"], ACROSS)
  moved["auto/lax.top_k"] = collective_bytes(jax.jit(lambda x: jax.lax.top_k(x, K)).lower(_global(X, across)).compile())
  # jax.export of the multi-process program on explicit axes: serialized, read back and run on the global array.
  sharding = NamedSharding(_meshes()["explicit"], ACROSS)
  exported = export.export(jax.jit(export_case))(jax.ShapeDtypeStruct(X.shape, X.dtype, sharding=sharding))
  assert exported.nr_devices == 8
  restored = export.deserialize(exported.serialize())
  for n, leaf in enumerate(jax.tree.leaves(restored.call(_global(X, sharding)))):
    results[f"export/{n}"] = _fetch(leaf)
  process = jax.process_index()
  np.savez(out_dir / f"process_{process}.npz", **results)
  (out_dir / f"process_{process}.json").write_text(json.dumps(moved))
  print(f"process {process}: {len(results)} outputs, collective bytes {moved}")


if __name__ == "__main__":
  main(pathlib.Path(sys.argv[1]))
