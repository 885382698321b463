"""``dml.execute``: runs an operator descriptor on arrays, DirectML-style."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

import jax
from jax.typing import ArrayLike

from dmljax._src.arg_reduce import ArgMaxDesc, ArgMinDesc, execute_arg_reduce
from dmljax._src.errors import DescriptorError
from dmljax._src.feature_levels import FeatureLevel
from dmljax._src.gather_nd import GatherND1Desc, GatherNDDesc, execute_gather_nd
from dmljax._src.one_hot import OneHotDesc, execute_one_hot
from dmljax._src.reduce import ReduceDesc, execute_reduce
from dmljax._src.top_k import TopK1Desc, TopKDesc, execute_top_k

_RUNNERS: dict[type, Callable[..., Any]] = {
  TopKDesc: execute_top_k,
  TopK1Desc: execute_top_k,
  ArgMinDesc: execute_arg_reduce,
  ArgMaxDesc: execute_arg_reduce,
  GatherNDDesc: execute_gather_nd,
  GatherND1Desc: execute_gather_nd,
  ReduceDesc: execute_reduce,
  OneHotDesc: execute_one_hot,
}


_OneOutput = ArgMinDesc | ArgMaxDesc | GatherNDDesc | GatherND1Desc | ReduceDesc | OneHotDesc


# One signature per kind of descriptor, so that callers get (values, indices) or one array without a cast.
@overload
def execute(
  desc: TopKDesc | TopK1Desc, *inputs: ArrayLike, feature_level: FeatureLevel | str | None = None
) -> tuple[jax.Array, jax.Array]: ...


@overload
def execute(desc: _OneOutput, *inputs: ArrayLike, feature_level: FeatureLevel | str | None = None) -> jax.Array: ...


def execute(
  desc: Any, *inputs: ArrayLike, feature_level: FeatureLevel | str | None = None
) -> jax.Array | tuple[jax.Array, jax.Array]:
  """Runs the operator a descriptor describes, checking it first as DirectML would.

  Checks, at trace time and all at once: every tensor descriptor (data type,
  sizes 1 to 8 dimensions, no size 0); the DirectML page's data-type and rank table for
  ``feature_level``; the operator's own rules; the output descriptors against
  what the operator produces; and the given arrays against their descriptors.
  Then runs the same implementation as the functional path.

  Args:
    desc: an operator descriptor (:class:`TopK1Desc`, :class:`ReduceDesc`, ...).
    *inputs: the input arrays, in the struct's order (GATHER_ND: input, indices;
      ONE_HOT: indices, values).
    feature_level: a :class:`FeatureLevel` or its string (``"3_0"``); default
      the newest level dmljax models, 5_0.

  Returns:
    The output array; ``(values, indices)`` for TOP_K and TOP_K1.

  Raises:
    DescriptorError: listing every rule the call breaks.

  Example:
    >>> import dmljax as dml, numpy as np
    >>> f32, u32 = dml.DataType.FLOAT32, dml.DataType.UINT32
    >>> desc = dml.ArgMinDesc(dml.TensorDesc(f32, (3, 3)), dml.TensorDesc(u32, (1, 1)),
    ...                       axes=(0, 1), axis_direction=dml.AxisDirection.INCREASING)
    >>> x = np.array([[1, 2, 3], [3, 0, 4], [2, 5, 2]], np.float32)
    >>> dml.execute(desc, x).tolist()
    [[4]]
  """
  runner = _RUNNERS.get(type(desc))
  if runner is None:
    names = ", ".join(t.__name__ for t in _RUNNERS)
    raise DescriptorError("execute", [f"desc must be one of {names}; got desc={type(desc).__name__}"])
  return runner(desc, inputs, feature_level)
