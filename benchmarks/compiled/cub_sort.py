"""The kernels and bytes of XLA's CUB radix sort on GPUs, modelled by its passes.

XLA sorts a long row on a GPU with a CUB custom call (``xla.gpu.ext.cub_sort_*``);
:mod:`benchmarks.compiled.launches` prices it as the passes below, and the roofline
(:mod:`benchmarks.compiled.roofline`) adds those up like any launch.
"""

from __future__ import annotations

import dataclasses
import math

# CUB's digit widths: DeviceSegmentedRadixSort (XLA's batched sort) takes 6-bit digits for keys wider than
# one byte and 5-bit ones for bytes (tuning_segmented_radix_sort.cuh, every architecture from sm_70);
# DeviceRadixSort's onesweep path (one row) takes 8-bit digits.
SEGMENTED_DIGIT_BITS = 6
SEGMENTED_BYTE_KEY_DIGIT_BITS = 5
ONESWEEP_DIGIT_BITS = 8


@dataclasses.dataclass(frozen=True)
class CubSort:
  kernels: int
  read_bytes: int
  write_bytes: int
  blocks: int | None


def cub_radix_sort(key_bytes: int, value_bytes: int, key_bits: int, batch: int) -> CubSort:
  """The kernels and bytes of XLA's CUB sort custom call (``xla.gpu.ext.cub_sort_*``) on ``batch`` rows.

  XLA calls ``cub::DeviceSegmentedRadixSort::SortPairs`` for ``batch > 1`` (one block per row and pass;
  each pass reads the keys twice, to count digits and to scatter, reads the values once, and writes both)
  and ``cub::DeviceRadixSort::SortPairs`` for one row (onesweep: one histogram pass over the keys, an
  exclusive sum, then one pass per 8-bit digit reading and writing keys and values). Passes:
  ``ceil(key_bits / digit_bits)``.
  """
  if batch > 1:
    digit = SEGMENTED_DIGIT_BITS if key_bits > 8 else SEGMENTED_BYTE_KEY_DIGIT_BITS
    passes = math.ceil(key_bits / digit)
    return CubSort(passes, passes * (2 * key_bytes + value_bytes), passes * (key_bytes + value_bytes), batch)
  passes = math.ceil(key_bits / ONESWEEP_DIGIT_BITS)
  return CubSort(passes + 2, key_bytes + passes * (key_bytes + value_bytes), passes * (key_bytes + value_bytes), None)
