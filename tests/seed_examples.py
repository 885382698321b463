"""Every worked example of DirectML's five operator reference pages, copied as data.

The pages: DML_TOP_K1_OPERATOR_DESC (000), DML_ARGMIN_OPERATOR_DESC (001),
DML_GATHER_ND1_OPERATOR_DESC (002), DML_REDUCE_OPERATOR_DESC (003) and
DML_ONE_HOT_OPERATOR_DESC (004), read in their Korean edition (the example
headings quoted below are in Korean).  The tensors are copied exactly as written
on the pages (not re-derived); the pages' comments are kept where they help.
Nothing here depends on numpy, jax or dmljax.  (The module keeps its historical
name, ``seed_examples``.)

Layout of each entry of ``SEED_EXAMPLES``::

    {"id": "top_k1_example_1",
     "op": "TOP_K1" | "ARGMIN" | "GATHER_ND1" | "REDUCE" | "ONE_HOT",
     "params": {...},      # descriptor fields in snake_case
     "inputs": {...},      # tensor field name -> tensor
     "outputs": {...}}     # tensor field name -> tensor

A tensor is ``(data_type, sizes, data)``: the DirectML data type name without
the ``DML_TENSOR_DATA_TYPE_`` prefix, the sizes tuple, and the nested Python
list exactly as on the page.  Enum values are given without their prefix
(``axis_direction``: "DECREASING"/"INCREASING" for DML_AXIS_DIRECTION_*,
``function``: "SUM" ... for DML_REDUCE_FUNCTION_*).
"""

# --------------------------------------------------------------------------- #
# 000 DML_TOP_K1
# --------------------------------------------------------------------------- #
_TOP_K1_INPUT_A = ("FLOAT32", (1, 1, 3, 4), [[[[0, 1, 10, 11], [3, 2, 9, 8], [4, 5, 6, 7]]]])

_TOP_K1_INPUT_B = ("FLOAT32", (1, 1, 3, 4), [[[[1, 2, 2, 3], [3, 4, 5, 5], [6, 6, 6, 6]]]])

_TOP_K1 = [
  {
    "id": "top_k1_example_1",
    "op": "TOP_K1",
    "params": {"axis": 3, "k": 2, "axis_direction": "DECREASING"},
    "inputs": {"input_tensor": _TOP_K1_INPUT_A},
    "outputs": {
      "output_value_tensor": ("FLOAT32", (1, 1, 3, 2), [[[[11, 10], [9, 8], [7, 6]]]]),
      "output_index_tensor": ("UINT32", (1, 1, 3, 2), [[[[3, 2], [2, 3], [3, 2]]]]),
    },
  },
  {
    # "예제 2. 다른 축 사용" (using a different axis)
    "id": "top_k1_example_2",
    "op": "TOP_K1",
    "params": {"axis": 2, "k": 2, "axis_direction": "DECREASING"},
    "inputs": {"input_tensor": _TOP_K1_INPUT_A},
    "outputs": {
      "output_value_tensor": ("FLOAT32", (1, 1, 2, 4), [[[[4, 5, 10, 11], [3, 2, 9, 8]]]]),
      "output_index_tensor": ("UINT32", (1, 1, 2, 4), [[[[2, 2, 0, 0], [1, 1, 1, 1]]]]),
    },
  },
  {
    # "예제 3. 연결된 값" (tied values)
    "id": "top_k1_example_3",
    "op": "TOP_K1",
    "params": {"axis": 3, "k": 3, "axis_direction": "DECREASING"},
    "inputs": {"input_tensor": _TOP_K1_INPUT_B},
    "outputs": {
      "output_value_tensor": ("FLOAT32", (1, 1, 3, 3), [[[[3, 2, 2], [5, 5, 4], [6, 6, 6]]]]),
      "output_index_tensor": ("UINT32", (1, 1, 3, 3), [[[[3, 1, 2], [2, 3, 1], [0, 1, 2]]]]),
    },
  },
  {
    # "예제 4. 축 방향 늘리기" (increasing axis direction)
    "id": "top_k1_example_4",
    "op": "TOP_K1",
    "params": {"axis": 3, "k": 3, "axis_direction": "INCREASING"},
    "inputs": {"input_tensor": _TOP_K1_INPUT_B},
    "outputs": {
      "output_value_tensor": ("FLOAT32", (1, 1, 3, 3), [[[[1, 2, 2], [3, 4, 5], [6, 6, 6]]]]),
      "output_index_tensor": ("UINT32", (1, 1, 3, 3), [[[[0, 1, 2], [0, 1, 2], [0, 1, 2]]]]),
    },
  },
]

