"""The keys dmljax feeds XLA's TopK kernels, under emulations of the comparisons those kernels make.

No GPU or TPU runs here. Each kernel's comparison is written out in NumPy from what XLA's sources and
compiled code say it does, and rows are ordered by it:

* XLA's GPU kernel (``xla/stream_executor/cuda/topk_kernel_cuda_common.cu.h``, ``Descending::cmp``):
  ``lhs.key == rhs.key ? lhs.idx < rhs.idx : lhs.key > rhs.key`` on float32 (bfloat16 widened exactly), IEEE
  compares without flushing subnormals (its sm_90 code in jaxlib 0.10.2's CUDA plugin: ``FSETP`` without
  ``.FTZ``). A flushing variant shows what would change if a kernel flushed them.
* XLA's TPU TopK: the comparator computation XLA attaches to the custom call, the IEEE total order on the
  bits (negative values' magnitude bits flipped, compared as signed integers), ties to the lower index.

The order each comparison gives on the keys is checked against the NumPy reference (tests/reference.py),
which knows nothing of keys, on rows of NaNs of both signs and several payloads, signed zeros, infinities,
subnormals, the smallest and largest normals, integer extremes and heavy ties. float32 and bfloat16 keys
flush the input's subnormals to zero (dmljax lets subnormals act as zero), so their order is the
reference's on the input with subnormals flushed.
"""

from __future__ import annotations

import functools
import zlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from dml_strategies import flush_subnormals
from reference import ref_top_k

from dmljax._src.strategies import gpu_kernel, tpu_kernel

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.dtype(np.float32)
KERNEL_KEY_TYPES = (F32, BF16, np.dtype(np.float16), *(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16)))
DIRECTIONS = ("decreasing", "increasing")


def _seed(*parts: object) -> np.random.Generator:
  return np.random.default_rng(zlib.crc32("/".join(map(str, parts)).encode()))


def _specials(dtype: np.dtype) -> np.ndarray:
  if dtype.kind in "iu":
    info = np.iinfo(dtype)
    return np.array([info.min, info.min + 1, -1 if dtype.kind == "i" else 1, 0, 1, info.max - 1, info.max], dtype)
  info = ml_dtypes.finfo(dtype)
  unsigned = np.dtype(f"uint{dtype.itemsize * 8}")
  quiet = np.array(np.nan, dtype).view(unsigned)
  sign = np.array(1 << (dtype.itemsize * 8 - 1), unsigned)
  nans = np.array([quiet, quiet | 1, quiet | sign, quiet | 3 | sign], unsigned).view(dtype)
  plain = np.array(
    [np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, info.max, -info.max, info.smallest_normal, -info.smallest_normal],
    np.float64,
  ).astype(dtype)
  subnormals = np.array([info.smallest_subnormal, -info.smallest_subnormal], np.float64).astype(dtype)
  return np.concatenate([nans, plain, subnormals])


def _rows(dtype: np.dtype, seed: int) -> np.ndarray:
  """Rows of 48: specials drawn with heavy repeats, then random values among them."""
  rng = _seed(dtype.name, seed)
  specials = _specials(dtype)
  if dtype.kind in "iu":
    info = np.iinfo(dtype)
    randoms = rng.integers(int(info.min), int(info.max) + 1, (4, 48), dtype=np.int64).astype(dtype)
  else:
    randoms = rng.standard_normal((4, 48)).astype(dtype)
  return np.where(rng.random((4, 48)) < 0.6, rng.choice(specials, (4, 48)), randoms).astype(dtype)


def _order(keys: np.ndarray, first: object) -> list[int]:
  """The positions of one row in the order ``first(a, i, b, j)`` (``a`` at ``i`` ranks before ``b`` at ``j``) gives."""

  def compare(i: int, j: int) -> int:
    return -1 if first(keys[i], i, keys[j], j) else 1

  return sorted(range(len(keys)), key=functools.cmp_to_key(compare))


def gpu_kernel_first(a: float, i: int, b: float, j: int) -> bool:
  """``Descending::cmp``: equal keys to the lower index, else the greater key (IEEE, subnormals as they are)."""
  return bool(i < j) if a == b else bool(a > b)


def _flushed(value: float) -> float:
  return 0.0 if value != 0 and abs(value) < np.finfo(np.float32).tiny else value


def flushing_kernel_first(a: float, i: int, b: float, j: int) -> bool:
  """The same comparison in a kernel that flushed subnormal operands to zero (XLA's is not one)."""
  return gpu_kernel_first(_flushed(a), i, _flushed(b), j)


