"""The compiled CPU kernels (top-k, REDUCE MAX/MIN, argmin/argmax, the sampling filters' search): where their
library is, whether it loads, its registration.

The package's build compiles ``csrc/cpu_top_k.cc``, ``csrc/cpu_reduce_extreme.cc``, ``csrc/cpu_arg_extreme.cc`` and
``csrc/cpu_sampling.cc`` into the plain shared library ``dmljax/_src/libdmljax_cpu_top_k.so`` where a C++ compiler is
found (setup.py; the build goes on without it) and records the outcome, with the reason when it was not built, in
``dmljax/_src/_cpu_kernel_build.json``. The library is looked for next to this module (an installed package, or a
source tree built with ``python setup.py build_ext --inplace``), then in the installed ``dmljax`` distribution (a
source checkout imported ahead of the installed package, as when the tests run from the repository root). It is
loaded once, its calling convention and the XLA FFI API version of the headers it was compiled against checked, and
its handlers registered with XLA:CPU as the FFI targets :data:`TARGET`, :data:`REDUCE_EXTREME_TARGET`,
:data:`ARG_EXTREME_TARGET`, :data:`SAMPLING_CUT_TARGET` and :data:`SAMPLING_KEPT_TARGET`. Setting
``DMLJAX_CPU_KERNEL=0`` leaves it unloaded. Whatever keeps it unused, :func:`cpu_kernel_status` says why, in one line.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import json
import os
import pathlib
import re
import sys
from typing import Any

import jax

TARGET = "dmljax_cpu_top_k"
# Its REDUCE MAX/MIN handler (csrc/cpu_reduce_extreme.cc), registered with it.
REDUCE_EXTREME_TARGET = "dmljax_cpu_reduce_extreme"
# Its argmin/argmax handler (csrc/cpu_arg_extreme.cc), registered with it.
ARG_EXTREME_TARGET = "dmljax_cpu_arg_extreme"
# The sampling filters' handlers (csrc/cpu_sampling.cc): the whole-row search and the kept entries of a cut.
SAMPLING_CUT_TARGET = "dmljax_cpu_sampling_cut"
SAMPLING_KEPT_TARGET = "dmljax_cpu_sampling_kept"
# The calling convention the Python side speaks (DmljaxCpuTopKAbiVersion in csrc/cpu_top_k.cc).
ABI_VERSION = 6
# The library's file (setup.py's LIBRARY) and the build's record of its outcome (setup.py's BUILD_INFO).
LIBRARY = "libdmljax_cpu_top_k.dll" if sys.platform == "win32" else "libdmljax_cpu_top_k.so"
BUILD_INFO = "_cpu_kernel_build.json"
_HERE = pathlib.Path(__file__).parent

# The oldest jaxlib whose XLA:CPU runs the kernel's handler registered for "cpu": 0.7.2's answers NOT_FOUND for
# platform Host when the program runs; 0.8.3, 0.9.2 and 0.10.2 pass the kernel's tests.
MIN_JAXLIB = (0, 8)
_REBUILD = "reinstall dmljax against the installed jaxlib: pip install --no-build-isolation --force-reinstall ."


def _installed(name: str) -> list[pathlib.Path]:
  """The file ``name`` of ``dmljax/_src`` in every installed ``dmljax`` distribution on the path.

  Every one, not the first: a source tree that pip built in place holds a ``dmljax.egg-info`` of its own,
  which lists no library and comes first when the tree is the working directory.
  """
  return [
    pathlib.Path(str(distribution.locate_file(file)))
    for distribution in importlib.metadata.distributions(name="dmljax")
    for file in distribution.files or []
    if file.name == name and file.parent.as_posix().endswith("dmljax/_src")
  ]


def candidates() -> list[pathlib.Path]:
  """Where the library may be, in the order it is looked for."""
  return [_HERE / LIBRARY, *_installed(LIBRARY)]


def build_info(library: pathlib.Path | None = None) -> dict[str, Any] | None:
  """The build's record next to ``library`` (else the first found), or ``None`` where no build left one."""
  places = [library.parent / BUILD_INFO] if library is not None else [_HERE / BUILD_INFO, *_installed(BUILD_INFO)]
  for place in places:
    try:
      info = json.loads(place.read_text())
    except (OSError, ValueError):
      continue
    if isinstance(info, dict):
      return info
  return None


