"""one_hot returns its on and off values bit for bit: NaN payloads, signs and signalling NaNs included.

XLA:CPU selects bfloat16 and 8-bit floats through a wider float, which quieted 0x7f81 (bfloat16) into 0x7fc0
and turned float8_e5m2's 0xff into 0x7f (found by ``python -m dmljax.selfcheck``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmljax as dml

# (type, on bits, off bits): NaNs with payloads and both signs, signalling where the type has them, and -0.0.
CASES = [
  (jnp.bfloat16, 0xFFC1, 0x7F81),
  (jnp.float16, 0xFE01, 0x7C01),
  (jnp.float8_e5m2, 0xFF, 0x7D),
  (jnp.float8_e3m4, 0xFF, 0x71),
  (jnp.float8_e4m3, 0xFF, 0x79),
  (jnp.float8_e4m3fn, 0xFF, 0x80),
  (jnp.float32, 0xFFC00001, 0x7F800001),
]


def _of(bits: int, dtype: Any) -> np.ndarray:
  width = np.dtype(dtype).itemsize
  return np.array([bits], np.dtype(f"u{width}")).view(dtype)


@pytest.mark.parametrize(("dtype", "on", "off"), CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_on_and_off_values_keep_their_bits(dtype: Any, on: int, off: int) -> None:
  width = np.dtype(dtype).itemsize
  indices = np.array([1, -1, 9], np.int32)
  values = {"on_value": _of(on, dtype)[0], "off_value": _of(off, dtype)[0]}
  unsigned = np.dtype(f"u{width}")
  out = dml.one_hot(indices, 3, negative_indices="from_end", **values)  # -1 counts from the end (DirectML's rule)
  want = np.array([[off, on, off], [off, off, on], [off, off, off]], unsigned)
  np.testing.assert_array_equal(np.asarray(out).view(unsigned), want)
  out = dml.one_hot(indices, 3, **values)  # -1 sets no position (jax.nn.one_hot's rule, the default)
  want = np.array([[off, on, off], [off, off, off], [off, off, off]], unsigned)
  np.testing.assert_array_equal(np.asarray(out).view(unsigned), want)


def test_narrow_float_values_stay_differentiable() -> None:
  def total(on: jax.Array) -> jax.Array:
    return (
      dml.one_hot(jnp.array([0, 2, 2], jnp.int32), 3, on_value=on, off_value=jnp.bfloat16(0)).astype(jnp.float32).sum()
    )

  assert float(jax.grad(total)(jnp.bfloat16(2.0))) == 3.0