def _total_order(bits: np.ndarray) -> np.ndarray:
  """The IEEE total order of float bit patterns as signed integers (the comparator XLA attaches to TopK)."""
  signed = bits.view(f"int{bits.dtype.itemsize * 8}").astype(np.int64)
  magnitude = (1 << (bits.dtype.itemsize * 8 - 1)) - 1
  return np.where(signed < 0, signed ^ magnitude, signed)


def _keys(key_fn: object, x: np.ndarray, direction: str) -> np.ndarray:
  return np.asarray(jax.jit(key_fn, static_argnums=1)(jnp.asarray(x), direction == "decreasing"))


def _want(x: np.ndarray, direction: str, flushes: bool) -> np.ndarray:
  """The reference order of every row, subnormals as zero where the key flushes them."""
  return ref_top_k(flush_subnormals(x) if flushes else x, x.shape[-1], x.ndim - 1, direction)[1]


def _gpu_flushes(dtype: np.dtype) -> bool:
  return dtype in (F32, BF16)  # kernel_keys.one_step_below


def _as_f32(keys: np.ndarray) -> np.ndarray:
  """The key as the GPU kernel compares it: bfloat16 widened exactly to float32."""
  return keys.astype(np.float32)


@pytest.mark.parametrize("dtype", KERNEL_KEY_TYPES, ids=str)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_gpu_kernel_comparison_on_the_keys_is_dmljax_order(dtype: np.dtype, direction: str) -> None:
  x = _rows(dtype, 1)
  keys = _as_f32(_keys(gpu_kernel.key, x, direction))
  assert not np.isnan(keys).any()  # the comparison is a strict weak order only without NaN
  zero_signs = np.signbit(keys[keys == 0])
  assert zero_signs.all() or not zero_signs.any()  # all zero keys alike: the total-order merge sort agrees
  want = _want(x, direction, _gpu_flushes(dtype))
  for row in range(x.shape[0]):
    assert _order(keys[row], gpu_kernel_first) == want[row].tolist(), row


def test_gpu_kernel_comparison_on_raw_floats_is_not_dmljax_order() -> None:
  """Why the key exists: on the values themselves a NaN is neither greater than nor equal to anything."""
  x = np.array([1.0, np.nan, 2.0, -0.0, 0.0], np.float32)
  assert not gpu_kernel_first(x[1], 1, x[0], 0) and not gpu_kernel_first(x[0], 0, x[1], 1)
  _, want = ref_top_k(x[None], 5, 1, "decreasing")
  assert _order(x, gpu_kernel_first) != want[0].tolist()


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_a_flushing_kernel_would_tie_only_the_smallest_normal_with_zero(dtype: np.dtype) -> None:
  """float32/bfloat16 keys put +-smallest normal on the largest subnormal key: the one place a kernel that
  flushed subnormals would differ. Rows without it order alike under both comparisons; a row with it and a
  zero does not."""
  tiny = ml_dtypes.finfo(dtype).smallest_normal
  x = _rows(dtype, 2)
  x = np.where(np.abs(x.astype(np.float32)) == np.float32(tiny), np.ones((), dtype), x).astype(dtype)
  keys = _as_f32(_keys(gpu_kernel.key, x, "decreasing"))
  want = _want(x, "decreasing", flushes=True)
  for row in range(x.shape[0]):
    assert _order(keys[row], flushing_kernel_first) == want[row].tolist(), row
  pair = np.array([[0.0, tiny, -tiny]], np.float32).astype(dtype)
  keys = _as_f32(_keys(gpu_kernel.key, pair, "decreasing"))
  assert _order(keys[0], gpu_kernel_first) == [1, 0, 2] == _want(pair, "decreasing", flushes=True)[0].tolist()
  assert _order(keys[0], flushing_kernel_first) == [0, 1, 2]


@pytest.mark.parametrize("dtype", [*KERNEL_KEY_TYPES, np.dtype(np.int32), np.dtype(np.uint32)], ids=str)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_tpu_kernel_total_order_comparison_on_the_keys_is_dmljax_order(dtype: np.dtype, direction: str) -> None:
  """Under the comparator XLA attaches (the total order), and for every type but 32-bit integers also under the
  IEEE comparison (the keys hold no NaN and one sign of zero), the keys order rows as dmljax does."""
  x = _rows(dtype, 3)
  keys = _keys(tpu_kernel.key, x, direction)
  total = _total_order(keys)
  want = _want(x, direction, flushes=dtype == F32)  # kernel_keys.one_step_below for float32 alone
  for row in range(x.shape[0]):
    by_total = sorted(range(48), key=lambda i, r=row: (-total[r, i], i))
    assert by_total == want[row].tolist(), row
    if dtype.itemsize <= 2 or dtype == F32:
      assert not np.isnan(keys).any()
      assert _order(keys[row].astype(np.float32), gpu_kernel_first) == want[row].tolist(), row
