"""DirectML feature levels and the per-level "Tensor support" tables of DirectML's pages.

Each table row says, from a feature level on, which ranks and data types every
tensor of an operator accepts. The descriptor path (:func:`dmljax.execute`)
applies the row in force at the requested level; the functional path does not.

dmljax has no tables of their own for the v0 operators TOP_K and GATHER_ND, nor for
ARGMAX (the twin page of ARGMIN). dmljax applies the table of the v1 twin
(TOP_K1, GATHER_ND1, ARGMIN) to them, using the twin's oldest row at levels below
the twin's introduction.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from dmljax._src import enums
from dmljax._src.dtypes import DataType
from dmljax._src.errors import Problems


class FeatureLevel(enum.IntEnum):
  """``DML_FEATURE_LEVEL``, with the numeric values of ``directml.h``.

  :func:`execute` applies DirectML's per-level "tensor support" tables (ranks
  and data types) for the level it is given; the default is the newest, 5_0.
  It also takes strings such as ``"3_1"``.

  Example:
    >>> import dmljax as dml, numpy as np
    >>> f32, u32 = dml.DataType.FLOAT32, dml.DataType.UINT32
    >>> desc = dml.TopKDesc(dml.TensorDesc(f32, (2, 4)), dml.TensorDesc(f32, (2, 1)),
    ...                     dml.TensorDesc(u32, (2, 1)), axis=1, k=1)
    >>> x = np.arange(8, dtype=np.float32).reshape(2, 4)
    >>> dml.execute(desc, x, feature_level=dml.FeatureLevel.FL_3_1)[1].tolist()
    [[3], [3]]
    >>> try:
    ...   dml.execute(desc, x, feature_level="2_1")
    ... except dml.DescriptorError as error:
    ...   print(error.problems[0])
    input_tensor must have rank 4 at feature level 2_1; got input_tensor.sizes=(2, 4) (rank 2)
  """

  FL_1_0 = 0x1000
  FL_2_0 = 0x2000
  FL_2_1 = 0x2100
  FL_3_0 = 0x3000
  FL_3_1 = 0x3100
  FL_4_0 = 0x4000
  FL_4_1 = 0x4100
  FL_5_0 = 0x5000


NEWEST = FeatureLevel.FL_5_0


@dataclasses.dataclass(frozen=True)
class TensorSupport:
  ranks: tuple[int, ...]
  data_types: frozenset[DataType]

  def describe_ranks(self) -> str:
    lo, hi = min(self.ranks), max(self.ranks)
    return str(lo) if lo == hi else f"{lo} to {hi}"


Row = dict[str, TensorSupport]

_D = DataType
_ANY_RANK = tuple(range(1, 9))
_RANK_4 = (4,)


def _types(*names: str) -> frozenset[DataType]:
  return frozenset(DataType[n] for n in names)


_SMALL_NO64 = _types("FLOAT32", "FLOAT16", "INT32", "INT16", "INT8", "UINT32", "UINT16", "UINT8")
_ALL_NO_F64 = _SMALL_NO64 | _types("INT64", "UINT64")
_ALL = _ALL_NO_F64 | _types("FLOAT64")
_INDEX_OUT = _types("INT64", "INT32", "UINT64", "UINT32")
_FLOATS = _types("FLOAT32", "FLOAT16")


def _row(ranks: tuple[int, ...], **tensors: frozenset[DataType]) -> Row:
  return {name: TensorSupport(ranks, types) for name, types in tensors.items()}


def _top_k_rows() -> list[tuple[FeatureLevel, Row]]:
  return [
    (
      FeatureLevel.FL_5_0,
      _row(
        _ANY_RANK,
        input_tensor=_ALL_NO_F64,
        output_value_tensor=_ALL_NO_F64,
        output_index_tensor=_types("UINT64", "UINT32"),
      ),
    ),
    (
      FeatureLevel.FL_3_1,
      _row(_ANY_RANK, input_tensor=_SMALL_NO64, output_value_tensor=_SMALL_NO64, output_index_tensor=_types("UINT32")),
    ),
    (
      FeatureLevel.FL_2_1,
      _row(_RANK_4, input_tensor=_SMALL_NO64, output_value_tensor=_SMALL_NO64, output_index_tensor=_types("UINT32")),
    ),
  ]


def _arg_min_max_rows() -> list[tuple[FeatureLevel, Row]]:
  return [
    (FeatureLevel.FL_4_1, _row(_ANY_RANK, input_tensor=_ALL_NO_F64, output_tensor=_INDEX_OUT)),
    (FeatureLevel.FL_3_0, _row(_ANY_RANK, input_tensor=_SMALL_NO64, output_tensor=_INDEX_OUT)),
  ]


def _gather_nd_rows() -> list[tuple[FeatureLevel, Row]]:
  return [
    (FeatureLevel.FL_4_1, _row(_ANY_RANK, input_tensor=_ALL, indices_tensor=_INDEX_OUT, output_tensor=_ALL)),
    (
      FeatureLevel.FL_3_0,
      _row(_ANY_RANK, input_tensor=_SMALL_NO64, indices_tensor=_INDEX_OUT, output_tensor=_SMALL_NO64),
    ),
  ]


def _reduce_rows(
  input_types: list[tuple[FeatureLevel, tuple[int, ...], frozenset[DataType], frozenset[DataType]]],
) -> list[tuple[FeatureLevel, Row]]:
  return [(level, _row(ranks, input_tensor=ins, output_tensor=outs)) for level, ranks, ins, outs in input_types]


_SUM_LIKE_5_0 = _types("FLOAT32", "FLOAT16", "INT64", "INT32", "UINT64", "UINT32")

# Keys: operator name, or "REDUCE:<FUNCTION>" for the per-function REDUCE tables.
# Rows are newest first; (first level with the operator) is the last row's level
# unless _INTRODUCED says otherwise.
_TABLES: dict[str, list[tuple[FeatureLevel, Row]]] = {
  "TOP_K1": _top_k_rows(),
  "TOP_K": _top_k_rows(),
  "ARGMIN": _arg_min_max_rows(),
  "ARGMAX": _arg_min_max_rows(),
  "GATHER_ND1": _gather_nd_rows(),
  "GATHER_ND": _gather_nd_rows(),
  "ONE_HOT": [
    (FeatureLevel.FL_4_1, _row(_ANY_RANK, indices_tensor=_INDEX_OUT, values_tensor=_ALL, output_tensor=_ALL)),
    (
      FeatureLevel.FL_3_0,
      _row(_ANY_RANK, indices_tensor=_INDEX_OUT, values_tensor=_SMALL_NO64, output_tensor=_SMALL_NO64),
    ),
    (
      FeatureLevel.FL_2_1,
      _row(_RANK_4, indices_tensor=_types("UINT32"), values_tensor=_SMALL_NO64, output_tensor=_SMALL_NO64),
    ),
    (FeatureLevel.FL_2_0, _row(_RANK_4, indices_tensor=_types("UINT32"), values_tensor=_FLOATS, output_tensor=_FLOATS)),
  ],
  "REDUCE:ARG": _reduce_rows(
    [
      (FeatureLevel.FL_4_1, _ANY_RANK, _ALL_NO_F64, _INDEX_OUT),
      (FeatureLevel.FL_3_0, _ANY_RANK, _SMALL_NO64, _INDEX_OUT),
      (FeatureLevel.FL_2_1, _RANK_4, _SMALL_NO64, _types("UINT32")),
      (FeatureLevel.FL_1_0, _RANK_4, _FLOATS, _types("UINT32")),
    ]
  ),
  "REDUCE:FLOAT_ONLY": _reduce_rows(
    [
      (FeatureLevel.FL_3_0, _ANY_RANK, _FLOATS, _FLOATS),
      (FeatureLevel.FL_1_0, _RANK_4, _FLOATS, _FLOATS),
    ]
  ),
  "REDUCE:L1_SUM_SQUARE": _reduce_rows(
    [
      (FeatureLevel.FL_5_0, _ANY_RANK, _SUM_LIKE_5_0, _SUM_LIKE_5_0),
      (FeatureLevel.FL_3_0, _ANY_RANK, _FLOATS, _FLOATS),
      (FeatureLevel.FL_1_0, _RANK_4, _FLOATS, _FLOATS),
    ]
  ),
  "REDUCE:MIN_MAX": _reduce_rows(
    [
      (FeatureLevel.FL_5_0, _ANY_RANK, _ALL_NO_F64, _ALL_NO_F64),
      (FeatureLevel.FL_3_0, _ANY_RANK, _SMALL_NO64, _SMALL_NO64),
      (
        FeatureLevel.FL_2_1,
        _RANK_4,
        _types("FLOAT32", "FLOAT16", "INT32", "UINT32"),
        _types("FLOAT32", "FLOAT16", "INT32", "UINT32"),
      ),
      (FeatureLevel.FL_1_0, _RANK_4, _FLOATS, _FLOATS),
    ]
  ),
  "REDUCE:SUM_MULTIPLY": _reduce_rows(
    [
      (FeatureLevel.FL_5_0, _ANY_RANK, _SUM_LIKE_5_0, _SUM_LIKE_5_0),
      (
        FeatureLevel.FL_3_0,
        _ANY_RANK,
        _types("FLOAT32", "FLOAT16", "INT32", "UINT32"),
        _types("FLOAT32", "FLOAT16", "INT32", "UINT32"),
      ),
      (
        FeatureLevel.FL_2_1,
        _RANK_4,
        _types("FLOAT32", "FLOAT16", "INT32", "UINT32"),
        _types("FLOAT32", "FLOAT16", "INT32", "UINT32"),
      ),
      (FeatureLevel.FL_1_0, _RANK_4, _FLOATS, _FLOATS),
    ]
  ),
}

_INTRODUCED: dict[str, FeatureLevel] = {
  "TOP_K": FeatureLevel.FL_1_0,
  "GATHER_ND": FeatureLevel.FL_2_1,
}


def canonical_feature_level(p: Problems, level: Any) -> FeatureLevel | None:
  """Accepts a :class:`FeatureLevel`, its value, or a string such as ``"3_0"`` or ``"FL_3_0"``."""
  if level is None:
    return NEWEST
  names = {m.name.removeprefix("FL_"): m for m in FeatureLevel}
  return enums.parse_enum(p, "feature_level", level, FeatureLevel, names=names, prefixes=("dmlfeaturelevel", "fl"))


def support_row(p: Problems, table: str, level: FeatureLevel) -> Row | None:
  """The row of ``table`` in force at ``level``; a problem if the operator is not yet available."""
  rows = _TABLES[table]
  introduced = _INTRODUCED.get(table, rows[-1][0])
  operator = table.replace(":", " with function ")
  if not p.require(
    level >= introduced,
    f"{operator} needs feature level {introduced.name.removeprefix('FL_')} or newer",
    f"feature_level={level.name.removeprefix('FL_')}",
  ):
    return None
  for row_level, row in rows:
    if level >= row_level:
      return row
  return rows[-1][1]
