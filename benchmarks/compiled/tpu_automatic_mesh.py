"""top_k on automatic mesh axes for a TPU slice: why it needed a path of its own, and what it compiles to.

Compiled, not run: no TPU is needed. Run in a virtual environment with ``jax[tpu]`` at jax's version
(libtpu) installed, on any machine::

    python -m benchmarks.compiled.tpu_automatic_mesh [--topology v5e:4x4] [--shape 512 262144] [--k 50]

It prints, with the evidence for each:

1. which PJRT C API extensions libtpu and the CUDA plugin (where installed) implement. JAX hands
   ``custom_partitioning``'s Python rule to a PJRT plugin through the plugin's custom-partitioner
   extension (``jax/_src/custom_partitioning.py``: ``xb.register_plugin_callbacks``);
2. whether JAX registers the TPU backend with a C API handle at all (``jax/_src/xla_bridge.py``: the TPU
   factory is registered by ``register_backend_factory('tpu', ...)``, without ``c_api``, so the callback
   registration never reaches libtpu, on a TPU VM as here);
3. what a bare ``custom_partitioning`` function does when compiled for the slice on an automatic mesh;
4. the collectives, the bytes they move to each chip and XLA's ``optimal_seconds`` for ``dml.top_k``,
   ``dml.argmax`` and ``jax.lax.top_k`` over a vocabulary split across the chips, on automatic and explicit
   mesh axes.

The last line is the same as JSON (the test suite reads it where libtpu is installed).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import runpy
import site
from typing import Any

for _name, _value in {
  "JAX_PLATFORMS": "cpu",  # the host's CPU is the only backend; the TPU is a topology to compile for
  "TPU_SKIP_MDS_QUERY": "1",  # no TPU VM metadata server to ask
  "TPU_WORKER_ID": "0",
  "TPU_WORKER_HOSTNAMES": "localhost",
  "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",  # other processes may hold libtpu's lock file
}.items():
  os.environ.setdefault(_name, _value)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.experimental.custom_partitioning import custom_partitioning  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import dmljax as dml  # noqa: E402
from benchmarks import ROOT  # noqa: E402
from benchmarks.harness import timing  # noqa: E402

_CLUSTER = runpy.run_path(str(ROOT / "examples" / "local_cluster.py"))  # its HLO readers
collective_bytes, list_collectives = _CLUSTER["collective_bytes"], _CLUSTER["collectives"]

# PJRT_Extension_Type in xla/pjrt/c/pjrt_c_api.h (the first values; later ones are printed as numbers).
_EXTENSIONS = ["Gpu_Custom_Call", "Profiler", "Custom_Partitioner", "Stream", "Layouts", "FFI", "MemoryDescriptions"]
_EXTENSIONS += ["Triton", "RawBuffer", "PhaseCompile", "Example", "Unknown", "CrossHostTransfers"]


class _Extension(ctypes.Structure):
  pass


_Extension._fields_ = [
  ("struct_size", ctypes.c_size_t),
  ("type", ctypes.c_int),
  ("next", ctypes.POINTER(_Extension)),
]


class _Api(ctypes.Structure):  # the head of PJRT_Api: struct_size, extension_start, then PJRT_Api_Version
  _fields_ = [
    ("struct_size", ctypes.c_size_t),
    ("extension_start", ctypes.POINTER(_Extension)),
    ("version_struct_size", ctypes.c_size_t),
    ("version_extension_start", ctypes.c_void_p),
    ("major", ctypes.c_int),
    ("minor", ctypes.c_int),
  ]


def pjrt_extensions(library: str) -> tuple[str, list[str]]:
  """The PJRT C API version and the extensions of a plugin library (``GetPjrtApi``'s chain)."""
  get_api = ctypes.CDLL(library).GetPjrtApi
  get_api.restype = ctypes.POINTER(_Api)
  api = get_api().contents
  found, extension = [], api.extension_start
  while extension:
    kind = extension.contents.type
    found.append(_EXTENSIONS[kind] if kind < len(_EXTENSIONS) else str(kind))
    extension = extension.contents.next
  return f"{api.major}.{api.minor}", found


def plugins() -> dict[str, str]:
  """The installed plugin libraries: libtpu and the CUDA plugin."""
  patterns = {"libtpu": "libtpu/libtpu.so", "cuda plugin": "jax_plugins/xla_cuda*/xla_cuda_plugin.so"}
  found = {}
  for name, pattern in patterns.items():
    paths = [path for folder in site.getsitepackages() for path in glob.glob(f"{folder}/{pattern}")]
    if paths:
      found[name] = paths[0]
  return found


def tpu_factory_has_c_api() -> bool | None:
  from jax._src import xla_bridge

  factory = xla_bridge._backend_factories.get("tpu")
  return None if factory is None else factory.c_api is not None


@custom_partitioning
def _double(x: jax.Array) -> jax.Array:
  return x * 2


def _double_partition(mesh: Any, arg_shapes: Any, result_shape: Any) -> Any:
  return mesh, lambda x: x * 2, result_shape.sharding, (arg_shapes[0].sharding,)


_double.def_partition(
  partition=_double_partition,
  infer_sharding_from_operands=lambda mesh, arg_shapes, result_shape: arg_shapes[0].sharding,
  sharding_rule="a b -> a b",
)


def collectives(compiled: Any) -> dict[str, int]:
  """Each collective (kind and result type) and how often the program holds it."""
  found: dict[str, int] = {}
  for kind, result in list_collectives(compiled):
    found[f"{kind} {result}"] = found.get(f"{kind} {result}", 0) + 1
  return found


def compile_report(fn: Any, spec: jax.ShapeDtypeStruct) -> dict[str, Any]:
  clock = timing.Stopwatch()
  try:
    compiled = jax.jit(fn).lower(spec).compile()
  except Exception as error:  # report the failure, go on with the next program
    return {"error": f"{type(error).__name__}: {str(error).splitlines()[0]}"}
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, list) else cost
  seconds = (cost or {}).get("optimal_seconds")
  return {
    "compile_s": round(clock.seconds(), 1),
    "bytes": collective_bytes(compiled),
    "optimal_seconds": seconds if seconds is not None and seconds >= 0 else None,
    "collectives": collectives(compiled),
  }


