"""dmljax.onnx: ONNX's TopK, ArgMax/ArgMin, GatherND, Reduce* and OneHot on the dmljax operators.

Two layers (``pip install "dmljax[onnx]"``; the backend needs the ``onnx`` package):

* ONNX-semantics functions (:func:`top_k`, :func:`argmax`, :func:`argmin`, :func:`gather_nd`,
  :func:`reduce` and ``reduce_sum`` ... ``reduce_sum_square``, :func:`one_hot`): ONNX's attributes as
  keyword options, each one dmljax call underneath;
* :class:`Backend`, an ``onnx.backend.base.Backend`` that turns a graph of those operators and their
  glue into one jitted JAX function (:attr:`BackendRep.function`).
"""

from typing import TYPE_CHECKING, Any

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

# The backend needs the onnx package; the functions above do not, so it is imported on first use.
_BACKEND_NAMES = ("DEFAULT_MAX_ELEMENTS", "SUPPORTED_OPS", "Backend", "BackendRep", "ModelError", "prepare",
                  "run_model", "run_node", "supports_device")  # fmt: skip

if TYPE_CHECKING:
  from dmljax._src.onnx.backend import (
    DEFAULT_MAX_ELEMENTS,
    SUPPORTED_OPS,
    Backend,
    BackendRep,
    ModelError,
    prepare,
    run_model,
    run_node,
    supports_device,
  )


def __getattr__(name: str) -> Any:
  if name in _BACKEND_NAMES:
    try:
      from dmljax._src.onnx import backend
    except ModuleNotFoundError as e:
      raise ImportError(f'dmljax.onnx.{name} needs the onnx package: pip install "dmljax[onnx]" ({e})') from e
    return getattr(backend, name)
  raise AttributeError(f"module 'dmljax.onnx' has no attribute {name!r}")


__all__ = [
  "DEFAULT_MAX_ELEMENTS",
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