# --------------------------------------------------------------------------- #
# 001 DML_ARGMIN -- all three examples share one input tensor
# --------------------------------------------------------------------------- #
_ARGMIN_INPUT = ("FLOAT32", (3, 3), [[1, 2, 3], [3, 0, 4], [2, 5, 2]])

_ARGMIN = [
  {
    # "예제 1. 열에 argmin 적용" (argmin over columns)
    "id": "argmin_example_1",
    "op": "ARGMIN",
    "params": {"axes": (0,), "axis_direction": "INCREASING"},
    "inputs": {"input_tensor": _ARGMIN_INPUT},
    "outputs": {
      "output_tensor": (
        "UINT32",
        (1, 3),
        [
          [
            0,  # argmin({1, 3, 2})
            1,  # argmin({2, 0, 5})
            2,
          ]
        ],
      ),  # argmin({3, 4, 2})
    },
  },
  {
    # "예제 2. 행에 argmin 적용" (argmin over rows)
    "id": "argmin_example_2",
    "op": "ARGMIN",
    "params": {"axes": (1,), "axis_direction": "INCREASING"},
    "inputs": {"input_tensor": _ARGMIN_INPUT},
    "outputs": {
      "output_tensor": (
        "UINT32",
        (3, 1),
        [
          [0],  # argmin({1, 2, 3})
          [1],  # argmin({3, 0, 4})
          [0],
        ],
      ),  # argmin({2, 5, 2})
    },
  },
  {
    # "예제 3. 모든 축에 argmin 적용(전체 텐서)" (argmin over all axes)
    "id": "argmin_example_3",
    "op": "ARGMIN",
    "params": {"axes": (0, 1), "axis_direction": "INCREASING"},
    "inputs": {"input_tensor": _ARGMIN_INPUT},
    "outputs": {
      "output_tensor": ("UINT32", (1, 1), [[4]]),  # argmin({1, 2, 3, 3, 0, 4, 2, 5, 2})
    },
  },
]

# --------------------------------------------------------------------------- #
# 002 DML_GATHER_ND1
# --------------------------------------------------------------------------- #
_GATHER_ND1 = [
  {
    # "예제 1. 1D 다시 매핑" (1D remapping)
    # output[y, x] = input[indices[y], x]
    "id": "gather_nd1_example_1",
    "op": "GATHER_ND1",
    "params": {"input_dimension_count": 2, "indices_dimension_count": 2, "batch_dimension_count": 0},
    "inputs": {
      "input_tensor": ("FLOAT32", (2, 2), [[0, 1], [2, 3]]),
      "indices_tensor": ("UINT32", (2, 1), [[1], [0]]),
    },
    "outputs": {
      "output_tensor": ("FLOAT32", (2, 2), [[2, 3], [0, 1]]),
    },
  },
  {
    # "예제 2. 일괄 처리 수를 사용하여 2D 다시 매핑" (2D remapping with batch count)
    # output[batch, x] = input[batch, indices[batch, x, 0], indices[batch, x, 1]]
    "id": "gather_nd1_example_2",
    "op": "GATHER_ND1",
    "params": {"input_dimension_count": 3, "indices_dimension_count": 3, "batch_dimension_count": 1},
    "inputs": {
      # 3 batches.
      "input_tensor": (
        "FLOAT32",
        (1, 3, 2, 2),
        [
          [
            [[0, 1], [2, 3]],  # batch 0
            [[4, 5], [6, 7]],  # batch 1
            [[8, 9], [10, 11]],
          ]  # batch 2
        ],
      ),
      # A 3x2 array of 2D tuples indexing into InputTensor.
      # e.g. a tuple of <1,0> in batch 1 corresponds to input value 6.
      "indices_tensor": ("UINT32", (1, 3, 2, 2), [[[[0, 0], [1, 1]], [[1, 1], [0, 0]], [[0, 1], [1, 0]]]]),
    },
    "outputs": {
      "output_tensor": ("FLOAT32", (1, 1, 3, 2), [[[[0, 3], [7, 4], [9, 10]]]]),
    },
  },
]

