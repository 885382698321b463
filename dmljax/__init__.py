"""dmljax: DirectML's TOP_K, ARGMIN/ARGMAX, GATHER_ND, REDUCE and ONE_HOT operators, exactly, in JAX.

Two paths share one implementation per operator: the functional path
(:func:`top_k`, :func:`argmin`, :func:`argmax`, :func:`gather_nd`,
:func:`reduce`, :func:`one_hot`) and the descriptor path (:func:`execute` on a
descriptor such as :class:`TopK1Desc`).
"""

from dmljax import sampling as sampling
from dmljax._src.arg_reduce import ArgMaxDesc, ArgMinDesc, argmax, argmin
from dmljax._src.axes import AxisDirection
from dmljax._src.cpu_kernel_library import cpu_kernel_available, cpu_kernel_status
from dmljax._src.dtypes import DataType
from dmljax._src.errors import DescriptorError, StaticArgumentError
from dmljax._src.execute import execute
from dmljax._src.feature_levels import FeatureLevel
from dmljax._src.gather_nd import GatherND1Desc, GatherNDDesc, gather_nd
from dmljax._src.one_hot import OneHotDesc, one_hot
from dmljax._src.reduce import ReduceDesc, ReduceFunction, reduce
from dmljax._src.tensor_desc import TensorDesc
from dmljax._src.top_k import TopK1Desc, TopKDesc, top_k
from dmljax._version import __version__ as __version__

__all__ = [
  "ArgMaxDesc",
  "ArgMinDesc",
  "AxisDirection",
  "DataType",
  "DescriptorError",
  "FeatureLevel",
  "GatherND1Desc",
  "GatherNDDesc",
  "OneHotDesc",
  "ReduceDesc",
  "ReduceFunction",
  "StaticArgumentError",
  "TensorDesc",
  "TopK1Desc",
  "TopKDesc",
  "argmax",
  "argmin",
  "cpu_kernel_available",
  "cpu_kernel_status",
  "execute",
  "gather_nd",
  "one_hot",
  "reduce",
  "top_k",
]
