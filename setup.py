"""The optional compiled part of dmljax: the CPU kernels (csrc/: top-k, REDUCE MAX/MIN, argmin/argmax, sampling).

Everything else is in pyproject.toml. The kernel needs XLA's FFI headers, which jaxlib ships (a build
requirement); it is built with setuptools' own extension support into a plain shared library,
``dmljax/_src/libdmljax_cpu_top_k.so``, which dmljax loads with ctypes (it is not a Python extension module,
so it has no CPython ABI). Hence the wheel's tag: ``py3-none-<platform>`` with the kernel, ``py3-none-any``
without it (``pip wheel .`` where no C++ compiler works).

The kernel is optional: where no C++ compiler works, or jaxlib's headers are missing, the build says so and
goes on, and dmljax runs its XLA strategies on CPU instead. pip hides a build's output, so the outcome is also
written into the package, ``dmljax/_src/_cpu_kernel_build.json`` (built or not, why not, the jaxlib whose FFI
headers were used), which ``dmljax.cpu_kernel_status()`` reports. The library itself records the XLA FFI API
version of its headers, which dmljax compares with the running jaxlib's before using it.

DMLJAX_SANITIZE=address builds it with AddressSanitizer (CI).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import pathlib
import platform
import re
import sys
from typing import Any

from setuptools import Extension, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext

# The kernel's extension name and the file it is built into (dmljax/_src/cpu_kernel_library.py loads it).
KERNEL = "dmljax._src._cpu_top_k"
LIBRARY = "libdmljax_cpu_top_k.dll" if sys.platform == "win32" else "libdmljax_cpu_top_k.so"
BUILD_INFO = "_cpu_kernel_build.json"


def _jaxlib_dir() -> pathlib.Path | None:
  spec = importlib.util.find_spec("jaxlib")
  if spec is None or not spec.submodule_search_locations:
    return None
  return pathlib.Path(next(iter(spec.submodule_search_locations)))


def _ffi_include_dir() -> str | None:
  """jaxlib's include directory (what ``jax.ffi.include_dir()`` returns), found without importing jax."""
  jaxlib = _jaxlib_dir()
  if jaxlib is None:
    return None
  include = jaxlib / "include"
  return str(include) if (include / "xla" / "ffi" / "api" / "ffi.h").is_file() else None


def _ffi_api_version(include: str) -> str | None:
  """``MAJOR.MINOR`` of the XLA FFI API in the headers under ``include``."""
  header = (pathlib.Path(include) / "xla" / "ffi" / "api" / "c_api.h").read_text()
  found = [re.search(rf"#define XLA_FFI_API_{part}\s+(\d+)", header) for part in ("MAJOR", "MINOR")]
  return ".".join(match.group(1) for match in found) if all(found) else None  # type: ignore[union-attr]


def _jaxlib_version() -> str | None:
  try:
    return importlib.metadata.version("jaxlib")
  except importlib.metadata.PackageNotFoundError:
    return None


class _KernelNotBuilt(Exception):
  """Why the kernel was not built (recorded in the package and printed)."""


class _OptionalBuildExt(build_ext):
  """build_ext for the kernel: a plain shared library, optional, its outcome recorded in the package."""

  kernel_built = False

  def get_ext_filename(self, fullname: str) -> str:
    # A library loaded by ctypes, not imported: no CPython ABI suffix (".cpython-311-x86_64-linux-gnu.so").
    parts = fullname.split(".")
    if parts[-1] == KERNEL.rsplit(".", 1)[1]:
      return os.path.join(*parts[:-1], LIBRARY)
    return super().get_ext_filename(fullname)

  def get_export_symbols(self, ext: Extension) -> list[str]:
    return list(ext.export_symbols)  # no PyInit_ function: it is not an extension module

  def run(self) -> None:
    include = _ffi_include_dir()
    info: dict[str, Any] = {
      "built": False,
      "reason": None,
      "jaxlib": _jaxlib_version(),
      "ffi_api": _ffi_api_version(include) if include else None,
      "platform": f"{sys.platform}-{platform.machine()}",
    }
    inplace = self.inplace  # setuptools clears it while building and restores it only on success
    try:
      if include is None:
        raise _KernelNotBuilt(
          "jaxlib's XLA FFI headers were not found at build time (jaxlib is a build requirement; with "
          "--no-build-isolation, install jaxlib first)"
        )
      for ext in self.extensions:
        ext.extra_compile_args = [*ext.extra_compile_args, "-isystem", include]
      super().run()
      self.kernel_built = all(os.path.isfile(self.get_ext_fullpath(ext.name)) for ext in self.extensions)
      info["built"] = self.kernel_built
    except Exception as error:  # a missing compiler can surface before any extension is compiled
      info["reason"] = _reason(error)
    self.inplace = inplace
    if not self.kernel_built:
      reason = info["reason"] or "the build produced no library"
      info["reason"] = reason
      # pip shows this only with -v; the same line is in the package (dmljax.cpu_kernel_status()).
      print(
        f"dmljax: the CPU top-k kernel was not built: {reason}. dmljax will run its XLA selections on CPU "
        "(the same results, slower on large inputs); dmljax.cpu_kernel_status() says so.",
        file=sys.stderr,
      )
    self._record(info)

  def build_extension(self, ext: Extension) -> None:
    sanitize = os.environ.get("DMLJAX_SANITIZE")
    if sanitize:
      ext.extra_compile_args = [*ext.extra_compile_args, f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g1"]
      ext.extra_link_args = [*ext.extra_link_args, f"-fsanitize={sanitize}"]
    super().build_extension(ext)

  def _record(self, info: dict[str, Any]) -> None:
    """Writes the outcome next to the library (in the build tree, or in the source tree when in place)."""
    target = pathlib.Path(self.get_ext_fullpath(KERNEL)).parent / BUILD_INFO
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(info, indent=1) + "\n")
    if not info["built"]:
      # A library left by an earlier build would be loaded with this build's record: remove it.
      pathlib.Path(self.get_ext_fullpath(KERNEL)).unlink(missing_ok=True)

  def get_outputs(self) -> list[str]:
    return [*super().get_outputs(), str(pathlib.Path(self.get_ext_fullpath(KERNEL)).parent / BUILD_INFO)]


def _reason(error: Exception) -> str:
  text = " ".join(str(error).split()) or type(error).__name__
  if isinstance(error, _KernelNotBuilt):
    return text
  return f"no working C++17 compiler ({type(error).__name__}: {text})"


class _BdistWheel(bdist_wheel):
  """Tag ``py3-none-<platform>`` with the kernel (a ctypes library has no CPython ABI), else ``py3-none-any``."""

  def get_tag(self) -> tuple[str, str, str]:
    tag = super().get_tag()  # called once the package is installed into bdist_dir
    with_kernel = any(pathlib.Path(self.bdist_dir).rglob(LIBRARY))
    return ("py3", "none", tag[2] if with_kernel else "any")


setup(
  ext_modules=[
    Extension(
      KERNEL,
      sources=["csrc/cpu_top_k.cc", "csrc/cpu_reduce_extreme.cc", "csrc/cpu_arg_extreme.cc", "csrc/cpu_sampling.cc"],
      depends=["csrc/cpu_parallel.h"],
      # The FFI headers' include directory is added with -isystem (their own warnings are not this project's).
      extra_compile_args=["-std=c++17", "-O3", "-g0"],
      language="c++",
    )
  ],
  cmdclass={"build_ext": _OptionalBuildExt, "bdist_wheel": _BdistWheel},
)
