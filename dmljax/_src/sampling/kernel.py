"""The filters' whole-row work on one CPU device, by the compiled kernels (``csrc/cpu_sampling.cc``).

Two primitives, each an FFI call over rows of logits (a matrix: ``(rows, V)``):

* :func:`cut`: the top-k/top-p cut of each row (the same prefix :mod:`.search` finds, by a radix selection over
  the order keys with exact integer sums: :mod:`.mass`'s units of the weights XLA computed), and the units top-p
  measured against (the row's, or its top-k prefix's), as normalized limbs;
* :func:`kept`: the indices of the entries through a cut that are not NaN, ascending, and how many there are.

No transcendental function is computed in C++: the weights come in as XLA computed them, and the draw's noise and
scores are XLA's (:mod:`.draw`), so every route gives the same bits. :func:`route` is where the filters take these
kernels, through :func:`dmljax._src.cpu_route.choose`: on CPU, in a program of one device that is not being
exported, where the library is loaded and the trace-time choice allows it (:func:`dmljax._src.platform.choosing`'s
``cpu_kernel``); everywhere else, the XLA composition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from dmljax._src import cpu_kernel_library, cpu_route
from dmljax._src.sampling import mass
from dmljax._src.strategies import row_kernel

COUNT, MASS = 1, 2  # what a row's cut searches: top-k's prefix, top-p's (within top-k's where both are set)


def usable(ctx: Any) -> bool:
  """Whether the kernels can run in the program a lowering rule lowers: CPU alone, not exported, library loaded."""
  platforms = tuple(getattr(ctx.module_context, "platforms", ()) or ())
  return platforms == ("cpu",) and not row_kernel.exporting(ctx) and cpu_kernel_library.available()


# The logits' types the kernels key (narrower floats keep the composition).
TYPES = frozenset(np.dtype(t) for t in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64))


def route(x: jax.Array, *, kernel: Callable[[jax.Array], Any], composition: Callable[[jax.Array], Any]) -> Any:
  """``kernel(x)`` where the kernels run (see the module), ``composition(x)`` elsewhere: the same values. ``x``:
  the logits."""
  if np.dtype(x.dtype) not in TYPES:
    return composition(x)
  return cpu_route.choose(x, (x.ndim - 1,), default=composition, kernel=kernel, trailing=True, usable=usable)


def _key_dtype(dtype: np.dtype) -> np.dtype:
  return np.dtype(np.uint64) if np.dtype(dtype).itemsize == 8 else np.dtype(np.uint32)


# The cut --------------------------------------------------------------------------------------------------------

_cut_p = Primitive("dmljax_sampling_cut")
_cut_p.multiple_results = True


def cut(
  logits: jax.Array, weights: jax.Array | None, k: jax.Array, pi: jax.Array, what: jax.Array, units: mass.Units
) -> tuple[jax.Array, jax.Array, mass.Limbs]:
  """Per row of ``logits`` (``(rows, V)``): the cut ``(t, j)`` (each ``(rows,)``) and the units measured
  (normalized limbs, each ``(rows,)``). ``what``: :data:`COUNT` and/or :data:`MASS` per row; ``k`` in ``[1, V]``
  where counted, ``pi`` (:func:`.mass.numerator`) where the mass is searched, ``weights`` (``(rows, V)``, the
  work type) wherever any row's is. Without ``weights`` (no row's mass searched: top-k alone) nothing is summed and
  the limbs are of a one-entry row's layout, so that rows longer than top-p's exact sums hold are counted too."""
  rows = logits.shape[0]
  if weights is None:
    weights = jnp.zeros((rows, 0), units.dtype)
    units = mass.Units(1, units.dtype)
  per_row = (jnp.asarray(a, jnp.int32) for a in (k, pi, what))
  t, j, total = _cut_p.bind(
    logits, weights, *per_row, fraction_bits=units.fraction_bits, limb_bits=units.bits, limbs=units.sum_limbs
  )
  return t, j, tuple(total[:, i] for i in range(units.sum_limbs))


@_cut_p.def_abstract_eval
def _cut_abstract_eval(logits: Any, weights: Any, k: Any, pi: Any, what: Any, *, limbs: int, **_: Any) -> Any:
  del weights, k, pi, what
  rows = logits.shape[0]
  return [
    logits.update(shape=(rows,), dtype=_key_dtype(logits.dtype), weak_type=False),
    logits.update(shape=(rows,), dtype=np.dtype(np.int32), weak_type=False),
    logits.update(shape=(rows, limbs), dtype=np.dtype(np.int32), weak_type=False),
  ]


# Both calls are lowered as having a side effect, which they do not have, so that XLA leaves them where they are:
# they run inside the per-row loops (:mod:`.each_row`), and in a batch of one row a loop's body reads the whole
# batch, so XLA's loop-invariant code motion hoisted the call out of its loop and ran it even where the loop makes no
# pass (a one-row top_p_mask ran two whole-row searches).


def _cut_lowering(ctx: Any, *operands: Any, fraction_bits: int, limb_bits: int, limbs: int) -> Any:
  del limbs
  return jax.ffi.ffi_lowering(cpu_kernel_library.SAMPLING_CUT_TARGET, has_side_effect=True)(
    ctx, *operands, fraction_bits=np.int64(fraction_bits), limb_bits=np.int64(limb_bits)
  )


# The kept entries -----------------------------------------------------------------------------------------------

_kept_p = Primitive("dmljax_sampling_kept")
_kept_p.multiple_results = True


def kept(logits: jax.Array, t: jax.Array, j: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Per row of ``logits`` (``(rows, V)``): the indices (``(rows, V)`` int32) of its entries through the cut
  ``(t, j)`` (each ``(rows,)``) that are not NaN, ascending, then zeros; and how many (``(rows,)`` int32)."""
  indices, count = _kept_p.bind(logits, t.astype(_key_dtype(logits.dtype)), j.astype(jnp.int32))
  return indices, count


