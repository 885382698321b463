"""Observations behind docs/guide.rst's policy comparison (check_jax_numpy.py); run by hand, not in CI."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

nan, inf = np.nan, np.inf
print("jax", jax.__version__, "numpy", np.__version__)
x = jnp.array([1.0, nan, inf, 2.0, nan], jnp.float32)
print("lax.top_k NaN k=3:", lax.top_k(x, 3))
print("lax.top_k(-x) (smallest via negation) k=3:", lax.top_k(-x, 3))
print("jnp.argmax/argmin NaN:", jnp.argmax(x), jnp.argmin(x), "np:", np.argmax(np.asarray(x)), np.argmin(np.asarray(x)))
print("jnp.max/min NaN:", jnp.max(x), jnp.min(x))
z = jnp.array([-0.0, 0.0, 1.0, 0.0, -0.0], jnp.float32)
print("lax.top_k -0/+0 k=5:", lax.top_k(z, 5)[1], "values signbit", np.signbit(np.asarray(lax.top_k(z, 5)[0])))
print(
  "jnp.argmax([-0,+0]):", jnp.argmax(jnp.array([-0.0, 0.0])), "jnp.argmin([0,-0]):", jnp.argmin(jnp.array([0.0, -0.0]))
)
print("jnp.sort -0/+0:", np.signbit(np.asarray(jnp.sort(jnp.array([0.0, -0.0, 0.0, -0.0])))))
i32 = jnp.array([np.iinfo(np.int32).min, 0, 5], jnp.int32)
print("lax.top_k(-x) int32 with INT_MIN k=1 (smallest):", lax.top_k(-i32, 1))
print("lax.top_k k == n:", lax.top_k(jnp.arange(3.0), 3))
try:
  lax.top_k(jnp.arange(3.0), 4)
except Exception as e:
  print("lax.top_k k>n:", type(e).__name__)
# ties order
print("lax.top_k ties:", lax.top_k(jnp.array([1.0, 3.0, 3.0, 3.0]), 2)[1])
# gather
a = jnp.arange(5.0)
idx = jnp.array([-1, -6, 7])
print("jnp a[idx] (-1,-6,7):", a[idx])
print("jnp.take default (-1,-6,7):", jnp.take(a, idx))
print("jnp.take mode=clip:", jnp.take(a, idx, mode="clip"), "mode=wrap:", jnp.take(a, idx, mode="wrap"))
dn = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
print("lax.gather default mode (-1,-6,7):", lax.gather(a, idx[:, None], dn, (1,)))
try:
  np.asarray(a)[np.array([7])]
except Exception as e:
  print("numpy OOB:", type(e).__name__)
# one-hot
print("jax.nn.one_hot([-1, 3, 1], 3):", jax.nn.one_hot(jnp.array([-1, 3, 1]), 3))
# int wrap
i8 = jnp.array([100, 100, 100], jnp.int8)
print("jnp.sum int8:", jnp.sum(i8), jnp.sum(i8).dtype, " with dtype=int8:", jnp.sum(i8, dtype=jnp.int8))
print("np.sum int8:", np.sum(np.asarray(i8)), np.sum(np.asarray(i8)).dtype)
big = jnp.array([2**30, 2**30, 2**30], jnp.int32)
print("jnp.sum int32 overflow:", jnp.sum(big), jnp.sum(big).dtype)
print("jnp.prod int32 overflow:", jnp.prod(jnp.array([65536, 65536], jnp.int32)))
# f16
h = jnp.array([2048.0] + [1.0] * 1000, jnp.float16)
print(
  "jnp.sum f16 [2048]+1000 ones:",
  jnp.sum(h),
  "lax.reduce_sum f16 (no upcast):",
  lax.reduce(h, jnp.float16(0), lax.add, (0,)),
)
m = jnp.full((100,), 1000.0, jnp.float16)
print(
  "jnp.mean f16 100x1000:",
  jnp.mean(m),
  "np.mean f16:",
  np.mean(np.asarray(m)),
  "np.sum f16 [2048]+ones:",
  np.sum(np.asarray(h)),
)
# subgradients
print("grad jnp.linalg.norm at 0:", jax.grad(jnp.linalg.norm)(jnp.zeros(3)))
print("grad sqrt(sum x^2) at 0:", jax.grad(lambda v: jnp.sqrt(jnp.sum(v * v)))(jnp.zeros(3)))
ninf = jnp.full((3,), -jnp.inf)
print("jax.nn.logsumexp all -inf:", jax.nn.logsumexp(ninf), "grad:", jax.grad(jax.nn.logsumexp)(ninf))
t = jnp.array([1.0, 3.0, 3.0])
print("grad jnp.max ties:", jax.grad(jnp.max)(t), "grad jnp.min ties:", jax.grad(jnp.min)(jnp.array([1.0, 1.0, 3.0])))
print("grad lax.top_k values sum, ties:", jax.grad(lambda v: lax.top_k(v, 1)[0].sum())(t))
a = jnp.arange(5.0)
for i in [-1, -5, -6, -7, -10, 5, 7, 100]:
  print(i, "a[i]=", a[jnp.array(i)], "a[[i]]=", a[jnp.array([i])], "at.get clip", a.at[jnp.array([i])].get(mode="clip"))
zero = jnp.zeros(())
n = jax.jit(lambda z: z / z)(zero)
print("0/0 under jit signbit:", np.signbit(np.asarray(n)), "jnp.nan signbit:", np.signbit(np.float32(jnp.nan)))
x = jnp.array([1.0, -jnp.nan, -jnp.inf])
print("lax.top_k with -NaN:", lax.top_k(x, 3))
print("jnp.argmax -NaN:", jnp.argmax(x), "jnp.max -NaN:", jnp.max(x))
# jnp.argsort, jnp.sort NaN placement
y = jnp.array([3.0, jnp.nan, 1.0, -jnp.nan])
print("jnp.argsort NaN:", jnp.argsort(y), "descending:", jnp.argsort(y, descending=True))
print("np.argsort:", np.argsort(np.asarray(y)))
# jnp.argmax with -0 first
print(
  "jnp.argmax [-0., 0.] ->",
  jnp.argmax(jnp.array([-0.0, 0.0])),
  "jnp.max signbit",
  np.signbit(jnp.max(jnp.array([-0.0, 0.0]))),
)
