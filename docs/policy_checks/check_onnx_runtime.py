"""Observations behind docs/guide.rst's policy comparison (check_onnx_runtime.py); run by hand, not in CI."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper

print("onnx", onnx.__version__, "onnxruntime", ort.__version__)


def run(op, inputs, attrs=None, n_out=1, opset=18):
  names = [f"i{j}" for j in range(len(inputs))]
  outs = [f"o{j}" for j in range(n_out)]
  tmap = {np.float32: TP.FLOAT, np.float16: TP.FLOAT16, np.int64: TP.INT64, np.int32: TP.INT32, np.int8: TP.INT8}
  ins = [helper.make_tensor_value_info(nm, tmap[a.dtype.type], a.shape) for nm, a in zip(names, inputs, strict=True)]
  node = helper.make_node(op, names, outs, **(attrs or {}))
  g = helper.make_graph([node], "g", ins, [])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
  m.ir_version = 9
  inf_m = onnx.shape_inference.infer_shapes(m)
  vi = {v.name: v for v in inf_m.graph.value_info}
  for o in outs:
    t = vi[o].type.tensor_type.elem_type if o in vi else TP.FLOAT
    m.graph.output.append(helper.make_tensor_value_info(o, t, None))
  try:
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, dict(zip(names, inputs, strict=True)))
  except Exception as e:
    return f"{type(e).__name__}: {str(e)[:110]}"


def f(*v):
  return np.array(v, np.float32)


def k(v):
  return np.array([v], np.int64)


nan, inf = np.nan, np.inf
x = f(1.0, nan, inf, 2.0, nan)
print("TopK largest NaN k=3:", run("TopK", [x, k(3)], n_out=2))
print("TopK smallest NaN k=3:", run("TopK", [x, k(3)], {"largest": 0}, n_out=2))
negnan = np.frombuffer(np.uint32(0xFFC00000).tobytes(), np.float32)  # the NaN x86 produces for 0/0
y = np.concatenate([f(1.0, -inf), negnan])
print("TopK largest with negative-sign NaN:", run("TopK", [y, k(3)], n_out=2))
z = f(-0.0, 0.0, 1.0, 0.0, -0.0)
r = run("TopK", [z, k(5)], n_out=2)
print("TopK -0/+0:", r[1], np.signbit(r[0]))
print(
  "TopK ties:",
  run("TopK", [f(1.0, 3.0, 3.0, 3.0, 2.0), k(2)], n_out=2)[1],
  "smallest ties:",
  run("TopK", [f(2.0, 1.0, 1.0, 1.0), k(2)], {"largest": 0}, n_out=2)[1],
)
big = (np.arange(1000.0) % 7).astype(np.float32)
print("TopK ties large k=5:", run("TopK", [big, k(5)], n_out=2)[1])
print(
  "TopK k==n:",
  run("TopK", [f(0.0, 1.0, 2.0), k(3)], n_out=2)[1],
  " k>n:",
  run("TopK", [f(0.0, 1.0, 2.0), k(4)], n_out=2),
)
print(
  "TopK int32 smallest INT_MIN:", run("TopK", [np.array([-(2**31), 0, 5], np.int32), k(1)], {"largest": 0}, n_out=2)
)
print("ArgMax/ArgMin NaN:", run("ArgMax", [x], {"keepdims": 0}), run("ArgMin", [x], {"keepdims": 0}))
print(
  "ArgMax -0/+0:",
  run("ArgMax", [f(-0.0, 0.0)], {"keepdims": 0}),
  "ties select_last_index:",
  run("ArgMax", [f(1.0, 3.0, 3.0)], {"keepdims": 0, "select_last_index": 1}),
)
print(
  "ReduceMax NaN:",
  run("ReduceMax", [x], {"keepdims": 0}),
  run("ReduceMax", [f(nan, 1.0)], {"keepdims": 0}),
  run("ReduceMax", [f(1.0, nan)], {"keepdims": 0}),
)
a = np.arange(5, dtype=np.float32)
for idx in [-1, -6, 7]:
  print("GatherND", idx, run("GatherND", [a, np.array([[idx]], np.int64)]))
print(
  "OneHot [-1, 3, 1] depth 3:", run("OneHot", [np.array([-1, 3, 1], np.int64), np.array([3], np.int64), f(0.0, 1.0)])
)
print("ReduceSum int8:", run("ReduceSum", [np.array([100, 100, 100], np.int8)], {"keepdims": 0}, opset=13))
print("ReduceSum int32 overflow:", run("ReduceSum", [np.array([2**30] * 3, np.int32)], {"keepdims": 0}, opset=13))
print("ReduceProd int32:", run("ReduceProd", [np.array([65536, 65536], np.int32)], {"keepdims": 0}))
h = np.array([2048.0] + [1.0] * 1000, np.float16)
print(
  "ReduceSum f16:",
  run("ReduceSum", [h], {"keepdims": 0}, opset=13),
  "ReduceMean f16 100x1000:",
  run("ReduceMean", [np.full(100, 1000.0, np.float16)], {"keepdims": 0}),
)