@_kept_p.def_abstract_eval
def _kept_abstract_eval(logits: Any, t: Any, j: Any) -> Any:
  del t, j
  return [
    logits.update(dtype=np.dtype(np.int32), weak_type=False),
    logits.update(shape=logits.shape[:1], dtype=np.dtype(np.int32), weak_type=False),
  ]


def _kept_lowering(ctx: Any, *operands: Any) -> Any:
  return jax.ffi.ffi_lowering(cpu_kernel_library.SAMPLING_KEPT_TARGET, has_side_effect=True)(ctx, *operands)


# Rules both primitives share --------------------------------------------------------------------------------------


def _unavailable(ctx: Any, *operands: Any, **params: Any) -> Any:
  del ctx, operands, params
  raise NotImplementedError("dmljax's sampling kernels run on CPU only (kernel.route chooses them)")


def _batched(primitive: Primitive) -> Callable[..., Any]:
  """A batch is more rows: every operand's mapped axis moved to the front and merged with its rows."""

  def rule(args: Any, dims: Any, **params: Any) -> Any:
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    args = [batching.bdim_at_front(a, d, size) for a, d in zip(args, dims, strict=True)]
    outs = primitive.bind(*(a.reshape(size * a.shape[1], *a.shape[2:]) for a in args), **params)
    return [o.reshape(size, -1, *o.shape[1:]) for o in outs], [0] * len(outs)

  return rule


def _no_tangents(primitive: Primitive) -> Callable[..., Any]:
  """Integer results: their tangents are zero."""

  def rule(primals: Any, tangents: Any, **params: Any) -> Any:
    del tangents
    outs = primitive.bind(*primals, **params)
    return outs, [ad.Zero(jax.typeof(o).to_tangent_aval()) for o in outs]

  return rule


for _primitive, _lowering in ((_cut_p, _cut_lowering), (_kept_p, _kept_lowering)):
  _primitive.def_impl(lambda *args, _p=_primitive, **params: jax.jit(lambda *a: _p.bind(*a, **params))(*args))
  mlir.register_lowering(_primitive, _unavailable)
  mlir.register_lowering(_primitive, _lowering, platform="cpu")
  batching.primitive_batchers[_primitive] = _batched(_primitive)
  ad.primitive_jvps[_primitive] = _no_tangents(_primitive)
