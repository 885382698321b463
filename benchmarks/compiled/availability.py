"""Whether this environment can compile for an H100 or a TPU without the hardware, and its settings.

Compiling for a GPU needs jaxlib's CUDA plugin (``jax-cuda12-plugin`` and ``jax-cuda12-pjrt``, at jaxlib's
exact version) and ptxas (``nvidia-cuda-nvcc-cu12``); compiling for a TPU needs ``libtpu`` at the version
jax pins for its ``tpu`` extra. The ``aot`` extra of pyproject.toml installs all of them
(:data:`INSTALL`). None of this touches a device: :func:`configure` keeps JAX on the CPU platform and
tells libtpu not to look for a TPU host.
"""

from __future__ import annotations

import os
import re
from importlib import metadata

INSTALL = 'pip install -e ".[aot]"'
# What each kind of target needs besides jax and jaxlib (distribution names).
NEEDS = {
  "gpu": ("jax-cuda12-plugin", "jax-cuda12-pjrt", "nvidia-cuda-nvcc-cu12"),
  "tpu": ("libtpu",),
}
# libtpu reads these when JAX builds a TPU topology: no TPU VM metadata server to ask, one worker, this host, and
# its lock file not held (processes side by side, as the test suite's workers, each load libtpu).
TPU_ENVIRONMENT = {
  "TPU_SKIP_MDS_QUERY": "1",
  "TPU_WORKER_ID": "0",
  "TPU_WORKER_HOSTNAMES": "localhost",
  "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}


def version(distribution: str) -> str | None:
  """The installed version of ``distribution``, or ``None``."""
  try:
    return metadata.version(distribution)
  except metadata.PackageNotFoundError:
    return None


def versions() -> dict[str, str | None]:
  """jax, jaxlib and every compile-only package, with their installed versions (for the reports)."""
  names = ("jax", "jaxlib", *NEEDS["gpu"], *NEEDS["tpu"])
  return {name: version(name) for name in names}


def _libtpu_pin() -> str | None:
  """The libtpu release series jax's ``tpu`` extra asks for (``0.0.42`` for jax 0.10.2), if jax names one."""
  for requirement in metadata.requires("jax") or []:
    found = re.match(r"libtpu\s*==\s*([0-9.]+?)(\.\*)?\s*;.*extra\s*==\s*['\"]tpu['\"]", requirement)
    if found:
      return found.group(1)
  return None


def problem(kind: str) -> str | None:
  """Why compiling for ``kind`` (``"gpu"`` or ``"tpu"``) cannot work here, or ``None`` when it can."""
  if kind not in NEEDS:
    raise ValueError(f"kind must be one of {sorted(NEEDS)}; got {kind!r}")
  missing = [name for name in NEEDS[kind] if version(name) is None]
  if missing:
    return f"the compile-only packages are not installed ({', '.join(missing)}); install them with: {INSTALL}"
  jaxlib = version("jaxlib")
  if kind == "gpu":
    for plugin in ("jax-cuda12-plugin", "jax-cuda12-pjrt"):
      if version(plugin) != jaxlib:
        return (
          f"{plugin} {version(plugin)} does not match jaxlib {jaxlib}: the CUDA plugin must be jaxlib's exact "
          f'version; reinstall with: pip install "{plugin}=={jaxlib}"'
        )
  else:
    pin, libtpu = _libtpu_pin(), version("libtpu")
    if pin is not None and libtpu is not None and not (libtpu == pin or libtpu.startswith(pin + ".")):
      return (
        f"libtpu {libtpu} is not the release jax {version('jax')} pins ({pin}.*); reinstall with: "
        f'pip install "jax[tpu]=={version("jax")}"'
      )
  return None


def require(kind: str) -> None:
  """Raises ``RuntimeError`` with :func:`problem`'s reason when compiling for ``kind`` cannot work here."""
  reason = problem(kind)
  if reason is not None:
    raise RuntimeError(f"cannot compile for {kind.upper()} without the hardware: {reason}")


def configure() -> None:
  """Keeps JAX on its CPU platform and sets libtpu's environment (call before JAX first touches a device).

  The compile-only devices come from topology descriptions, not from JAX's backends, so the process
  needs no GPU or TPU runtime: with the plugins installed, JAX would otherwise try to start them.
  """
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  for name, value in TPU_ENVIRONMENT.items():
    os.environ.setdefault(name, value)
  import jax
  from jax._src import xla_bridge

  if not xla_bridge.backends_are_initialized():
    jax.config.update("jax_platforms", "cpu")
