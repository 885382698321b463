"""Observations behind docs/guide.rst's policy comparison (check_tensorflow.py); run by hand, not in CI."""

import os

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf

print("tf", tf.__version__)
nan, inf = np.nan, np.inf
x = tf.constant([1.0, nan, inf, 2.0, nan])
r = tf.math.top_k(x, 3)
print("top_k NaN k=3:", r.values.numpy(), r.indices.numpy())
nn = tf.constant([0.0]) / tf.constant([0.0])
print("tf 0/0 signbit:", np.signbit(nn.numpy()))
y = tf.concat([tf.constant([1.0, -inf]), nn], 0)
r = tf.math.top_k(y, 3)
print("top_k with 0/0 NaN:", r.values.numpy(), r.indices.numpy())
print("argmax/argmin NaN:", tf.argmax(x).numpy(), tf.argmin(x).numpy())
print(
  "reduce_max/min NaN:",
  tf.reduce_max(x).numpy(),
  tf.reduce_min(x).numpy(),
  "reduce_max [nan,1]:",
  tf.reduce_max(tf.constant([nan, 1.0])).numpy(),
  "[1,nan]:",
  tf.reduce_max(tf.constant([1.0, nan])).numpy(),
)
z = tf.constant([-0.0, 0.0, 1.0, 0.0, -0.0])
r = tf.math.top_k(z, 5)
print("top_k -0/+0:", r.indices.numpy(), np.signbit(r.values.numpy()))
print("argmax [-0,+0]:", tf.argmax(tf.constant([-0.0, 0.0])).numpy())
t = tf.constant([1.0, 3.0, 3.0, 3.0, 2.0])
print("top_k ties:", tf.math.top_k(t, 2).indices.numpy(), "argmax ties:", tf.argmax(t).numpy())
big = tf.constant(np.arange(1000.0) % 7, tf.float32)
print("top_k ties large k=5:", tf.math.top_k(big, 5).indices.numpy())
print("top_k k==n:", tf.math.top_k(tf.range(3.0), 3).indices.numpy())
try:
  tf.math.top_k(tf.range(3.0), 4)
  print("k>n no error")
except Exception as e:
  print("top_k k>n:", type(e).__name__)
a = tf.range(5.0)
for idx in [-1, -6, 7]:
  try:
    print("gather_nd", idx, tf.gather_nd(a, [[idx]]).numpy())
  except Exception as e:
    print("gather_nd", idx, type(e).__name__, str(e)[:90])
  try:
    print("gather", idx, tf.gather(a, [idx]).numpy())
  except Exception as e:
    print("gather", idx, type(e).__name__, str(e)[:90])
print("one_hot [-1, 3, 1] depth 3:", tf.one_hot([-1, 3, 1], 3).numpy().tolist())
i8 = tf.constant([100, 100, 100], tf.int8)
print("reduce_sum int8:", tf.reduce_sum(i8).numpy(), tf.reduce_sum(i8).dtype)
print("reduce_sum int32 overflow:", tf.reduce_sum(tf.constant([2**30] * 3, tf.int32)).numpy())
print("reduce_prod int32:", tf.reduce_prod(tf.constant([65536, 65536], tf.int32)).numpy())
h = tf.constant([2048.0] + [1.0] * 1000, tf.float16)
print(
  "reduce_sum f16:",
  tf.reduce_sum(h).numpy(),
  "reduce_mean f16 100x1000:",
  tf.reduce_mean(tf.fill([100], tf.constant(1000.0, tf.float16))).numpy(),
)
z3 = tf.Variable(tf.zeros(3))
with tf.GradientTape() as g:
  n = tf.norm(z3)
print("grad tf.norm at 0:", g.gradient(n, z3).numpy())
ni = tf.Variable(tf.fill([3], -inf))
with tf.GradientTape() as g:
  lse = tf.reduce_logsumexp(ni)
print("reduce_logsumexp all -inf:", lse.numpy(), "grad:", g.gradient(lse, ni).numpy())
tt = tf.Variable([1.0, 3.0, 3.0])
with tf.GradientTape() as g:
  m = tf.reduce_max(tt)
print("grad reduce_max ties:", g.gradient(m, tt).numpy())
