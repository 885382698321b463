"""The transformation matrix: every implementation path under every transformation.

``PATHS`` is one row per implementation path: each ``platform.branch`` branch (forced on CPU, so
that CI runs the code GPUs and TPUs compile), every CPU fast path and its fallback, and the
selection kernels. A new fast path joins the library with a row here. Each row builds its inputs
from a fixed seed, with shapes that select the path, names the call, the NumPy expectation
(tests/reference.py) and how the path shows (functions it must reach, text its program holds).

``TRANSFORMS`` are the columns: plain call, ``jit``, ``vmap`` batched on each argument,
``grad``/``jvp`` (``check_grads``, second order, forward and reverse, on value outputs), sharding
along the operated axis and along another axis on automatic and on explicit mesh axes, and a
``jax.export`` round trip. The default run takes a fixed-seed sample of the product (every row plain and every
column at least twice); the long profile (``-m long``) runs the other cells.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest
from _helpers import assert_bitwise_equal, spy_on, ties
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from reference import ref_arg_reduce, ref_gather_nd, ref_one_hot, ref_reduce, ref_top_k

import dmljax as dml
from dmljax._src import (
  cpu_kernel_library,
  gather_nd,
  halving,
  index_math,
  platform,
  rank_keys,
  reduction_kernels,
  selection,
  trailing_peak,
)
from dmljax._src import reduce as reduce_lib
from dmljax._src.strategies import dispatch, one_pass, peak, sort

I32 = jnp.int32
F32_EPS = float(np.finfo(np.float32).eps)


# Inputs ------------------------------------------------------------------------------------------------------


def _tied(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
  """Small integers as float32: ties everywhere, so every tie rule is exercised."""
  return rng.integers(-3, 4, shape).astype(np.float32)


def _tied_int(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
  """int32 with ties and both extremes: the rank-key paths that integer inputs take."""
  x = rng.integers(-3, 4, shape).astype(np.int32)
  x.flat[0], x.flat[-1] = np.iinfo(np.int32).min, np.iinfo(np.int32).max
  return x


def _tied_nan(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
  x = _tied(rng, shape)
  x[rng.random(shape) < 0.02] = np.nan
  x.flat[0] = -0.0
  return x


def _distinct(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
  """Distinct values half a unit apart (exact in float32): no ties, so selections are differentiable."""
  size = math.prod(shape)
  return ((rng.permutation(size) - size // 2) * 0.5).astype(np.float32).reshape(shape)


def _near_one(rng: np.random.Generator, shape: tuple[int, ...], spread: float = 0.25) -> np.ndarray:
  """Terms of one sign around 1: sums and norms far from 0, so relative tolerances apply."""
  return (1.0 + spread * rng.standard_normal(shape)).astype(np.float32)


# Rows --------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Path:
  """One implementation path.

  id: the row's name. make: inputs from a seeded generator. call: the library call on those
  arrays. expect: the NumPy expectation from the same arrays. branch: the ``platform.branch``
  branch forced (``None``: the platform's own). op_axis/other_axis: the axis of the first
  argument that the operator works along, and another one (``None``: no such axis to shard).
  grad_args: the arguments to differentiate (empty: no value output); grad_make: inputs for the
  gradient check where ``make``'s ties would make the selection non-differentiable. reaches /
  avoids: library functions (module, name) the trace must / must not reach. hlo: text the lowered
  program must contain. rtol: 0 for exact outputs. setup: a context the whole row runs in.
  """

  id: str
  make: Callable[[np.random.Generator], tuple[np.ndarray, ...]]
  call: Callable[..., Any]
  expect: Callable[..., Any]
  branch: platform.Branch | None = None
  strategy: str | None = None
  op_axis: int | None = None
  other_axis: int | None = None
  grad_args: tuple[int, ...] = ()
  grad_make: Callable[[np.random.Generator], tuple[np.ndarray, ...]] | None = None
  grad_eps: float = 1e-3
  reaches: tuple[tuple[Any, str], ...] = ()
  avoids: tuple[tuple[Any, str], ...] = ()
  hlo: tuple[str, ...] = ()
  rtol: float = 0.0
  setup: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext


def _top_k_row(id: str, shape: tuple[int, ...], k: int, axis: int, branch: platform.Branch | None, **kw: Any) -> Path:
  direction = kw.pop("direction", "decreasing")
  make = kw.pop("make", _tied_nan)
  return Path(
    id=id,
    make=lambda rng: (make(rng, shape),),
    call=lambda x: dml.top_k(x, k, axis=axis, direction=direction, index_dtype=I32),
    expect=lambda x: _as_int32(ref_top_k(x, k, axis, direction)),
    branch=branch,
    op_axis=axis % len(shape),
    other_axis=kw.pop("other_axis", 0),
    grad_args=kw.pop("grad_args", (0,)),
    grad_make=lambda rng: (_distinct(rng, shape),),
    # Values half a unit apart keep their order under a 0.05 step (tangents are normal draws), and a step that
    # large keeps the rounding of values up to a few thousand out of the finite differences.
    grad_eps=0.05,
    **kw,
  )


def _arg_row(id: str, shape: tuple[int, ...], axes: tuple[int, ...], branch: platform.Branch | None, **kw: Any) -> Path:
  find_max = id.startswith("argmax")
  direction = kw.pop("direction", "increasing")
  op = dml.argmax if find_max else dml.argmin
  make = kw.pop("make", _tied_nan)
  return Path(
    id=id,
    make=lambda rng: (make(rng, shape),),
    call=lambda x: op(x, axes, ties=ties(direction), keepdims=True, index_dtype=I32),
    expect=lambda x: ref_arg_reduce(x, axes, "max" if find_max else "min", direction).astype(np.int32),
    branch=branch,
    op_axis=axes[-1],
    other_axis=kw.pop("other_axis", 0),
    **kw,
  )


def _reduce_row(
  id: str, function: str, shape: tuple[int, ...], axes: tuple[int, ...], branch: platform.Branch | None, **kw: Any
) -> Path:
  make = kw.pop("make", _near_one)
  exact = function in ("max", "min")
  return Path(
    id=id,
    make=lambda rng: (make(rng, shape),),
    call=lambda x: dml.reduce(x, function, axes, keepdims=True, index_dtype=I32),
    expect=lambda x: ref_reduce(x, function, axes),
    branch=branch,
    op_axis=axes[-1],
    other_axis=kw.pop("other_axis", 0),
    grad_args=kw.pop("grad_args", (0,)),
    rtol=0.0 if exact else 4 * F32_EPS * math.sqrt(math.prod(shape[a] for a in axes)),
    **kw,
  )


def _as_int32(pair: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
  return pair[0], pair[1].astype(np.int32)


@contextlib.contextmanager
def _narrow_lax_top_k() -> Iterator[None]:
  """Rows longer than 16 take the sort that rows longer than int32 can index take (read at trace time)."""
  saved = sort.LAX_TOP_K_LARGEST_INDEX
  sort.LAX_TOP_K_LARGEST_INDEX = 15
  jax.clear_caches()
  try:
    yield
  finally:
    sort.LAX_TOP_K_LARGEST_INDEX = saved
    jax.clear_caches()


def _without_cpu_kernel() -> contextlib.AbstractContextManager[Any]:
  """The CPU table without the compiled kernel: the XLA rows a build without a C++ compiler runs."""
  return platform.choosing(cpu_kernel=False)


def _strategy(name: str) -> Callable[[], contextlib.AbstractContextManager[Any]]:
  """A top-k strategy forced by name, Pallas kernels in interpret mode."""
  return lambda: platform.choosing(top_k=name, interpret=True)


# What shows that argmin/argmax run the compiled CPU kernel (its FFI call in the program); where the package was built
# without it, the halving it falls back to.
_ARG_KERNEL_HLO = (cpu_kernel_library.ARG_EXTREME_TARGET,) if cpu_kernel_library.available() else ()
_ARG_KERNEL_REACHES = ((reduction_kernels, "arg_extreme"),) if cpu_kernel_library.available() else ()
# Over axes that are not trailing, the CPU branch without the kernel is the variadic reduction every platform runs:
# those rows force the CPU branch only where the kernel makes it a program of its own.
_ARG_KERNEL_BRANCH: platform.Branch | None = "cpu" if cpu_kernel_library.available() else None

_L2_SCALE = np.float32(2.0**-46)  # ||x * scale|| < 2**-39: the gradient's rescaled branch


def _gather_row(id: str, x_shape: tuple[int, ...], i_shape: tuple[int, ...], batch_dims: int, **kw: Any) -> Path:
  deterministic = kw.pop("deterministic", False)

  def make(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    depth = i_shape[-1]
    high = np.array(x_shape[batch_dims : batch_dims + depth])
    indices = rng.integers(-high, high, i_shape).astype(np.int32)  # negative count from the end
    indices.reshape(-1, depth)[:2] = indices.reshape(-1, depth)[-1]  # duplicates, whose gradients add
    return _distinct(rng, x_shape), indices

  return Path(
    id=id,
    make=make,
    call=lambda x, i: dml.gather_nd(x, i, batch_dims=batch_dims, deterministic=deterministic),
    expect=lambda x, i: ref_gather_nd(x, i, batch_dims),
    grad_args=(0,),
    **kw,
  )


_ONE_HOT = dml.OneHotDesc(
  dml.TensorDesc(dml.DataType.INT32, (8, 1)),
  dml.TensorDesc(dml.DataType.FLOAT32, (1, 2)),
  dml.TensorDesc(dml.DataType.FLOAT32, (8, 16)),
  axis=1,
)

PATHS: list[Path] = [
  # top_k: every row of the strategy table (strategies.dispatch) on its platform's branch, the sort for rows
  # longer than lax.top_k indexes; the sharding columns run the
  # per-shard selection and merge (selection.py) around them.
  # CPU: one lax.top_k on the canonical float where no staged selection pays, the chunked two-stage
  # selection, k max passes, and lax.top_k on the key's total-order float view.
  _top_k_row(
    "top_k/cpu_plain_float",
    (6, 40),
    5,
    1,
    "cpu",
    strategy="cpu_float_view",
    reaches=((rank_keys, "canonical_float"),),
    setup=_without_cpu_kernel,
  ),
  _top_k_row(
    "top_k/cpu_plain_float_increasing",
    (512, 64),
    4,
    1,
    "cpu",
    direction="increasing",
    strategy="cpu_float_view",
    setup=_without_cpu_kernel,
  ),
  _top_k_row(
    "top_k/cpu_small_int_keys",
    (6, 40),
    5,
    1,
    "cpu",
    make=_tied_int,
    grad_args=(),
    strategy="cpu_key_view",
    setup=_without_cpu_kernel,
  ),
  _top_k_row(
    "top_k/cpu_chunked",
    (4, 4096),
    16,
    -1,
    "cpu",
    make=_tied_int,
    grad_args=(),
    strategy="cpu_chunked",
    hlo=("sort",),
    setup=_without_cpu_kernel,
  ),
  _top_k_row(
    "top_k/cpu_chunked_float", (32, 512), 4, -1, "cpu", make=_tied, strategy="cpu_chunked", setup=_without_cpu_kernel
  ),
  _top_k_row("top_k/cpu_extracted", (256, 64), 2, 1, "cpu", strategy="cpu_extracted", setup=_without_cpu_kernel),
  # The compiled CPU kernel (an FFI call; exported programs hold the rows above), forced so that the rows are the
  # same where the package was built without it (there its primitive lowers to those rows; tests/test_cpu_kernel.py
  # checks that the table picks it).
  _top_k_row(
    "top_k/cpu_kernel",
    (6, 40),
    5,
    1,
    "cpu",
    setup=_strategy("cpu_kernel"),
    strategy="cpu_kernel",
    hlo=(cpu_kernel_library.TARGET,) if cpu_kernel_library.available() else (),
  ),
  _top_k_row(
    "top_k/cpu_kernel_int_increasing",
    (4, 4096),
    16,
    -1,
    "cpu",
    make=_tied_int,
    grad_args=(),
    direction="increasing",
    setup=_strategy("cpu_kernel"),
    strategy="cpu_kernel",
  ),
  # CUDA: XLA's TopK kernel on kernel keys (NaN-free floats; chosen by name, since the one-pass kernel runs under
  # jit where it applies, and exported programs hold it), one (key, index) reduction for k == 1, the chunked
  # selection whose stages are sorts (k > 16), short rows sort their keys.
  _top_k_row(
    "top_k/cuda_kernel_keys",
    (4, 1024),
    5,
    1,
    "cuda",
    setup=_strategy("gpu_kernel"),
    strategy="gpu_kernel",
    hlo=("top_k",),
  ),
  _top_k_row(
    "top_k/cuda_kernel_keys_increasing",
    (4, 1024),
    3,
    1,
    "cuda",
    direction="increasing",
    setup=_strategy("gpu_kernel"),
    strategy="gpu_kernel",
  ),
  _top_k_row("top_k/cuda_top_1", (6, 1024), 1, 1, "cuda", strategy="peak_reduction", hlo=("stablehlo.reduce",)),
  _top_k_row("top_k/cuda_chunked_sorts", (4, 2048), 20, 1, "cuda", strategy="chunked_sorts"),
  _top_k_row(
    "top_k/cuda_chunked_int_keys", (4, 2048), 20, 1, "cuda", make=_tied_int, grad_args=(), strategy="chunked_sorts"
  ),
  _top_k_row("top_k/cuda_short_rows", (6, 40), 5, 1, "cuda", strategy="sorted_keys", hlo=("top_k",)),
  # TPU: XLA's TPU TopK on keys every comparison orders alike (the total-order view for 32-bit integers), the
  # values read back from the keys or fetched by the DMA kernel (interpret mode), any rank selected as a matrix;
  # short rows sort keys and values together.
  _top_k_row("top_k/tpu_kernel_keys", (4, 512), 5, 1, "tpu", strategy="tpu_kernel", hlo=("top_k",)),
  _top_k_row("top_k/tpu_int_keys", (4, 512), 5, 1, "tpu", make=_tied_int, grad_args=(), strategy="tpu_kernel"),
  _top_k_row("top_k/tpu_kernel_rank3", (2, 4, 300), 6, -1, "tpu", strategy="tpu_kernel", hlo=("top_k",)),
  _top_k_row("top_k/tpu_short_rows", (6, 40), 5, 1, "tpu", strategy="sorted_with_values", hlo=("stablehlo.sort",)),
  _top_k_row("top_k/default_int_keys", (6, 40), 5, 1, "default", strategy="sorted_keys", hlo=("top_k",)),
  _top_k_row(
    "top_k/sort_past_int32",
    (4, 40),
    3,
    1,
    None,
    setup=_narrow_lax_top_k,
    reaches=((sort, "wide_rows"),),
    hlo=("stablehlo.sort",),
  ),
  # CUDA's one-pass Pallas kernel (interpret mode): rows of three blocks, the last one partly past the row's end.
  _top_k_row(
    "top_k/cuda_one_pass",
    (4, 1100),
    5,
    1,
    "cuda",
    setup=_strategy("one_pass"),
    strategy="one_pass",
    reaches=((one_pass, "kernel_top_k"),),
  ),
  _top_k_row("top_k/increasing_axis0", (24, 8), 4, 0, "cpu", direction="increasing", other_axis=1),
  # argmin/argmax on CPU in a program of one device, over axes next to each other (trailing or not: the kernel's
  # columns), both tie rules: the compiled kernel (csrc/cpu_arg_extreme.cc) where the library is loaded, its
  # composition where it is not (these rows then check that) and in exported programs.
  _arg_row("argmax/cpu_kernel", (6, 1024), (1,), "cpu", reaches=_ARG_KERNEL_REACHES, hlo=_ARG_KERNEL_HLO),
  _arg_row("argmin/cpu_kernel_last", (6, 1024), (1,), "cpu", direction="decreasing", hlo=_ARG_KERNEL_HLO),
  _arg_row("argmax/cpu_kernel_leading_axis", (96, 6), (0,), _ARG_KERNEL_BRANCH, other_axis=1, hlo=_ARG_KERNEL_HLO),
  _arg_row(
    "argmin/cpu_kernel_middle_axes_last",
    (4, 8, 10, 3),
    (1, 2),
    _ARG_KERNEL_BRANCH,
    direction="decreasing",
    reaches=_ARG_KERNEL_REACHES,
    hlo=_ARG_KERNEL_HLO,
  ),
  _arg_row("argmax/cpu_kernel_int", (6, 1024), (1,), "cpu", make=_tied_int, hlo=_ARG_KERNEL_HLO),
  # Without the kernel (a build without a C++ compiler), over trailing axes on CPU: on one device REDUCE's halving
  # (blocks' peaks, then the peak's block read again; rows too short for blocks: two passes), on several devices or
  # under a forced top-k strategy a top-1 selection (last=True for DECREASING); one variadic reduction of (key,
  # index) pairs elsewhere (GPUs, TPUs, other axes, explicitly sharded axes: the sharding columns).
  _arg_row(
    "argmax/cpu_blocks", (6, 1024), (1,), "cpu", reaches=((halving, "peak_position"),), setup=_without_cpu_kernel
  ),
  _arg_row("argmin/cpu_blocks_last", (6, 1024), (1,), "cpu", direction="decreasing", setup=_without_cpu_kernel),
  _arg_row("argmax/leading_axis", (96, 5), (0,), None, reaches=((peak, "peak_index"),), setup=_without_cpu_kernel),
  _arg_row(
    "argmax/cpu_two_passes", (6, 40), (1,), "cpu", reaches=((halving, "_first_holding"),), setup=_without_cpu_kernel
  ),
  _arg_row(
    "argmax/cpu_top1",
    (6, 40),
    (1,),
    "cpu",
    setup=_strategy("cpu_key_view"),
    reaches=((selection, "top_k_last_axis"),),
    avoids=((halving, "peak_position"),),
  ),
  _arg_row(
    "argmax/cuda_reduction",
    (6, 40),
    (1,),
    "cuda",
    reaches=((peak, "peak_index"),),
    avoids=((selection, "top_k_last_axis"),),
  ),
  _arg_row(
    "argmin/cuda_reduction_last", (6, 40), (1,), "cuda", direction="decreasing", reaches=((peak, "peak_index"),)
  ),
  _arg_row(
    "argmax/tpu_reduction",
    (6, 40),
    (1,),
    "tpu",
    reaches=((peak, "peak_index"),),
    avoids=((selection, "top_k_last_axis"),),
  ),
  _arg_row(
    "argmin/tpu_two_axes",
    (4, 8, 10),
    (1, 2),
    "tpu",
    other_axis=0,
    reaches=((peak, "peak_index"),),
    avoids=((selection, "top_k_last_axis"),),
  ),
  _arg_row(
    "argmin/cpu_top1_last",
    (6, 40),
    (1,),
    "cpu",
    direction="decreasing",
    setup=_strategy("cpu_key_view"),
    reaches=((selection, "local_top_k"),),
  ),
  _arg_row("argmin/cpu_trailing_pair", (4, 8, 10), (1, 2), "cpu", other_axis=0, setup=_without_cpu_kernel),
  _arg_row("argmin/non_trailing", (8, 6, 8), (0, 2), None, other_axis=1, reaches=((peak, "peak_index"),)),
  _arg_row("argmax/non_trailing_last", (8, 6, 8), (0, 1), None, direction="decreasing", other_axis=2),
  # reduce: SUM over leading axes as a matrix-vector product on CPU, MULTIPLY by halving rows on CPU, and
  # their plain forms; L2's two gradient branches; LOG_SUM_EXP; MAX/MIN with NaN propagation.
  _reduce_row(
    "sum/cpu_by_dot", "sum", (1024, 64), (0,), "cpu", other_axis=1, reaches=((reduce_lib, "_sum_over_leading_axes"),)
  ),
  _reduce_row("sum/default_by_dot", "sum", (1024, 64), (0,), "default", other_axis=1),
  _reduce_row("sum/all_axes", "sum", (8, 40), (0, 1), None),
  _reduce_row("average/two_axes", "average", (8, 6, 8), (0, 2), None, other_axis=1),
  _reduce_row(
    "multiply/cpu_product_tree_tangent",
    "multiply",
    (4, 64),
    (1,),
    None,
    make=lambda rng, shape: _near_one(rng, shape, 0.01),
  ),
  _reduce_row(
    "multiply/default_plain", "multiply", (4, 64), (1,), "default", make=lambda rng, shape: _near_one(rng, shape, 0.01)
  ),
  _reduce_row(
    "multiply/leading_axes", "multiply", (64, 8), (0,), None, make=lambda rng, shape: _near_one(rng, shape, 0.01)
  ),
  _reduce_row("l2/normal", "l2", (6, 64), (1,), None),
  Path(
    id="l2/rescaled",
    make=lambda rng: (_near_one(rng, (6, 64)),),
    call=lambda x: dml.reduce(x * _L2_SCALE, "l2", (1,), keepdims=True, index_dtype=I32) / _L2_SCALE,
    expect=lambda x: ref_reduce(x, "l2", (1,)),
    op_axis=1,
    other_axis=0,
    grad_args=(0,),
    rtol=4 * F32_EPS * 8,
  ),
  _reduce_row("log_sum_exp", "log_sum_exp", (6, 64), (1,), None),
  _reduce_row("max/nan_long_rows", "max", (4, 2048), (1,), None, make=_tied_nan, grad_args=()),
  _reduce_row("min/nan_all_axes", "min", (8, 16), (0, 1), None, make=_tied_nan, grad_args=()),
  _reduce_row("max/distinct", "max", (8, 24), (1,), None, make=_distinct),
  # gather_nd: the plain gather, the deterministic (sorted, segment-summed) gradient, batch_dims.
  _gather_row("gather_nd/plain", (8, 6, 8), (4, 2), 0, op_axis=0, other_axis=2),
  _gather_row(
    "gather_nd/deterministic",
    (8, 6, 8),
    (4, 2),
    0,
    deterministic=True,
    op_axis=0,
    other_axis=2,
    # The values are the plain gather's (read as bits); the deterministic formulation is the derivative's.
    reaches=((gather_nd, "_float_values"),),
  ),
  _gather_row("gather_nd/batch_dims", (8, 6, 4), (8, 3, 1), 1, op_axis=1, other_axis=0),
  # The gather clamps in CLIP mode; unsigned indices are capped first (index_math.wrap_for_clipping_gather).
  Path(
    id="gather_nd/unsigned_far_out_of_range",
    make=lambda rng: (
      _distinct(rng, (8, 6)),
      rng.choice(np.array([0, 3, 7, 8, 2**31, 2**32 - 1], np.uint32), (5, 1)),
    ),
    call=lambda x, i: dml.gather_nd(x, i),
    expect=lambda x, i: ref_gather_nd(x, i, 0),
    op_axis=0,
    other_axis=1,
    grad_args=(0,),
    reaches=((index_math, "wrap_for_clipping_gather"),),
  ),
  # one_hot (descriptor path): the values are differentiable.
  Path(
    id="one_hot",
    make=lambda rng: (
      rng.integers(-20, 20, (8, 1)).astype(np.int32),
      rng.standard_normal((1, 2)).astype(np.float32),
    ),
    call=lambda i, v: dml.execute(_ONE_HOT, i, v),
    expect=lambda i, v: ref_one_hot(i, v, 16, 1),
    other_axis=0,
    grad_args=(1,),
  ),
]


# Columns -----------------------------------------------------------------------------------------------------


def _seed(*parts: object) -> np.random.Generator:
  return np.random.default_rng(zlib.crc32("/".join(map(str, parts)).encode()))


def _check(got: Any, want: Any, rtol: float, what: str) -> None:
  """Exact outputs (selections of the input, indices) by their bits; computed reductions within ``rtol``."""
  got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
  assert len(got_leaves) == len(want_leaves), what
  for g, w in zip(got_leaves, want_leaves, strict=True):
    g, w = np.asarray(g), np.asarray(w)
    assert g.dtype == w.dtype and g.shape == w.shape, f"{what}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
    if rtol:
      np.testing.assert_allclose(g, w, rtol=rtol, atol=0, err_msg=what)
    else:
      assert_bitwise_equal(g, w, what)


def _plain(row: Path, args: tuple[np.ndarray, ...]) -> None:
  _check(row.call(*map(jnp.asarray, args)), row.expect(*args), row.rtol, "plain")


def _jit(row: Path, args: tuple[np.ndarray, ...]) -> None:
  _check(jax.jit(row.call)(*args), row.expect(*args), row.rtol, "jit")


def _vmap(position: int) -> Callable[[Path, tuple[np.ndarray, ...]], None]:
  def run(row: Path, args: tuple[np.ndarray, ...]) -> None:
    other = row.make(_seed(row.id, "vmap"))[position]
    batched = list(args)
    batched[position] = np.stack([args[position], other])
    in_axes = tuple(0 if a == position else None for a in range(len(args)))
    got = jax.vmap(row.call, in_axes=in_axes)(*batched)
    second = list(args)
    second[position] = other
    want = jax.tree.map(lambda a, b: np.stack([a, b]), row.expect(*args), row.expect(*second))
    _check(got, want, row.rtol, f"vmap over argument {position}")

  return run


def _grad(row: Path, args: tuple[np.ndarray, ...]) -> None:
  """Second-order forward and reverse derivatives of the value outputs against finite differences."""
  if row.grad_make is not None:
    args = row.grad_make(_seed(row.id, "grad"))

  def values(*diff: jax.Array) -> jax.Array:
    full = list(map(jnp.asarray, args))
    for position, a in zip(row.grad_args, diff, strict=True):
      full[position] = a
    out = row.call(*full)
    return out[0] if isinstance(out, tuple) else out

  diff_args = tuple(jnp.asarray(args[a]) for a in row.grad_args)
  jax.test_util.check_grads(values, diff_args, order=2, modes=("fwd", "rev"), eps=row.grad_eps, atol=2e-2, rtol=2e-2)


def _mesh(size: int, explicit: bool) -> jax.sharding.Mesh:
  axis_type = AxisType.Explicit if explicit else AxisType.Auto
  return jax.make_mesh((size,), ("d",), axis_types=(axis_type,), devices=jax.devices()[:size])


def _placed(row: Path, args: tuple[np.ndarray, ...], explicit: bool, axis: int) -> tuple[Any, list[Any], str]:
  """The row's call, jitted for the first argument split along ``axis`` over as many devices as divide it."""
  size = next(n for n in (8, 4, 2) if args[0].shape[axis] % n == 0)
  mesh = _mesh(size, explicit)
  spec = P(*([None] * axis), "d")
  shardings = (NamedSharding(mesh, spec), *(NamedSharding(mesh, P()) for _ in args[1:]))
  where = f"{'explicit' if explicit else 'auto'} mesh of {size}, axis {axis}"
  if explicit:
    return jax.jit(row.call), [jax.device_put(a, s) for a, s in zip(args, shardings, strict=True)], where
  return jax.jit(row.call, in_shardings=shardings), list(args), where


def _sharded(explicit: bool, which: str) -> Callable[[Path, tuple[np.ndarray, ...]], None]:
  def run(row: Path, args: tuple[np.ndarray, ...]) -> None:
    axis = row.op_axis if which == "op" else row.other_axis
    assert axis is not None
    fn, placed, where = _placed(row, args, explicit, axis)
    _check(fn(*placed), row.expect(*args), row.rtol, where)

  return run


# Unforced rows export for every platform, so each platform.branch branch is lowered (and the CPU one runs).
_PLATFORMS = ("cpu", "cuda", "tpu")


def _export(row: Path, args: tuple[np.ndarray, ...]) -> None:
  specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
  platforms = _PLATFORMS if row.branch is None else None
  exported = jax.export.export(jax.jit(row.call), platforms=platforms)(*specs)
  restored = jax.export.deserialize(exported.serialize())
  _check(restored.call(*args), row.expect(*args), row.rtol, "export")


TRANSFORMS: dict[str, Callable[[Path, tuple[np.ndarray, ...]], None]] = {
  "plain": _plain,
  "jit": _jit,
  "vmap0": _vmap(0),
  "vmap1": _vmap(1),
  "grad": _grad,
  "auto_op": _sharded(False, "op"),
  "auto_other": _sharded(False, "other"),
  "explicit_op": _sharded(True, "op"),
  "explicit_other": _sharded(True, "other"),
  "export": _export,
}


def _applies(row: Path, column: str) -> bool:
  arity = len(row.make(_seed(row.id)))
  if column == "vmap1":
    return arity > 1
  if column == "grad":
    return bool(row.grad_args)
  if column.endswith("_op"):
    return row.op_axis is not None
  if column.endswith("_other"):
    return row.other_axis is not None
  return True


# Sampling: every row runs plain (its expectation) and, with the path check, its trace; of the other cells
# a fixed-seed sample, drawn so that every row and every column is present, plus the cells that once failed.
_SAMPLE = 0.1
_ALWAYS = {
  # The non-CPU branch on automatic axes: the selection in device-count chunks (TPUs cannot run custom_partitioning).
  ("top_k/default_int_keys", "auto_op"),
  # Sharded selection of rows past lax.top_k's int32 indices: shards used to return int32 indices.
  ("top_k/sort_past_int32", "auto_op"),
  ("top_k/sort_past_int32", "explicit_op"),
  # Finite differences of selections with values in the thousands.
  ("top_k/cpu_chunked_float", "grad"),
}


def _sample(cells: list[tuple[Path, str]]) -> list[bool]:
  """Which cells the default run takes (the others are the long profile's)."""
  rng = np.random.default_rng(20261123)
  keep = [column == "plain" or (row.id, column) in _ALWAYS or rng.random() < _SAMPLE for row, column in cells]
  for column in TRANSFORMS:  # every column at least twice
    missing = [n for n, (_, c) in enumerate(cells) if c == column and not keep[n]]
    while sum(keep[n] for n, (_, c) in enumerate(cells) if c == column) < 2 and missing:
      keep[missing.pop(int(rng.integers(len(missing))))] = True
  return keep


ALL_CELLS = [(row, column) for row in PATHS for column in TRANSFORMS if _applies(row, column)]
CELLS = [cell for cell, k in zip(ALL_CELLS, _sample(ALL_CELLS), strict=True) if k]
_PARAMS = [
  pytest.param(row, column, id=f"{row.id}-{column}", marks=() if k else pytest.mark.long)
  for (row, column), k in zip(ALL_CELLS, _sample(ALL_CELLS), strict=True)
]


@pytest.fixture(scope="module", autouse=True)
def _platform_choice_restored() -> Iterator[None]:
  yield
  platform.force(None)


@pytest.mark.parametrize(("row", "column"), _PARAMS)
def test_matrix(row: Path, column: str) -> None:
  # A row's calls are its own functions, traced only under its branch; dmljax's jitted entry points take the
  # choice as a static argument, so nothing traced under another branch is reused.
  platform.force(row.branch)
  with row.setup():
    TRANSFORMS[column](row, row.make(_seed(row.id)))


def test_matrix_covers_every_row_and_column() -> None:
  assert _ALWAYS <= {(row.id, column) for row, column in CELLS}
  assert {row.id for row, _ in CELLS} == {row.id for row in PATHS}
  assert {column for _, column in CELLS} == set(TRANSFORMS)
  assert len({row.id for row in PATHS}) == len(PATHS)


def _spy_on_strategies(monkeypatch: pytest.MonkeyPatch) -> list[str]:
  """Records the name of every top-k strategy the dispatch table picks."""
  picked: list[str] = []
  original = dispatch.strategy

  def spy(*args: Any) -> Any:
    chosen = original(*args)
    picked.append(chosen.name)
    return chosen

  monkeypatch.setattr(dispatch, "strategy", spy)
  return picked


@pytest.mark.parametrize("row", PATHS, ids=[row.id for row in PATHS])
def test_path_is_taken(row: Path, monkeypatch: pytest.MonkeyPatch) -> None:
  """The row's inputs select its path: the trace reaches (or avoids) the named functions and picks the named
  strategy, and the program holds its text."""
  reached = spy_on(row.reaches + row.avoids, monkeypatch)
  picked = _spy_on_strategies(monkeypatch)
  platform.force(row.branch)
  with row.setup():
    jax.clear_caches()  # trace afresh, through the spies
    args = row.make(_seed(row.id))
    text = jax.jit(row.call).lower(*args).as_text()
  assert {name for _, name in row.reaches} <= reached, reached
  assert not {name for _, name in row.avoids} & reached, reached
  if row.strategy is not None:
    assert set(picked) == {row.strategy}, picked
  for fragment in row.hlo:
    assert fragment in text, fragment


@pytest.mark.parametrize("row", [row for row in PATHS if row.branch == "cpu"], ids=lambda row: row.id)
def test_forcing_a_branch_changes_the_program(row: Path) -> None:
  """``platform.force`` really swaps the implementation: the two branches lower to different programs."""
  args = row.make(_seed(row.id))
  texts = {}
  for branch in ("cpu", "default"):
    platform.force(branch)
    texts[branch] = jax.jit(lambda *a: row.call(*a)).lower(*args).as_text()  # a function of its own per branch
  assert texts["cpu"] != texts["default"]


# (row, explicit axes, functions the partitioned program must reach, text it must not hold), sharded along the
# operated axis: the per-shard selection and merge (a custom_partitioning rule on automatic axes on CPU, a
# shard_map on explicit ones), the selection in device-count chunks on automatic axes elsewhere (no Python
# partitioning rule in the program), argmin/argmax's top-1 selection per device over one or several trailing axes
# (the latter flattening each device's block), MULTIPLY's plain product there.
_SHARDED_PATHS = [
  ("top_k/cpu_plain_float", False, ((selection, "_per_shard_top_k"),), ()),
  ("top_k/default_int_keys", False, ((selection, "_chunked_top_k"),), ("CustomSPMDPartitioning",)),
  ("top_k/cpu_plain_float", True, ((selection, "_per_shard_top_k"),), ()),
  ("top_k/default_int_keys", True, ((selection, "_per_shard_top_k"),), ()),
  ("argmax/cpu_top1", False, ((selection, "_per_shard_top_k"),), ()),
  ("argmax/cpu_top1", True, ((selection, "_per_shard_top_k"),), ()),
  ("argmin/cpu_trailing_pair", False, ((trailing_peak, "_per_shard"),), ()),
  ("argmin/cpu_trailing_pair", True, ((trailing_peak, "_per_shard"),), ()),
  ("multiply/cpu_product_tree_tangent", True, (), ("stablehlo.slice",)),
]


@pytest.mark.parametrize(
  ("row_id", "explicit", "reaches", "lacks"),
  _SHARDED_PATHS,
  ids=[f"{r}-{'explicit' if e else 'auto'}" for r, e, _, _ in _SHARDED_PATHS],
)
def test_sharded_path_is_taken(
  row_id: str, explicit: bool, reaches: Any, lacks: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
  (row,) = [row for row in PATHS if row.id == row_id]
  reached = spy_on(reaches, monkeypatch)
  platform.force(row.branch)
  jax.clear_caches()
  args = row.make(_seed(row.id))
  assert row.op_axis is not None
  fn, placed, _ = _placed(row, args, explicit, row.op_axis)
  lowered = fn.lower(*placed)
  lowered.compile()  # custom_partitioning's rule runs when XLA partitions the program
  assert {name for _, name in reaches} <= reached, reached
  for fragment in lacks:
    assert fragment not in lowered.as_text(), fragment


@pytest.mark.parametrize("branch", ["cpu", "default"])
def test_multiply_value_is_xla_s_product_and_its_tangent_the_product_tree(branch: platform.Branch) -> None:
  """MULTIPLY's value is one reduction on every platform; on CPU its tangent halves the rows (a product tree)."""
  x = _near_one(_seed("multiply", branch), (4, 64), 0.01)
  with platform.forced(branch):
    value = jax.jit(lambda x: dml.reduce(x, "multiply", 1)).lower(x).as_text()
    tangent = jax.jit(lambda x: jax.jvp(lambda x: dml.reduce(x, "multiply", 1), (x,), (x,))[1]).lower(x).as_text()
  assert "stablehlo.slice" not in value and "stablehlo.reduce" in value
  halves = "tensor<4x32xf32>"  # the first level of the tree: 64 columns multiplied pairwise into 32
  assert (halves in tangent) == (branch == "cpu")
