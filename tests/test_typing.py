"""``dml.execute``'s overloads: a TOP_K descriptor gives ``(values, indices)``, the others one array.

.ci/run type-checks this file with mypy: every use below needs the overloads (no cast), and
``assert_type`` fails the check if a result's static type drifts. Run by pytest, it checks the
same types at run time.
"""

from typing import assert_type

import jax
import numpy as np

import dmljax as dml

F32, U32 = dml.DataType.FLOAT32, dml.DataType.UINT32


def test_execute_result_types() -> None:
  x = np.array([[3.0, 1.0, 2.0, 5.0]], np.float32)
  top_k = dml.TopK1Desc(
    dml.TensorDesc(F32, (1, 4)),
    dml.TensorDesc(F32, (1, 2)),
    dml.TensorDesc(U32, (1, 2)),
    1,
    2,
    dml.AxisDirection.DECREASING,
  )
  values, indices = dml.execute(top_k, x)
  assert_type(values, jax.Array)
  assert_type(indices, jax.Array)
  assert values.tolist() == [[5.0, 3.0]] and indices.tolist() == [[3, 0]]

  top_k0 = dml.TopKDesc(dml.TensorDesc(F32, (1, 4)), dml.TensorDesc(F32, (1, 1)), dml.TensorDesc(U32, (1, 1)), 1, 1)
  pair = dml.execute(top_k0, x)
  assert_type(pair, tuple[jax.Array, jax.Array])
  assert pair[1].tolist() == [[3]]

  reduce = dml.ReduceDesc(dml.ReduceFunction.SUM, dml.TensorDesc(F32, (1, 4)), dml.TensorDesc(F32, (1, 1)), (1,))
  total = dml.execute(reduce, x)
  assert_type(total, jax.Array)
  assert total.shape == (1, 1) and total.tolist() == [[11.0]]

  argmin = dml.ArgMinDesc(dml.TensorDesc(F32, (1, 4)), dml.TensorDesc(U32, (1, 1)), (1,), dml.AxisDirection.INCREASING)
  assert_type(dml.execute(argmin, x), jax.Array)
  assert dml.execute(argmin, x).tolist() == [[1]]