# --------------------------------------------------------------------------- #
# 003 DML_REDUCE -- all three examples share one input tensor
# --------------------------------------------------------------------------- #
_REDUCE_INPUT = ("FLOAT32", (3, 3), [[1, 2, 3], [3, 0, 4], [2, 4, 2]])

_REDUCE = [
  {
    # "예제 1. 열에 합계 적용" (sum over columns)
    "id": "reduce_example_1",
    "op": "REDUCE",
    "params": {"function": "SUM", "axes": (0,)},
    "inputs": {"input_tensor": _REDUCE_INPUT},
    "outputs": {
      "output_tensor": (
        "FLOAT32",
        (1, 3),
        [
          [
            6,  # sum({1, 3, 2})
            6,  # sum({2, 0, 4})
            9,
          ]
        ],
      ),  # sum({3, 4, 2})
    },
  },
  {
    # "예제 2. 행에 합계 적용" (sum over rows)
    "id": "reduce_example_2",
    "op": "REDUCE",
    "params": {"function": "SUM", "axes": (1,)},
    "inputs": {"input_tensor": _REDUCE_INPUT},
    "outputs": {
      "output_tensor": (
        "FLOAT32",
        (3, 1),
        [
          [6],  # sum({1, 2, 3})
          [7],  # sum({3, 0, 4})
          [8],
        ],
      ),  # sum({2, 4, 2})
    },
  },
  {
    # "예제 3. 모든 축에 합계 적용(전체 텐서)" (sum over all axes)
    # NOTE: the page's comment here reads "sum({1, 2, 3, 3, 0, 4, 2, 5, 2})",
    # a 5 copied from the ARGMIN page's input tensor.  The REDUCE input
    # tensor above has a 4 in that place, and the stated result 21 is the sum
    # of the input tensor as written (with the 5 it would be 22).  The tensors
    # and the result are copied as written.
    "id": "reduce_example_3",
    "op": "REDUCE",
    "params": {"function": "SUM", "axes": (0, 1)},
    "inputs": {"input_tensor": _REDUCE_INPUT},
    "outputs": {
      "output_tensor": ("FLOAT32", (1, 1), [[21]]),
    },
  },
]

