"""dmljax.onnx: ONNX's TopK, ArgMax/ArgMin, GatherND, Reduce* and OneHot on the dmljax operators.

Two layers (``pip install "dmljax[onnx]"``; the backend needs the ``onnx`` package):

* ONNX-semantics functions (:func:`top_k`, :func:`argmax`, :func:`argmin`, :func:`gather_nd`,
  :func:`reduce` and ``reduce_sum`` ... ``reduce_sum_square``, :func:`one_hot`): ONNX's attributes as
  keyword options, each one dmljax call underneath;
* :class:`Backend`, an ``onnx.backend.base.Backend`` that turns a graph of those operators and their
  glue into one jitted JAX function (:attr:`BackendRep.function`).
"""

from dmljax._src.onnx.backend import (
  SUPPORTED_OPS,
  Backend,
  BackendRep,
  ModelError,
  prepare,
  run_model,
  run_node,
  supports_device,
)
from dmljax._src.onnx.ops import (
  argmax,
  argmin,
  gather_nd,
  index_dtype,
  one_hot,
  reduce,
  reduce_l1,
  reduce_l2,
  reduce_log_sum,
  reduce_log_sum_exp,
  reduce_max,
  reduce_mean,
  reduce_min,
  reduce_prod,
  reduce_sum,
  reduce_sum_square,
  top_k,
)

__all__ = [
  "SUPPORTED_OPS",
  "Backend",
  "BackendRep",
  "ModelError",
  "argmax",
  "argmin",
  "gather_nd",
  "index_dtype",
  "one_hot",
  "prepare",
  "reduce",
  "reduce_l1",
  "reduce_l2",
  "reduce_log_sum",
  "reduce_log_sum_exp",
  "reduce_max",
  "reduce_mean",
  "reduce_min",
  "reduce_prod",
  "reduce_sum",
  "reduce_sum_square",
  "run_model",
  "run_node",
  "supports_device",
  "top_k",
]
