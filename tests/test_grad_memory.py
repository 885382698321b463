"""The gradients of TOP_K and GATHER_ND cost O(input + output) memory (issue 3, point 6).

A dense formulation (a one-hot matrix per selected element, or an input-sized
buffer per output element) would need O(input × K) or O(indices × rows) bytes.
We compile the reverse-mode and forward-mode programs for shapes where those
are hundreds of MB and bound XLA's temporary buffers by a small multiple of the
input and output sizes. Nothing is run: only the compiled buffer assignment is read.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmljax as dml

MB = 2**20


def temp_bytes(f: Callable[..., jax.Array], *args: jax.ShapeDtypeStruct) -> int:
  analysis = jax.jit(f).lower(*args).compile().memory_analysis()
  assert analysis is not None
  return int(analysis.temp_size_in_bytes)


def linear_bound(*shapes: tuple[int, ...]) -> int:
  """The stated bound: twice the total element count of the given arrays, at 4 bytes per element.

  Counting every element at float32 width allows for the float32 accumulation
  of float16/bfloat16 cotangents and for int32 positions derived from indices.
  """
  return 2 * 4 * sum(int(np.prod(s)) for s in shapes)


@pytest.mark.parametrize("axis", [1, 0])
def test_top_k_gradient_memory_is_linear(axis: int) -> None:
  rows, n, k = 64, 8192, 256
  x_shape = (rows, n) if axis == 1 else (n, rows)
  y_shape = (rows, k) if axis == 1 else (k, rows)
  x = jax.ShapeDtypeStruct(x_shape, jnp.float32)
  y = jax.ShapeDtypeStruct(y_shape, jnp.float32)

  def values(v: jax.Array) -> jax.Array:
    return dml.top_k(v, k, axis=axis)[0]

  def reverse(v: jax.Array, cotangent: jax.Array) -> jax.Array:
    return jax.vjp(values, v)[1](cotangent)[0]

  def forward(v: jax.Array, tangent: jax.Array) -> jax.Array:
    return jax.jvp(values, (v,), (tangent,))[1]

  dense = 4 * rows * n * k  # 512 MiB: a one-hot (input x K) scatter matrix
  bound = linear_bound(x_shape, y_shape)  # about 4.3 MiB
  assert bound * 50 < dense
  assert temp_bytes(reverse, x, y) <= bound
  assert temp_bytes(forward, x, x) <= bound


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd_gradient_memory_is_linear(dtype: type, batch_dims: int) -> None:
  if batch_dims == 0:
    x_shape, i_shape, y_shape = (4096, 256), (20000, 1), (20000, 256)
  else:
    x_shape, i_shape, y_shape = (8, 2048, 64), (8, 3000, 1), (8, 3000, 64)
  x = jax.ShapeDtypeStruct(x_shape, dtype)
  indices = jax.ShapeDtypeStruct(i_shape, jnp.int32)
  y = jax.ShapeDtypeStruct(y_shape, dtype)

  def reverse(v: jax.Array, i: jax.Array, cotangent: jax.Array) -> jax.Array:
    return jax.vjp(lambda w: dml.gather_nd(w, i, batch_dims=batch_dims), v)[1](cotangent)[0]

  def forward(v: jax.Array, i: jax.Array, tangent: jax.Array) -> jax.Array:
    return jax.jvp(lambda w: dml.gather_nd(w, i, batch_dims=batch_dims), (v,), (tangent,))[1]

  dense = 4 * int(np.prod(i_shape[:-1])) * x_shape[batch_dims]  # a one-hot (index tuples x rows) matmul
  bound = linear_bound(x_shape, i_shape, y_shape)
  assert bound * 5 < dense
  assert temp_bytes(reverse, x, indices, y) <= bound
  assert temp_bytes(forward, x, indices, x) <= bound
