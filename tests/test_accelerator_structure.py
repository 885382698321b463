"""Issue 17's structure targets, pinned on programs compiled for an H100 SXM and a TPU v5e without the hardware.

Each case compiles dmljax's call and the native JAX one (once per module, :func:`_summary`) with
:mod:`benchmarks.compiled` and asserts on what XLA made of them: whole-row sorts (a sort whose segment holds
the whole row), kernel launches, and the estimate (the project's roofline on the H100, XLA's
``optimal_seconds`` on the TPU).

* H100: top_k float32/bfloat16 with k <= 16, largest first, on rows of 1024 or more: no whole-row sort, at
  most 3 launches, an estimate within 3x the native single TopK kernel's. Every other top_k on such rows
  (integer types, float16, float64 with x64, k up to 1024, INCREASING): no whole-row sort, at most 12
  launches, an estimate no higher than native's. argmin/argmax, one_hot, reductions and gather_nd: no more
  launches than native. The one-pass Pallas kernel of small-k selections compiles for sm_90 (through Mosaic GPU
  on the jax the ``aot`` extra pins, Triton before jax 0.11) and is what such programs call.
* TPU v5e: top_k float32/bfloat16: no whole-row sort, ``optimal_seconds`` within 3x native's. Other types on
  rows of 1024 or more: no whole-row sort and no more than native's. argmin/argmax, one_hot, reductions,
  gather_nd: within 1.05x native's.

Skipped, with the reason, where the compile-only packages are missing (the normal test venv); ``.ci/run``
runs them in a venv of their own (``pip install -e ".[aot]"``). Nothing runs on a device.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path
from typing import Any

import jax
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accelerator_cases import FIXED, FIXED_TPU, OPS, TYPES, WIDE, Op, TopK, sample

from benchmarks.compiled import availability, launches

GPU_PROBLEM = availability.problem("gpu")
TPU_PROBLEM = availability.problem("tpu")
needs_gpu = pytest.mark.skipif(GPU_PROBLEM is not None, reason=f"no H100 compile: {GPU_PROBLEM}")
needs_tpu = pytest.mark.skipif(TPU_PROBLEM is not None, reason=f"no TPU compile: {TPU_PROBLEM}")

H100_TOP_K = FIXED + sample(12, seed=17)
# 64-bit types left out on TPU (the issue sets no target there). Beyond XLA's TPU TopK (k > 256) the selection is
# staged sorts, whose estimate misses the target (below).
TPU_K_LIMIT = 256
_TPU_SAMPLE = FIXED_TPU + sample(3, seed=18, types=tuple(t for t in TYPES if t not in WIDE))
TPU_TOP_K = tuple(case for case in _TPU_SAMPLE if case.k <= TPU_K_LIMIT)
TPU_TOP_K_BEYOND_KERNEL = (
  *(case for case in _TPU_SAMPLE if case.k > TPU_K_LIMIT),
  TopK("float32", (16, 32000), 1024),
)


def _fast_on_h100(case: TopK) -> bool:
  return case.dtype in ("float32", "bfloat16") and case.k <= 16 and not case.increasing


@functools.cache
def _summary(target: str, case: TopK | Op, which: str) -> Any:
  """The compiled figures of ``case``'s dmljax or native program on ``target`` (compiled once per session)."""
  from benchmarks.compiled import devices, program

  device = devices.devices(target)[0]
  fn = case.dmljax() if which == "dmljax" else case.native()
  wide = jax.enable_x64(True) if case.x64 else contextlib.nullcontext()
  with wide:
    specs = [devices.place(shape, jax.numpy.dtype(dtype), device) for shape, dtype in case.inputs]
    return program.compile_and_summarize(fn, *specs, row=case.row)


def _describe(s: Any) -> str:
  sorts = ", ".join(f"{t.kind} of {t.length} ({'/'.join(t.dtypes)})" for t in s.sorts) or "none"
  estimate = "none" if s.estimate_s is None else f"{s.estimate_s * 1e6:.1f} us"
  count = f"{s.launches} launches" if s.kind == "gpu" else f"{s.launches} HLO ops"
  return f"{count}, sorts: {sorts}, custom calls {s.custom_calls}, estimate {estimate}"


class _Figures:
  """The figures the assertions read (plain numbers, so that a failure prints the message, not the summary)."""

  def __init__(self, summary: Any) -> None:
    self.launches: int = summary.launches
    self.whole_row_sorts: int = summary.whole_row_sorts
    self.estimate_s: float | None = summary.estimate_s


def _pair(target: str, case: TopK | Op) -> tuple[_Figures, _Figures, str]:
  mine, native = _summary(target, case, "dmljax"), _summary(target, case, "native")
  said = f"{case} on {target}: dmljax {_describe(mine)}; native {_describe(native)}"
  return _Figures(mine), _Figures(native), said


