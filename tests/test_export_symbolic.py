"""jax.export with symbolic shapes: one exported program for every batch size (and axis length, where jax.lax's own
call exports with one).

Every operator on both paths, and the sampler and its masks, is exported with symbolic dimensions for CPU, CUDA
and TPU at once, serialized, deserialized and called on CPU at two concrete sizes; each call gives the bits the
jitted call gives at that size, with x64 off and on. A dimension that must be concrete is refused with an error that
names it. The bit-level matrix's ``export_symbolic`` column checks the operators against the NumPy reference for
every type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import assert_bitwise_equal, x64
from bit_patterns import sample
from jax import export

import dmljax as dml

PLATFORMS = ("cpu", "cuda", "tpu")
Arg = tuple[str, Any]  # a shape in jax.export's notation ("b, 64") and a dtype
Maker = Callable[[np.random.Generator, tuple[int, ...], Any], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Case:
  """``fn`` exported for ``args`` with symbolic dimensions, called at each of ``sizes`` (values of the symbols)."""

  id: str
  fn: Callable[..., Any]
  args: tuple[Arg, ...]
  sizes: tuple[dict[str, int], ...]
  constraints: tuple[str, ...] = ()
  make: tuple[Maker | None, ...] = ()


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
  return sample(rng, np.dtype(dtype), shape)


def _indices(low: int, high: int) -> Maker:
  return lambda rng, shape, dtype: rng.integers(low, high, shape).astype(dtype)


def _logits(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
  return (3 * rng.standard_normal(shape)).astype(dtype)


_B = ({"b": 3}, {"b": 8})
_BN = ({"b": 3, "n": 70}, {"b": 5, "n": 129})
_F32 = np.float32

_CASES: list[Case] = [
  # top_k: a symbolic batch, and a symbolic row given its least length (as jax.lax.top_k needs).
  Case("top_k", lambda x: dml.top_k(x, 3), (("b, 64", _F32),), _B),
  Case("top_k_k1_increasing", lambda x: dml.top_k(x, 1, direction="increasing"), (("b, 40", np.int8),), _B),
  Case("top_k_whole_row", lambda x: dml.top_k(x, 16), (("b, 16", jnp.bfloat16),), _B),
  Case("top_k_axis0", lambda x: dml.top_k(x, 2, axis=0), (("b, 5", np.uint16),), _B, ("b >= 2",)),
  Case("top_k_long_rows", lambda x: dml.top_k(x, 8), (("b, 4096", _F32),), _B),
  Case("top_k_symbolic_row", lambda x: dml.top_k(x, 5), (("b, n", _F32),), _BN, ("n >= 5",)),
  Case("top_k_symbolic_row_int", lambda x: dml.top_k(x, 3), (("b, n", np.int32),), _BN, ("n >= 3",)),
  # argmin / argmax
  Case("argmax", lambda x: dml.argmax(x, 1), (("b, 64", _F32),), _B),
  Case("argmax_last", lambda x: dml.argmax(x, 1, ties="last"), (("b, n", _F32),), _BN),
  Case("argmin_all", lambda x: dml.argmin(x, (0, 1)), (("b, n", jnp.bfloat16),), _BN),
  Case("argmin_axis0_keepdims", lambda x: dml.argmin(x, 0, keepdims=True), (("b, 6", np.int16),), _B),
  Case("argmax_flat", lambda x: dml.argmax(x), (("b, 3, n", np.uint8),), _BN),
  # gather_nd and one_hot
  Case(
    "gather_nd",
    lambda x, i: dml.gather_nd(x, i),
    (("n, 4", _F32), ("b, 1", np.int32)),
    _BN,
    make=(None, _indices(-150, 150)),
  ),
  Case(
    "gather_nd_batch",
    lambda x, i: dml.gather_nd(x, i, batch_dims=1),
    (("b, 5, 3", np.int8), ("b, 2, 1", np.int16)),
    _B,
    make=(None, _indices(-7, 7)),
  ),
  Case("one_hot", lambda i: dml.one_hot(i, 8), (("b, n", np.int32),), _BN, make=(_indices(-10, 10),)),
  Case(
    "one_hot_from_end",
    lambda i, v: dml.one_hot(i, 6, axis=0, on_value=v[1], off_value=v[0], negative_indices="from_end"),
    (("b", np.int8), ("2", _F32)),
    _B,
    make=(_indices(-8, 8), None),
  ),
  # The descriptor path, its descriptors made from the traced arrays (symbolic sizes kept).
  Case(
    "execute_top_k1",
    lambda x: dml.execute(dml.TopK1Desc.from_inputs(dml.TensorDesc.like(x), axis=1, k=3), x),
    (("b, 32", _F32),),
    _B,
  ),
  Case(
    "execute_argmax",
    lambda x: dml.execute(dml.ArgMaxDesc.from_inputs(dml.TensorDesc.like(x), axes=(0, 1)), x),
    (("b, n", np.float16),),
    _BN,
  ),
  Case(
    "execute_reduce_l2",
    lambda x: dml.execute(dml.ReduceDesc.from_inputs("L2", dml.TensorDesc.like(x), axes=(1,)), x),
    (("b, n", _F32),),
    _BN,
  ),
  Case(
    "execute_gather_nd1",
    lambda x, i: dml.execute(
      dml.GatherND1Desc.from_inputs(dml.TensorDesc.like(x), dml.TensorDesc.like(i), batch_dimension_count=1), x, i
    ),
    (("b, 4, 3", _F32), ("b, 2, 1", np.int32)),
    _B,
    make=(None, _indices(-5, 5)),
  ),
  Case(
    "execute_one_hot",
    lambda i, v: dml.execute(
      dml.OneHotDesc.from_inputs(dml.TensorDesc.like(i), dml.TensorDesc.like(v), axis=1, depth=5), i, v
    ),
    (("b, 1", np.int32), ("1, 2", _F32)),
    _B,
    make=(_indices(-6, 6), None),
  ),
  # The sampler and its masks: a symbolic batch, parameters per row or shared.
  Case(
    "sample",
    lambda x, k, p, t: dml.sampling.sample(jax.random.key(7), x, temperature=t, top_k=k, top_p=p),
    (("b, 512", _F32), ("b", np.int32), ("b", _F32), ("b", _F32)),
    _B,
    make=(
      _logits,
      _indices(0, 40),
      lambda rng, s, d: rng.uniform(0.5, 1.0, s).astype(d),
      lambda r, s, d: np.full(s, 0.8, d),
    ),
  ),
  Case(
    "sample_top_p_only",
    lambda x: dml.sampling.sample(jax.random.key(3), x, temperature=1.0, top_p=0.9),
    (("b, 1024", jnp.bfloat16),),
    _B,
    make=(_logits,),
  ),
  Case(
    "top_k_mask",
    lambda x, k: dml.sampling.top_k_mask(x, k),
    (("b, 300", _F32), ("b", np.int32)),
    _B,
    make=(_logits, _indices(-2, 320)),
  ),
  Case("top_p_mask", lambda x: dml.sampling.top_p_mask(x, 0.8), (("b, 300", _F32),), _B, make=(_logits,)),
  Case("min_p_mask", lambda x: dml.sampling.min_p_mask(x, 0.05), (("b, 300", _F32),), _B, make=(_logits,)),
]

# Every REDUCE function, over the last axis, the leading one and both, symbolic batch and row.
for _function in dml.ReduceFunction:
  _dtype = (
    np.int32 if _function.name in ("SUM", "MULTIPLY", "MAX", "MIN", "ARGMAX", "ARGMIN", "SUM_SQUARE", "L1") else _F32
  )
  for _axes in ((1,), (0,), (0, 1)):
    _CASES.append(
      Case(
        f"reduce_{_function.name.lower()}_{''.join(map(str, _axes))}",
        lambda x, f=_function, a=_axes: dml.reduce(x, f, a),
        (("b, n", _dtype),),
        _BN,
      )
    )
_CASES += [
  Case("reduce_max_int8_wrapping", lambda x: dml.reduce(x - jnp.int8(3), "max", 1), (("b, n", np.int8),), _BN),
  Case("reduce_logsumexp_bf16", lambda x: dml.reduce(x, "logsumexp", 1), (("b, 64", jnp.bfloat16),), _B),
  Case("reduce_mean_complex", lambda x: dml.reduce(x, "mean", 0), (("b, 4", np.complex64),), _B),
  Case("reduce_sum_leading_large", lambda x: dml.reduce(x, "sum", 0), (("b, 2048", _F32),), ({"b": 4}, {"b": 64})),
]
CASES = {case.id: case for case in _CASES}


def _specs(case: Case) -> list[jax.ShapeDtypeStruct]:
  scope = export.SymbolicScope(list(case.constraints))
  return [
    jax.ShapeDtypeStruct(export.symbolic_shape(shape, scope=scope), np.dtype(dtype)) for shape, dtype in case.args
  ]


def _concrete(shape: str, sizes: dict[str, int]) -> tuple[int, ...]:
  return tuple(sizes[d] if d in sizes else int(d) for d in (d.strip() for d in shape.split(",")) if d)


def _arguments(case: Case, sizes: dict[str, int], rng: np.random.Generator) -> list[np.ndarray]:
  makers: Sequence[Maker | None] = case.make or (None,) * len(case.args)
  return [
    (maker or _values)(rng, _concrete(shape, sizes), np.dtype(dtype))
    for (shape, dtype), maker in zip(case.args, makers, strict=True)
  ]


def _check(case: Case) -> None:
  exported = export.export(jax.jit(case.fn), platforms=PLATFORMS)(*_specs(case))
  assert any(not all(isinstance(d, int) for d in a.shape) for a in exported.in_avals)  # the export is symbolic
  called = export.deserialize(exported.serialize())
  rng = np.random.default_rng(sum(map(ord, case.id)))
  for sizes in case.sizes:
    args = _arguments(case, sizes, rng)
    want = jax.tree.leaves(jax.jit(case.fn)(*args))
    got = jax.tree.leaves(called.call(*args))
    assert len(got) == len(want)
    for n, (g, w) in enumerate(zip(got, want, strict=True)):
      assert_bitwise_equal(g, w, f"{case.id} at {sizes}, output {n}")


@pytest.mark.sample(0.25)
@pytest.mark.parametrize("use_x64", [False, True], ids=["x32", "x64"])
@pytest.mark.parametrize("case_id", sorted(CASES))
def test_exported_with_symbolic_shapes_gives_the_jitted_bits_at_every_size(case_id: str, use_x64: bool) -> None:
  if use_x64:
    with x64():
      _check(CASES[case_id])
  else:
    _check(CASES[case_id])


def _export(fn: Callable[..., Any], *specs: tuple[str, Any], constraints: Sequence[str] = ()) -> Any:
  scope = export.SymbolicScope(list(constraints))
  return export.export(jax.jit(fn))(*(jax.ShapeDtypeStruct(export.symbolic_shape(s, scope=scope), d) for s, d in specs))


def test_a_symbolic_row_shorter_than_k_could_be_is_refused_naming_the_dimension() -> None:
  with pytest.raises(dml.DescriptorError, match=r"symbolic dimension n.*constraints=\['n >= 3'\]"):
    _export(lambda x: dml.top_k(x, 3), ("b, n", np.float32))


_MUST_BE_CONCRETE = {
  "k": (lambda x: dml.top_k(x, x.shape[1]), ("b, n", np.float32), r"top_k: k must be a concrete number"),
  "descriptor k": (
    lambda x: dml.execute(dml.TopK1Desc.from_inputs(dml.TensorDesc.like(x), axis=1, k=x.shape[0]), x),
    ("b, 8", np.float32),
    r"TOP_K1: k must be a concrete number",
  ),
  "depth": (lambda i: dml.one_hot(i, i.shape[0]), ("b", np.int32), r"one_hot: depth must be a concrete number"),
  "axis": (lambda x: dml.argmax(x, x.shape[0]), ("b, 8", np.float32), r"argmax: axis must be a concrete number"),
  "index tuple": (
    lambda i: dml.gather_nd(jnp.zeros((4, 4, 4)), i),
    ("b, q", np.int32),
    r"gather_nd: indices.shape\[-1\] \(the index tuple length\) must be a concrete number",
  ),
  "one_hot output depth": (
    lambda i: dml.execute(
      dml.OneHotDesc(
        dml.TensorDesc.like(i),
        dml.TensorDesc(np.float32, (1, 2)),
        dml.TensorDesc(np.float32, (i.shape[0], i.shape[0])),
        1,
      ),
      i,
      jnp.array([[0.0, 1.0]]),
    ),
    ("b, 1", np.int32),
    r"ONE_HOT: output_tensor.sizes\[axis\] must be a concrete number",
  ),
  "vocabulary": (
    lambda x: dml.sampling.sample(jax.random.key(0), x),
    ("b, n", np.float32),
    r"sample: logits' last axis \(the vocabulary\) must be a concrete number",
  ),
}


@pytest.mark.parametrize("name", sorted(_MUST_BE_CONCRETE))
def test_a_size_that_must_be_concrete_is_refused_naming_it_and_how_to_export(name: str) -> None:
  fn, spec, message = _MUST_BE_CONCRETE[name]
  with pytest.raises(dml.DescriptorError, match=message) as info:
    _export(fn, spec, constraints=["n >= 64"] if "n" in spec[0] else [])
  assert "symbolic_shape('b, 64')" in str(info.value) or "constraints" in str(info.value)