def main() -> dict[str, Any]:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--topology", default="v5e:4x4")
  parser.add_argument("--shape", type=int, nargs=2, default=(512, 262144), metavar=("BATCH", "VOCAB"))
  parser.add_argument("--k", type=int, default=50)
  options = parser.parse_args()
  report: dict[str, Any] = {"jax": jax.__version__, "topology": options.topology}

  print("1. PJRT C API extensions (custom_partitioning's rule reaches a plugin through Custom_Partitioner):")
  report["extensions"] = {}
  for name, library in plugins().items():
    version, found = pjrt_extensions(library)
    report["extensions"][name] = found
    print(f"   {name} (PJRT C API {version}): {', '.join(found)}")
    print(f"   -> {name} {'implements' if 'Custom_Partitioner' in found else 'does NOT implement'} it")

  devices = topologies.get_topology_desc(options.topology, platform="tpu").devices
  report["chips"] = len(devices)
  report["tpu_factory_has_c_api"] = tpu_factory_has_c_api()
  print(f"2. JAX's TPU backend factory carries a C API handle: {report['tpu_factory_has_c_api']}")

  batch, vocab = options.shape
  print(f"   {len(devices)} chips of {devices[0].device_kind}; logits ({batch}, {vocab}) float32, k={options.k}")
  auto = Mesh(np.array(devices), ("v",))
  spec = jax.ShapeDtypeStruct((batch, vocab), np.float32, sharding=NamedSharding(auto, P(None, "v")))
  report["bare_custom_partitioning"] = compile_report(_double, spec)
  print(f"3. a bare custom_partitioning function, automatic mesh: {report['bare_custom_partitioning']}")

  print("4. compiled, not run (bytes: what the collectives produce on each chip):")
  shard = batch * vocab * 4 // len(devices)
  report["shard_bytes"] = shard
  report["programs"] = {}
  programs = {
    "dml.top_k": lambda x: dml.top_k(x, options.k),
    "dml.argmax": lambda x: dml.argmax(x, 1),
    "jax.lax.top_k": lambda x: jax.lax.top_k(x, options.k),
    "jnp.argmax": lambda x: jax.numpy.argmax(x, 1),
  }
  for kind, axis_type in [("automatic", AxisType.Auto), ("explicit", AxisType.Explicit)]:
    mesh = Mesh(np.array(devices), ("v",), axis_types=(axis_type,))
    spec = jax.ShapeDtypeStruct((batch, vocab), np.float32, sharding=NamedSharding(mesh, P(None, "v")))
    for name, fn in programs.items():
      result = compile_report(fn, spec)
      report["programs"][f"{kind} {name}"] = result
      if "error" in result:
        print(f"   {kind:9s} {name:13s} does not compile: {result['error'][:120]}")
      else:
        estimate = "n/a" if result["optimal_seconds"] is None else f"{1e6 * result['optimal_seconds']:.0f} us"
        print(
          f"   {kind:9s} {name:13s} {result['bytes']:>12,} bytes ({result['bytes'] / shard:.3f} of a shard),"
          f" optimal_seconds {estimate}; {result['collectives']}"
        )
  print(json.dumps(report))
  return report


if __name__ == "__main__":
  main()