# --------------------------------------------------------------------------- #
# 004 DML_ONE_HOT
# --------------------------------------------------------------------------- #
_ONE_HOT = [
  {
    "id": "one_hot_example_1",
    "op": "ONE_HOT",
    "params": {"axis": 3},
    "inputs": {
      "indices_tensor": ("UINT32", (1, 1, 3, 1), [[[[0], [3], [2]]]]),
      "values_tensor": ("FLOAT32", (1, 1, 1, 2), [[[[0, 1]]]]),
    },
    "outputs": {
      # The one-hot encoding is formed across the rows
      "output_tensor": ("FLOAT32", (1, 1, 3, 4), [[[[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]]]),
    },
  },
  {
    # "예제 2. 다른 축 사용" (using a different axis)
    "id": "one_hot_example_2",
    "op": "ONE_HOT",
    "params": {"axis": 2},
    "inputs": {
      "indices_tensor": ("UINT32", (1, 1, 1, 4), [[[[0, 2, 1, 0]]]]),
      "values_tensor": ("FLOAT32", (1, 1, 1, 2), [[[[0, 1]]]]),
    },
    "outputs": {
      # The one-hot encoding is formed across the columns
      "output_tensor": ("FLOAT32", (1, 1, 3, 4), [[[[1, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0]]]]),
    },
  },
  {
    # "예제 3. 다른 켜기/끄기 값 사용" (different on/off values)
    "id": "one_hot_example_3",
    "op": "ONE_HOT",
    "params": {"axis": 3},
    "inputs": {
      "indices_tensor": ("UINT32", (1, 1, 3, 1), [[[[0], [3], [2]]]]),
      "values_tensor": (
        "FLOAT32",
        (1, 1, 3, 1),
        [
          [
            [
              [4],  # off value
              [2],  # on value
              [9],
            ]
          ]
        ],
      ),  # unused
    },
    "outputs": {
      "output_tensor": ("FLOAT32", (1, 1, 3, 4), [[[[2, 4, 4, 4], [4, 4, 4, 2], [4, 4, 2, 4]]]]),
    },
  },
  {
    # "예제 4. 음수 및 범위를 벗어난 인덱스" (negative and out-of-range indices)
    "id": "one_hot_example_4",
    "op": "ONE_HOT",
    "params": {"axis": 3},
    "inputs": {
      "indices_tensor": ("INT32", (1, 1, 3, 1), [[[[-3], [100], [3]]]]),
      "values_tensor": ("FLOAT32", (1, 1, 1, 2), [[[[0, 1]]]]),
    },
    "outputs": {
      "output_tensor": (
        "FLOAT32",
        (1, 1, 3, 4),
        [
          [
            [
              [0, 1, 0, 0],  # negative indices count from the end
              [0, 0, 0, 0],  # out-of-bounds indices are ignored;
              # all elements are set to OffValue
              [0, 0, 0, 1],
            ]
          ]
        ],
      ),
    },
  },
]

SEED_EXAMPLES = _TOP_K1 + _ARGMIN + _GATHER_ND1 + _REDUCE + _ONE_HOT

# --------------------------------------------------------------------------- #
# Inline examples from the pages' prose (not in "예제" (example) sections).
# --------------------------------------------------------------------------- #
SEED_EXTRA_EXAMPLES = [
  # 001 DML_ARGMIN, AxisDirection member:
  #   "DML_AXIS_DIRECTION_INCREASING ... (e.g. argmin({1,2,3,2,1}) = 0)"
  #   "DML_AXIS_DIRECTION_DECREASING ... (e.g. argmin({1,2,3,2,1}) = 4)"
  # The page gives no data types or sizes here; FLOAT32 input of sizes (5,)
  # and UINT32 output of sizes (1,) (the default index type) are our choice.
  {
    "id": "argmin_axis_direction_increasing",
    "op": "ARGMIN",
    "params": {"axes": (0,), "axis_direction": "INCREASING"},
    "inputs": {"input_tensor": ("FLOAT32", (5,), [1, 2, 3, 2, 1])},
    "outputs": {"output_tensor": ("UINT32", (1,), [0])},
  },
  {
    "id": "argmin_axis_direction_decreasing",
    "op": "ARGMIN",
    "params": {"axes": (0,), "axis_direction": "DECREASING"},
    "inputs": {"input_tensor": ("FLOAT32", (5,), [1, 2, 3, 2, 1])},
    "outputs": {"output_tensor": ("UINT32", (1,), [4])},
  },
  # 002 DML_GATHER_ND1, OutputTensor member: a sizes-only example (no data,
  # no data types).  "The {1,2} comes from the indices tensor (ignoring last
  # dimension which is the tuple size), and the {6,7} comes from input tensor,
  # ignoring the first 3 dimensions since the index tuples are 3 elements."
  # BatchDimensionCount is not stated on the page there; it is 0 (the formula
  # shown has no batch part).
  {
    "id": "gather_nd1_output_sizes",
    "op": "GATHER_ND1",
    "params": {"input_dimension_count": 5, "indices_dimension_count": 3, "batch_dimension_count": 0},
    "input_sizes": {"input_tensor": (3, 4, 5, 6, 7), "indices_tensor": (1, 1, 1, 2, 3)},
    "output_sizes": {"output_tensor": (1, 1, 2, 6, 7)},
  },
]

# 4 TOP_K1 + 3 ARGMIN + 2 GATHER_ND1 + 3 REDUCE + 4 ONE_HOT
assert len(SEED_EXAMPLES) == 16