def _version(text: str) -> tuple[int, ...]:
  return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def running_ffi_api() -> tuple[int, int] | None:
  """The XLA FFI API version of the running jaxlib (from the headers it ships), or ``None`` if it has none."""
  try:
    header = (pathlib.Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h").read_text()
  except (OSError, AttributeError):
    return None
  found = [re.search(rf"#define XLA_FFI_API_{part}\s+(\d+)", header) for part in ("MAJOR", "MINOR")]
  if found[0] is None or found[1] is None:
    return None
  return int(found[0].group(1)), int(found[1].group(1))


def ffi_mismatch(built: tuple[int, int], running: tuple[int, int] | None) -> str | None:
  """Why a library built against XLA FFI API ``built`` cannot run on ``running`` (``None``: it can).

  XLA runs handlers built against older API versions of the same major version, not newer ones.
  """
  if running is None or (built[0] == running[0] and built[1] <= running[1]):
    return None
  return f"it was built against XLA FFI API {built[0]}.{built[1]}, newer than this jaxlib's {running[0]}.{running[1]}"


def _not_built(info: dict[str, Any] | None) -> str:
  if info is not None and not info.get("built", True):
    return f"not built when dmljax was installed: {info.get('reason')}"
  return (
    f"not built: no {LIBRARY} next to dmljax (a source checkout builds it with "
    "`python setup.py build_ext --inplace`; pip builds it where a C++17 compiler works)"
  )


@functools.cache
def load() -> tuple[ctypes.CDLL | None, str]:
  """The loaded library, or ``None`` and why not (the answer of the first call, kept for the process)."""
  if os.environ.get("DMLJAX_CPU_KERNEL", "1") == "0":
    return None, "disabled by DMLJAX_CPU_KERNEL=0"
  import jaxlib  # the version of the runtime the kernel registers with

  if _version(jaxlib.__version__)[:2] < MIN_JAXLIB:
    return None, (
      f"needs jaxlib >= {'.'.join(map(str, MIN_JAXLIB))} (older XLA:CPU runtimes do not find its handler), "
      f"found {jaxlib.__version__}; dmljax runs its XLA selections on CPU"
    )
  found = [path for path in candidates() if path.is_file()]
  if not found:
    return None, _not_built(build_info())
  library_path = found[0]
  info = build_info(library_path) or {}
  try:
    library = ctypes.CDLL(str(library_path))
    abi = library.DmljaxCpuTopKAbiVersion()
  except (OSError, AttributeError) as error:
    return None, f"{library_path} did not load: {error}; {_REBUILD}"
  if abi != ABI_VERSION:
    return None, f"{library_path} speaks calling convention {abi}, this dmljax {ABI_VERSION}: {_REBUILD}"
  encoded = library.DmljaxCpuTopKFfiApiVersion()
  built = (encoded // 1000, encoded % 1000)
  mismatch = ffi_mismatch(built, running_ffi_api())
  if mismatch is not None:
    headers = f" (the headers of jaxlib {info['jaxlib']})" if info.get("jaxlib") else ""
    return None, f"{library_path} cannot run on jaxlib {jaxlib.__version__}: {mismatch}{headers}; {_REBUILD}"
  # The backends first: a handler registered before they start is checked when they do, and one XLA refuses
  # then (an API version it no longer supports) fails the whole CPU backend; registered after, it raises here.
  jax.devices()
  try:
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(library.DmljaxCpuTopK), platform="cpu")
    jax.ffi.register_ffi_target(
      REDUCE_EXTREME_TARGET, jax.ffi.pycapsule(library.DmljaxCpuReduceExtreme), platform="cpu"
    )
    jax.ffi.register_ffi_target(ARG_EXTREME_TARGET, jax.ffi.pycapsule(library.DmljaxCpuArgExtreme), platform="cpu")
    jax.ffi.register_ffi_target(SAMPLING_CUT_TARGET, jax.ffi.pycapsule(library.DmljaxCpuSamplingCut), platform="cpu")
    jax.ffi.register_ffi_target(SAMPLING_KEPT_TARGET, jax.ffi.pycapsule(library.DmljaxCpuSamplingKept), platform="cpu")
  except Exception as error:  # XLA's own check (JaxRuntimeError): the kernel stays unused, jax goes on
    return None, f"XLA refused {library_path}: {' '.join(str(error).split())}; {_REBUILD}"
  return library, f"loaded from {library_path}"


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


def cpu_kernel_status() -> str:
  """One line that says whether top-k on CPU runs dmljax's compiled kernel, and if not, why not.

  :func:`cpu_kernel_available` answers yes or no; this says where the kernel was loaded from, or what kept
  it unused: ``DMLJAX_CPU_KERNEL=0``, a jaxlib older than the kernel needs, a library built against another
  jaxlib's XLA FFI (with the command that rebuilds it), or a build without a C++ compiler (the reason the build
  recorded in the package, which pip does not show). Either way every result is the same, bit for bit.

  Example:
    >>> import dmljax as dml
    >>> dml.cpu_kernel_status().startswith("CPU top-k kernel: ")
    True
  """
  return status()
