"""The compiled CPU top-k kernel: where its library is, whether it loads, and its registration with XLA.

The package's build compiles ``csrc/cpu_top_k.cc`` into ``dmljax/_src/_cpu_top_k*.so`` where a C++ compiler
is found (setup.py; the build goes on without it). The library is looked for next to this module (an
installed package, or a source tree built with ``python setup.py build_ext --inplace``), then in the
installed ``dmljax`` distribution (a source checkout imported ahead of the installed package, as when the
tests run from the repository root). It is loaded once, its calling convention checked and its handler
registered with XLA:CPU as the FFI target :data:`TARGET`. Setting ``DMLJAX_CPU_KERNEL=0`` leaves it unloaded.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import importlib.metadata
import os
import pathlib

import jax

TARGET = "dmljax_cpu_top_k"
# The calling convention the Python side speaks (DmljaxCpuTopKAbiVersion in csrc/cpu_top_k.cc).
ABI_VERSION = 1
_STEM = "_cpu_top_k"
_HERE = pathlib.Path(__file__).parent


# The oldest jaxlib the kernel is built and tested with (jax 0.7.2's XLA:CPU does not find its handler).
MIN_JAXLIB = (0, 10)


def _names() -> list[str]:
  return [_STEM + suffix for suffix in importlib.machinery.EXTENSION_SUFFIXES]


def _installed() -> list[pathlib.Path]:
  """The library in every installed ``dmljax`` distribution on the path.

  Every one, not the first: a source tree that pip built in place holds a ``dmljax.egg-info`` of its own,
  which lists no library and comes first when the tree is the working directory.
  """
  names = set(_names())
  return [
    pathlib.Path(str(distribution.locate_file(file)))
    for distribution in importlib.metadata.distributions(name="dmljax")
    for file in distribution.files or []
    if file.name in names and file.parent.as_posix().endswith("dmljax/_src")
  ]


def candidates() -> list[pathlib.Path]:
  """Where the library may be, in the order it is looked for."""
  return [*(_HERE / name for name in _names()), *_installed()]


@functools.cache
def load() -> tuple[ctypes.CDLL | None, str]:
  """The loaded library, or ``None`` and why not (the answer of the first call, kept for the process)."""
  if os.environ.get("DMLJAX_CPU_KERNEL", "1") == "0":
    return None, "disabled by DMLJAX_CPU_KERNEL=0"
  import jaxlib  # the version of the runtime the kernel registers with

  jaxlib_version = tuple(int(part) for part in jaxlib.__version__.split(".")[:2] if part.isdigit())
  if jaxlib_version < MIN_JAXLIB:
    # Older XLA:CPU runtimes do not find the handler registered for "cpu" (NOT_FOUND on platform Host).
    return None, f"needs jaxlib >= {'.'.join(map(str, MIN_JAXLIB))}, found {jaxlib.__version__}"
  found = [path for path in candidates() if path.is_file()]
  if not found:
    return None, "not built (no C++ compiler when the package was built)"
  try:
    library = ctypes.CDLL(str(found[0]))
    abi = library.DmljaxCpuTopKAbiVersion()
  except (OSError, AttributeError) as error:
    return None, f"{found[0].name} did not load: {error}"
  if abi != ABI_VERSION:
    return None, f"{found[0].name} speaks calling convention {abi}, this dmljax {ABI_VERSION}: rebuild the package"
  jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(library.DmljaxCpuTopK), platform="cpu")
  return library, f"loaded from {found[0]}"


def available() -> bool:
  """Whether the compiled kernel is loaded and registered with XLA:CPU."""
  return load()[0] is not None


def cpu_kernel_available() -> bool:
  """Whether top-k on CPU runs dmljax's compiled multi-threaded kernel (else its XLA selections).

  The package's build compiles the kernel where a C++ compiler is found, and goes on without it where
  none is. Either way every result is the same, bit for bit; the kernel is faster on large inputs and uses
  every core. Programs exported with ``jax.export`` always hold the XLA selection. Setting the
  environment variable ``DMLJAX_CPU_KERNEL=0`` before the first top-k leaves the kernel unused.

  Example:
    >>> import dmljax as dml
    >>> isinstance(dml.cpu_kernel_available(), bool)
    True
  """
  return available()


def status() -> str:
  """One line: whether the kernel is in use, and where it came from or why it is not."""
  library, why = load()
  return f"CPU top-k kernel: {'in use' if library is not None else 'not in use'} ({why})"