@needs_gpu
@pytest.mark.parametrize("case", [c for c in H100_TOP_K if _fast_on_h100(c)], ids=str)
def test_h100_top_k_f32_bf16_small_k_is_one_pass(case: TopK) -> None:
  mine, native, said = _pair("h100", case)
  assert mine.whole_row_sorts == 0, said
  assert mine.launches <= 3, said
  assert mine.estimate_s <= 3 * native.estimate_s, said


@needs_gpu
@pytest.mark.parametrize("case", [c for c in H100_TOP_K if not _fast_on_h100(c)], ids=str)
def test_h100_other_top_k_sorts_no_whole_row(case: TopK) -> None:
  mine, native, said = _pair("h100", case)
  assert mine.whole_row_sorts == 0, said
  assert mine.launches <= 12, said
  assert mine.estimate_s <= native.estimate_s, said


# The one-pass Pallas kernel: two segments' kernels and their merge (64 rows); one program a row (1024 rows).
ONE_PASS_CASES = (TopK("float32", (64, 131072), 8), TopK("float32", (1024, 4096), 16, increasing=True))


def _pallas_call() -> str:
  """The custom call of the Pallas backend the CUDA kernels compile through on this jax."""
  from dmljax._src.strategies import one_pass

  return launches.MOSAIC_GPU if one_pass.cuda_backend() == "mosaic_gpu" else launches.TRITON


@needs_gpu
@pytest.mark.parametrize("case", ONE_PASS_CASES, ids=str)
def test_h100_top_k_small_k_is_the_one_pass_pallas_kernel(case: TopK) -> None:
  """Compiled for sm_90, not in interpret mode: the program calls the Pallas kernel (a Mosaic GPU call that XLA
  compiled through to its thunks, ptxas included), sorts nothing, and moves little more than the input once."""
  from dmljax._src.strategies import one_pass

  mine = _summary("h100", case, "dmljax")
  said = f"{case}: {_describe(mine)}"
  assert mine.from_thunks, said
  assert mine.custom_calls.get(f"{_pallas_call()} ({one_pass.KERNEL_NAME})") == 1, said
  assert mine.custom_calls.get(f"{_pallas_call()} ({one_pass.MERGE_NAME})", 0) == (case.shape[0] < 1024), said
  assert not mine.sorts, said
  input_bytes = case.shape[0] * case.shape[1] * jax.numpy.dtype(case.dtype).itemsize
  assert input_bytes <= mine.hbm_bytes <= 1.01 * input_bytes, said


@needs_gpu
def test_h100_target_at_compute_capability_7_5_selects_without_the_kernel(tmp_path: Path) -> None:
  """The kernels are for Ampere and newer (XLA compiles Triton calls for those only, and Mosaic GPU is for those):
  for the H100's description at a T4's compute capability, top_k takes XLA's selection and compiles."""
  import re

  from benchmarks.compiled import devices

  text, count = re.subn(
    r"(cuda_compute_capability \{\s*major: )9(\s*minor: )0", r"\g<1>7\g<2>5", devices.H100_TARGET.read_text()
  )
  assert count == 1
  target = tmp_path / "sm75.txtpb"
  target.write_text(text)
  device = devices.gpu_topology(target=target).devices[0]
  spec = devices.place((64, 131072), "float32", device)
  # Compiled without the harness's cost-model statistics, which XLA keeps for newer GPUs only.
  compiled = jax.jit(TopK("float32", (64, 131072), 8).dmljax()).lower(spec).compile()
  assert not any(call in compiled.as_text() for call in launches.PALLAS) and "__gpu$TopK" in compiled.as_text()


@needs_gpu
@pytest.mark.parametrize("case", OPS, ids=str)
def test_h100_other_operators_launch_no_more_than_native(case: Op) -> None:
  mine, native, said = _pair("h100", case)
  assert mine.launches <= native.launches, said


@needs_tpu
@pytest.mark.parametrize("case", TPU_TOP_K, ids=str)
def test_tpu_v5e_top_k(case: TopK) -> None:
  mine, native, said = _pair("tpu-v5e", case)
  if case.row >= 1024 or case.dtype in ("float32", "bfloat16"):
    assert mine.whole_row_sorts == 0, said
  assert mine.estimate_s is not None, said
  if case.dtype in ("float32", "bfloat16"):
    assert native.estimate_s is not None, said
    assert mine.estimate_s <= 3 * native.estimate_s, said
  elif native.estimate_s is not None:
    assert mine.estimate_s <= native.estimate_s, said


@needs_tpu
@pytest.mark.parametrize("case", TPU_TOP_K_BEYOND_KERNEL, ids=str)
def test_tpu_v5e_top_k_beyond_the_kernel_sorts_no_whole_row(case: TopK) -> None:
  mine, _, said = _pair("tpu-v5e", case)
  assert mine.whole_row_sorts == 0, said


