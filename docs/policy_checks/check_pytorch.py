"""Observations behind docs/guide.rst's policy comparison (check_pytorch.py); run by hand, not in CI."""

import torch
import torch.nn.functional as F

print("torch", torch.__version__)
nan, inf = float("nan"), float("inf")
x = torch.tensor([1.0, nan, inf, 2.0, nan])
print("topk largest k=3:", torch.topk(x, 3))
print("topk smallest k=3:", torch.topk(x, 3, largest=False))
print("argmax/argmin NaN:", torch.argmax(x).item(), torch.argmin(x).item())
print("amax/amin NaN:", torch.amax(x).item(), torch.amin(x).item())
negnan = torch.zeros(1) / torch.zeros(1)
print("0/0 signbit:", torch.signbit(negnan).item())
y = torch.tensor([1.0, -inf])
y = torch.cat([y, negnan])
print("topk with 0/0 NaN k=3:", torch.topk(y, 3))
z = torch.tensor([-0.0, 0.0, 1.0, 0.0, -0.0])
v, i = torch.topk(z, 5)
print("topk -0/+0:", i.tolist(), torch.signbit(v).tolist())
v, i = torch.topk(z, 5, largest=False)
print("topk smallest -0/+0:", i.tolist(), torch.signbit(v).tolist())
print("argmax [-0,+0]:", torch.argmax(torch.tensor([-0.0, 0.0])).item())
t = torch.tensor([1.0, 3.0, 3.0, 3.0, 2.0])
print(
  "topk ties k=2:",
  torch.topk(t, 2).indices.tolist(),
  "smallest ties:",
  torch.topk(torch.tensor([2.0, 1.0, 1.0, 1.0]), 2, largest=False).indices.tolist(),
)
print("argmax ties:", torch.argmax(t).item())
big = torch.arange(1000.0) % 7
print("topk ties large k=5:", torch.topk(big, 5).indices.tolist())
print("topk k==n:", torch.topk(torch.arange(3.0), 3).indices.tolist())
try:
  torch.topk(torch.arange(3.0), 4)
except Exception as e:
  print("topk k>n:", type(e).__name__)
print(
  "topk int32 smallest with INT_MIN:", torch.topk(torch.tensor([-(2**31), 0, 5], dtype=torch.int32), 1, largest=False)
)
a = torch.arange(5.0)
for idx in [-1, -6, 7]:
  try:
    print("index", idx, a[torch.tensor([idx])])
  except Exception as e:
    print("index", idx, type(e).__name__)
try:
  print("gather 7:", torch.gather(a, 0, torch.tensor([7])))
except Exception as e:
  print("gather 7:", type(e).__name__)
try:
  print("gather -1:", torch.gather(a, 0, torch.tensor([-1])))
except Exception as e:
  print("gather -1:", type(e).__name__, str(e)[:80])
for idx in ([1, 3], [-1, 1]):
  try:
    print("one_hot", idx, F.one_hot(torch.tensor(idx), 3))
  except Exception as e:
    print("one_hot", idx, type(e).__name__, str(e)[:80])
i8 = torch.tensor([100, 100, 100], dtype=torch.int8)
print("sum int8:", torch.sum(i8), torch.sum(i8).dtype, "sum dtype=int8:", torch.sum(i8, dtype=torch.int8))
print("sum int32 overflow:", torch.sum(torch.tensor([2**30] * 3, dtype=torch.int32)))
print("prod int32:", torch.prod(torch.tensor([65536, 65536], dtype=torch.int32)))
h = torch.tensor([2048.0] + [1.0] * 1000, dtype=torch.float16)
print(
  "sum f16 [2048]+1000 ones:",
  torch.sum(h).item(),
  "mean f16 100x1000:",
  torch.mean(torch.full((100,), 1000.0, dtype=torch.float16)).item(),
)
z3 = torch.zeros(3, requires_grad=True)
torch.linalg.vector_norm(z3).backward()
print("grad vector_norm at 0:", z3.grad)
z3 = torch.zeros(3, requires_grad=True)
torch.norm(z3).backward()
print("grad torch.norm at 0:", z3.grad)
z3 = torch.zeros(3, requires_grad=True)
torch.sqrt((z3 * z3).sum()).backward()
print("grad sqrt(sum sq) at 0:", z3.grad)
ni = torch.full((3,), -inf, requires_grad=True)
lse = torch.logsumexp(ni, 0)
lse.backward()
print("logsumexp all -inf:", lse.item(), "grad:", ni.grad)
tt = torch.tensor([1.0, 3.0, 3.0], requires_grad=True)
torch.amax(tt).backward()
print("grad amax ties:", tt.grad)
tt = torch.tensor([1.0, 3.0, 3.0], requires_grad=True)
torch.max(tt).backward()
print("grad max() ties:", tt.grad)
tt = torch.tensor([[1.0, 3.0, 3.0]], requires_grad=True)
torch.max(tt, dim=1).values.sum().backward()
print("grad max(dim) ties:", tt.grad)
