"""The optional compiled part of dmljax: the CPU top-k kernel (csrc/cpu_top_k.cc), an XLA FFI handler.

Everything else is in pyproject.toml. The kernel needs XLA's FFI headers, which jaxlib ships (a build
requirement); it is built with setuptools' own extension support and marked optional: where no C++
compiler works, the build says so and goes on, and dmljax runs its XLA strategies on CPU instead.
DMLJAX_SANITIZE=address builds it with AddressSanitizer (CI).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _ffi_include_dir() -> str | None:
  """jaxlib's include directory (what ``jax.ffi.include_dir()`` returns), found without importing jax."""
  spec = importlib.util.find_spec("jaxlib")
  if spec is None or not spec.submodule_search_locations:
    return None
  include = pathlib.Path(next(iter(spec.submodule_search_locations))) / "include"
  return str(include) if (include / "xla" / "ffi" / "api" / "ffi.h").is_file() else None


class _OptionalBuildExt(build_ext):
  """build_ext that reports a failed optional extension in one line a user can act on."""

  def run(self) -> None:
    try:
      super().run()
    except Exception as error:  # a missing compiler can surface before any extension is compiled
      print(f"dmljax: the CPU top-k kernel was not built ({error}); dmljax uses its XLA strategies", file=sys.stderr)

  def build_extension(self, ext: Extension) -> None:
    sanitize = os.environ.get("DMLJAX_SANITIZE")
    if sanitize:
      ext.extra_compile_args = [*ext.extra_compile_args, f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g1"]
      ext.extra_link_args = [*ext.extra_link_args, f"-fsanitize={sanitize}"]
    super().build_extension(ext)


def _extensions() -> list[Extension]:
  include = _ffi_include_dir()
  if include is None:
    print("dmljax: jaxlib's FFI headers not found; the CPU top-k kernel is not built", file=sys.stderr)
    return []
  return [
    Extension(
      "dmljax._src._cpu_top_k",
      sources=["csrc/cpu_top_k.cc"],
      # -isystem: the FFI headers' own warnings are not this project's.
      extra_compile_args=["-std=c++17", "-O3", "-g0", "-isystem", include],
      language="c++",
      optional=True,
    )
  ]


setup(ext_modules=_extensions(), cmdclass={"build_ext": _OptionalBuildExt})