@needs_tpu
@pytest.mark.xfail(
  strict=True,
  reason="issue 17, not met: for k > 256 XLA's TPU compiler makes no TopK of the staged selection's stages (nor of "
  "masked rounds of TopK, tried), and its estimate of the chunk sorts and gathers is far above native's one sort "
  "(1x32000 k=1024: 23 us against 1.2-1.6 us) or missing",
)
@pytest.mark.parametrize("case", TPU_TOP_K_BEYOND_KERNEL, ids=str)
def test_tpu_v5e_top_k_beyond_the_kernel_estimate(case: TopK) -> None:
  mine, native, said = _pair("tpu-v5e", case)
  assert mine.estimate_s is not None and native.estimate_s is not None, said
  assert mine.estimate_s <= 3 * native.estimate_s, said


# The TPU selection's DMA kernel (dmljax._src.strategies.tpu_fetch, run in interpret mode by tests/test_tpu_values.py)
# at matrices that take its edge copies: (type, matrix, k). A partial last column tile; a 16-bit matrix of fewer
# than 16 rows (every row copied); one with a partial last row tile and a partial column tile; float16 (read as
# bfloat16 bits); several grid steps.
TPU_FETCH = (
  ("float32", (64, 50257), 8),
  ("bfloat16", (12, 4096), 64),
  ("bfloat16", (20, 700), 64),
  ("float16", (3, 300), 9),
  ("float32", (40, 256), 30),
)


@needs_tpu
@pytest.mark.parametrize(("dtype", "shape", "k"), TPU_FETCH, ids=str)
def test_tpu_v5e_fetch_kernel_compiles_with_a_cost(dtype: str, shape: tuple[int, int], k: int) -> None:
  """Mosaic compiles the kernel for a v5e, and XLA prices the program (its cost estimate is the kernel's bytes)."""
  from benchmarks.compiled import devices, program
  from dmljax._src.strategies import tpu_fetch

  def fetch(x: jax.Array, columns: jax.Array, wanted: jax.Array) -> jax.Array:
    return tpu_fetch.fetch(tpu_fetch.operand(x), columns, wanted)

  device = devices.devices("tpu-v5e")[0]
  slots = (shape[0], k)
  specs = [
    devices.place(shape, dtype, device),
    devices.place(slots, "int32", device),
    devices.place(slots, "bool", device),
  ]
  s = program.compile_and_summarize(fetch, *specs, row=shape[-1])
  assert s.custom_calls == {"tpu_custom_call": 1}, s.custom_calls
  assert s.estimate_s is not None


@needs_tpu
@pytest.mark.parametrize("case", OPS, ids=str)
def test_tpu_v5e_other_operators_within_5_percent_of_native(case: Op) -> None:
  mine, native, said = _pair("tpu-v5e", case)
  assert mine.estimate_s is not None and native.estimate_s is not None, said
  assert mine.estimate_s <= 1.05 * native.estimate_s, said


def test_skip_reasons_name_the_install_command() -> None:
  """Where the packages are missing, the skip says how to install them."""
  for problem in (GPU_PROBLEM, TPU_PROBLEM):
    assert problem is None or "not installed" not in problem or availability.INSTALL in problem


# dmljax.sampling (issue 23): the decode-step programs of benchmarks/sampling/bench.py sort no row, compiled for each
# target.
SAMPLING_ROWS = ((8, 32000),)  # 64 x 128256 holds too (checked once; 4 min of TPU compile, left out of CI)


def _sampling_summaries(target: str, batch: int, vocab: int) -> dict[str, Any]:
  import dmljax as dml
  from benchmarks.compiled import devices, program
  from benchmarks.sampling import bench as sampling

  device = devices.devices(target)[0]
  x = devices.place((batch, vocab), "float32", device)
  key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype, sharding=x.sharding)
  k, p = devices.place((), "int32", device), devices.place((), "float32", device)
  programs = {
    "top_k": (sampling.dml_top_k, (key, x, k)),
    "top_p": (sampling.dml_top_p, (key, x, p)),
    "top_k_top_p": (sampling.dml_top_k_top_p, (key, x, k, p)),
    "top_p_mask": (dml.sampling.top_p_mask, (x, p)),
  }
  return {name: program.compile_and_summarize(fn, *args, row=vocab) for name, (fn, args) in programs.items()}


@needs_gpu
@pytest.mark.parametrize(("batch", "vocab"), SAMPLING_ROWS)
def test_h100_sampling_sorts_no_row(batch: int, vocab: int) -> None:
  for name, s in _sampling_summaries("h100", batch, vocab).items():
    assert s.whole_row_sorts == 0, f"{name} ({batch} x {vocab}) on h100: {_describe(s)}"


@needs_tpu
@pytest.mark.parametrize(("batch", "vocab"), SAMPLING_ROWS)
def test_tpu_v5e_sampling_sorts_no_row(batch: int, vocab: int) -> None:
  for name, s in _sampling_summaries("tpu-v5e", batch, vocab).items():
    assert s.whole_row_sorts == 0, f"{name} ({batch} x {vocab}) on tpu-v5e: {_describe(s)}"
