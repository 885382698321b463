"""XLA:CPU: the compiled top-k kernel (``csrc/cpu_top_k.cc``), an FFI call that uses every core.

**What it computes.** For every row, the ``k`` first elements in dmljax's order (any ``k`` up to the row
length, either direction): values as the input's bits, int32 indices. The kernel computes each element's
order key from its bits exactly as :func:`rank_keys.ascending_key` does (the bitwise not of it for the
smallest first) and compares ``(key, index)`` pairs, larger key first and of equal keys the lower index.
Types: float16, bfloat16, float32, float64 and the signed and unsigned integers of 8 to 64 bits
(:func:`handles`); float8, float4 and int4 types keep the table's XLA rows.

**How.** Each row is read once, keeping the ``k`` best pairs behind a threshold that only rises; rows, or
chunks of long rows whose candidates are merged exactly, are spread over XLA's own intra-op thread pool.
Calls under 128 KiB run on the calling thread; inputs under :data:`MIN_BYTES` keep the XLA rows.

**Where not.** The kernel sits behind a primitive whose CPU lowering is the FFI call only when the library
is loaded (:mod:`cpu_kernel_library`) and the program is not being exported: an FFI target is not a stable
custom call for ``jax.export``, so exported programs (and every other platform) get ``fallback``, the
selection the CPU table makes without the kernel, which the table passes in.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, mlir

from dmljax._src import cpu_kernel_library, index_math, platform
from dmljax._src.strategies import row_kernel
from dmljax._src.strategies.case import Case, Select, Selected

NAME = "cpu_kernel"
# Smaller inputs keep the table's XLA rows, which XLA:CPU runs on the calling thread: a call to the kernel
# costs more than the whole selection there (measured on 2 cores: 256x8 float32 k=2 took 1.2-1.4x as long as
# with the XLA rows; 4x4096 k=1, 64 KiB, 0.75x).
MIN_BYTES = 1 << 15
_MAX_ROW = np.iinfo(np.int32).max
_TYPES = frozenset(
  np.dtype(t) for t in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64, jnp.int8, jnp.int16, jnp.int32, jnp.int64)
) | frozenset(np.dtype(t) for t in (jnp.uint8, jnp.uint16, jnp.uint32, jnp.uint64))


def handles(case: Case) -> bool:
  """The types the kernel keys (float16, bfloat16, float32, float64, 8- to 64-bit integers), rows int32 indexes."""
  return case.dtype in _TYPES and case.n <= _MAX_ROW and 1 <= case.k <= case.n


def pays(case: Case) -> bool:
  """Inputs of :data:`MIN_BYTES` or more, where the library is loaded and the choice allows it."""
  large = case.size * case.dtype.itemsize >= MIN_BYTES
  return large and platform.current().cpu_kernel and cpu_kernel_library.available()


# The primitive: the FFI call under jit on CPU, the fallback selection when exported or elsewhere --------------

_cpu_kernel_p = row_kernel.primitive("dmljax_cpu_kernel_top_k")


def _fallback_lowering(ctx: Any, rows: Any, *, k: int, largest_first: bool, fallback: Select) -> Any:
  case = Case(np.dtype(ctx.avals_in[0].dtype), tuple(ctx.avals_in[0].shape), k, largest_first)
  return mlir.lower_fun(lambda x: fallback(x, case), multiple_results=True)(ctx, rows)


def _cpu_lowering(ctx: Any, rows: Any, *, k: int, largest_first: bool, fallback: Select) -> Any:
  if row_kernel.exporting(ctx) or not cpu_kernel_library.available():
    return _fallback_lowering(ctx, rows, k=k, largest_first=largest_first, fallback=fallback)
  lowering = jax.ffi.ffi_lowering(cpu_kernel_library.TARGET)
  return lowering(ctx, rows, k=np.int64(k), largest_first=bool(largest_first))


mlir.register_lowering(_cpu_kernel_p, _fallback_lowering)
mlir.register_lowering(_cpu_kernel_p, _cpu_lowering, platform="cpu")


def _jvp(primals: Any, tangents: Any, **params: Any) -> Any:
  """Values' tangents are the input's tangents at the selected indices; indices have none."""
  (rows,), (tangent,) = primals, tangents
  values, indices = _cpu_kernel_p.bind(rows, **params)
  tangent = ad.instantiate_zeros(tangent)
  value_tangent = index_math.take_along_last_axis(tangent, indices)
  return (values, indices), (value_tangent, ad.Zero(jax.typeof(indices).to_tangent_aval()))


ad.primitive_jvps[_cpu_kernel_p] = _jvp


def selecting(fallback: Select) -> Select:
  """The kernel's selection, with ``fallback`` (the CPU table's XLA pick) where the kernel cannot run."""

  def select(x: jax.Array, case: Case) -> Selected:
    return row_kernel.select_rows(_cpu_kernel_p, x, case, fallback=fallback)

  return select
