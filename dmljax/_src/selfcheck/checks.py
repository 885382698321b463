"""The self-check's checks: each plans one operator (or one top-k strategy) on one type and judges it by bits.

A check makes a :class:`Plan`: NumPy inputs, the computation (traced under ``jax.jit``; the runner traces the plans
of one type together, so that one compilation serves them), and the judge, which returns ``None`` when every result
is exact or a sentence naming the first difference. A check raises :class:`NotApplicable` where the library does
not offer the case (a strategy that does not handle the type; a type an operator refuses everywhere with a
:class:`~dmljax.DescriptorError`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec

import dmljax as dml
from dmljax._src import platform
from dmljax._src.selfcheck import inputs, reference
from dmljax._src.strategies.case import Case, Strategy


class NotApplicable(Exception):
  """The case is outside what the library offers for this type (shown as ``n/a``, never as wrong)."""


@dataclasses.dataclass(frozen=True)
class Plan:
  """``compute(*arguments)`` (traced) gives outputs that ``judge`` (on NumPy arrays) finds exact (``None``) or not."""

  arguments: tuple[Any, ...]
  compute: Callable[..., Any]
  judge: Callable[[Any], str | None]
  placed: bool = False  # arguments already on devices (sharded): traced on their own


Check = Callable[[np.dtype, int], Plan]

# Top-k cases: (shape, k). A strategy runs on the first one its table row would pick it for (else the first it
# handles), and on the whole-row order (k = n) too where its row would pick it for that.
TOP_K_CASES: tuple[tuple[tuple[int, ...], int], ...] = (
  ((8, 200), 200),
  ((16, 1024), 1),
  ((8, 2048), 16),
  ((512, 32), 2),
  ((4, 8192), 64),
)


def _shown(bits: Any, dtype: np.dtype) -> str:
  value = reference.decoded(reference.from_bits(np.array([bits], np.uint64), dtype))[0]
  digits = max(1, reference.bit_width(dtype) // 4)
  return f"0x{int(bits):0{digits}x} ({value})"


def _same_type(name: str, got: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> str | None:
  if got.dtype != dtype or got.shape != shape:
    return f"{name}: {got.dtype}{list(got.shape)} returned, {dtype}{list(shape)} expected"
  return None


def _direction(largest_first: bool) -> str:
  return "decreasing" if largest_first else "increasing"


def judge_selection(
  what: str, x: np.ndarray, k: int, largest_first: bool, values: np.ndarray, indices: np.ndarray
) -> str | None:
  """Indices equal to the reference's, value bits equal to the input's bits at those indices."""
  values, indices = np.asarray(values), np.asarray(indices)
  expected = reference.top_k(x, k, largest_first)
  shape = (*x.shape[:-1], k)
  problem = _same_type(what, values, x.dtype, shape)
  if problem is None and indices.shape != shape:
    problem = f"{what}: indices of shape {indices.shape} returned, {shape} expected"
  if problem:
    return problem
  want = np.take_along_axis(reference.bits_of(x), expected, axis=-1)
  got = reference.bits_of(values)
  bad = np.argwhere((indices != expected) | (got != want))
  if not len(bad):
    return None
  at = tuple(bad[0])
  return (
    f"{what}, row {at[0]}, position {at[-1]}: index {int(indices[at])} with bits {_shown(got[at], x.dtype)}; "
    f"expected index {int(expected[at])} with bits {_shown(want[at], x.dtype)}"
  )


def judge_all(judges: Sequence[Callable[[Any], str | None]]) -> Callable[[Any], str | None]:
  def judge(outputs: Any) -> str | None:
    for one, output in zip(judges, outputs, strict=True):
      problem = one(output)
      if problem:
        return problem
    return None

  return judge


def top_k_cases(strategy: Strategy, dtype: np.dtype) -> list[Case]:
  """The cases a forced ``strategy`` runs on for ``dtype`` (see :data:`TOP_K_CASES`)."""
  handled = [Case(dtype, shape, k, True) for shape, k in TOP_K_CASES]
  handled = [c for c in handled if strategy.handles(c)]
  picked = [c for c in handled if strategy.applies(c)][:1] or handled[:1]
  whole = [c for c in handled if c.k == c.n and c not in picked and strategy.applies(c)][:1]
  return picked + whole


def forced_top_k(strategy: Strategy) -> Check:
  """Top-k with ``strategy`` forced by name, in both directions, on the cases it handles."""

  def check(dtype: np.dtype, seed: int) -> Plan:
    cases = top_k_cases(strategy, dtype)
    if not cases:
      raise NotApplicable(f"{strategy.name} does not handle {dtype.name} on any of the self-check's shapes")
    runs = [(case, largest_first) for case in cases for largest_first in (True, False)]
    arguments = tuple(inputs.rows(dtype, case.shape, largest_first, seed) for case, largest_first in runs)

    def compute(*xs: jax.Array) -> list[Any]:
      with platform.choosing(top_k=strategy.name):
        return [
          dml.top_k(x, case.k, direction=_direction(largest_first))
          for x, (case, largest_first) in zip(xs, runs, strict=True)
        ]

    judges = [
      _selection_judge(f"top_k {_direction(d)} x{list(case.shape)} k={case.k}", x, case.k, d)
      for x, (case, d) in zip(arguments, runs, strict=True)
    ]
    return Plan(arguments, compute, judge_all(judges))

  return check


def _selection_judge(what: str, x: np.ndarray, k: int, largest_first: bool) -> Callable[[Any], str | None]:
  return lambda output: judge_selection(what, x, k, largest_first, *output)


def _index_judge(what: str, want: np.ndarray) -> Callable[[Any], str | None]:
  def judge(got: Any) -> str | None:
    got = np.asarray(got)
    if got.shape != want.shape:
      return f"{what}: shape {got.shape} returned, {want.shape} expected"
    bad = np.flatnonzero(got != want)
    if len(bad):
      r = int(bad[0])
      return f"{what}, row {r}: index {int(got[r])}; expected {int(want[r])}"
    return None

  return judge


def arg_extreme(find_max: bool) -> Check:
  """argmax (``find_max``) or argmin along the last axis, in both directions (first and last index on ties)."""
  function = dml.argmax if find_max else dml.argmin

  def check(dtype: np.dtype, seed: int) -> Plan:
    x = inputs.rows(dtype, (8, 300), find_max, seed)
    directions = (False, True)  # last
    judges = [
      _index_judge(f"{function.__name__} {_direction(last)}", reference.arg_extreme(x, find_max, last))
      for last in directions
    ]
    return Plan(
      (x,),
      lambda x: [function(x, -1, direction=_direction(last)) for last in directions],
      judge_all(judges),
    )

  return check


def extreme(find_max: bool) -> Check:
  """REDUCE's MAX (``find_max``) or MIN along the last axis: NaN where a row holds one, else an extreme element."""
  name = "max" if find_max else "min"

  def check(dtype: np.dtype, seed: int) -> Plan:
    x = inputs.rows(dtype, (8, 300), not find_max, seed)

    def judge(got: Any) -> str | None:
      got = np.asarray(got)
      problem = _same_type(f"reduce {name}", got, dtype, x.shape[:-1])
      if problem:
        return problem
      bad = np.flatnonzero(~reference.equal_to_extreme(x, got, find_max))
      if len(bad):
        r = int(bad[0])
        return f"reduce {name}, row {r}: {_shown(reference.bits_of(got)[r], dtype)}"
      return None

    return Plan((x,), lambda x: dml.reduce(x, name, -1), judge)

  return check


def _gathered_indices(rng: np.random.Generator, sizes: Sequence[int], count: int) -> np.ndarray:
  return np.stack([rng.integers(-s - 3, s + 3, size=count) for s in sizes], axis=-1).astype(np.int32)


def judge_gather(what: str, x: np.ndarray, indices: np.ndarray, got: Any) -> str | None:
  """The output's bits equal the input's at the wrapped and clamped index tuples."""
  got = np.asarray(got)
  q = indices.shape[-1]
  want = reference.bits_of(x)[reference.gathered_positions(indices, x.shape[:q])]
  problem = _same_type(what, got, x.dtype, want.shape)
  if problem:
    return problem
  bad = np.argwhere(reference.bits_of(got) != want)
  if len(bad):
    at = tuple(bad[0])
    return (
      f"{what}, output {[int(i) for i in at]} (index tuple {indices[at[0]].tolist()}): bits "
      f"{_shown(reference.bits_of(got)[at], x.dtype)}; expected {_shown(want[at], x.dtype)}"
    )
  return None


def _gather_judge(what: str, x: np.ndarray, indices: np.ndarray) -> Callable[[Any], str | None]:
  return lambda got: judge_gather(what, x, indices, got)


def gather(dtype: np.dtype, seed: int) -> Plan:
  """gather_nd of single elements and of whole rows, negative and out-of-range indices included."""
  rng = np.random.default_rng(seed)
  x = inputs.rows(dtype, (8, 64), True, seed)
  pairs = _gathered_indices(rng, x.shape, 100)
  rows = _gathered_indices(rng, x.shape[:1], 12)
  return Plan(
    (x, pairs, rows),
    lambda x, pairs, rows: [dml.gather_nd(x, pairs), dml.gather_nd(x, rows)],
    judge_all([_gather_judge("gather_nd of elements", x, pairs), _gather_judge("gather_nd of rows", x, rows)]),
  )


def one_hot(dtype: np.dtype, seed: int) -> Plan:
  """one_hot with on and off values of special bit patterns, every index policy (negative, out of range), under
  both rules for a negative index (off, as ``jax.nn.one_hot``; counted from the end, as DirectML)."""
  rng = np.random.default_rng(seed)
  pool = inputs.special_bits(dtype)
  # A negative NaN with a payload on, another NaN (signalling where the type has one) off; -0.0 and +0.0 where the
  # type has no NaN.
  nan = np.isnan(reference.decoded(reference.from_bits(pool, dtype))) if reference.is_float(dtype) else pool < 0
  on_bits, off_bits = (int(pool[nan].max()), int(pool[nan].min())) if nan.sum() > 1 else (int(pool[-1]), int(pool[0]))
  on, off = (reference.from_bits(np.array([b], np.uint64), dtype) for b in (on_bits, off_bits))
  depth = 7
  indices = rng.integers(-depth - 2, depth + 2, size=40).astype(np.int32)
  wants = {
    rule: np.where(
      np.arange(depth) == reference.hot_positions(indices, depth, from_end=rule == "from_end")[:, None],
      np.uint64(on_bits),
      np.uint64(off_bits),
    )
    for rule in ("off", "from_end")
  }
  rules: tuple[Literal["off", "from_end"], ...] = ("off", "from_end")

  def judge_one(rule: str, got: Any) -> str | None:
    want = wants[rule]
    got = np.asarray(got)
    problem = _same_type("one_hot", got, dtype, want.shape)
    if problem:
      return problem
    bad = np.argwhere(reference.bits_of(got).astype(np.uint64) != want)
    if len(bad):
      at = tuple(bad[0])
      shown = _shown(reference.bits_of(got)[at], dtype)
      expected = _shown(want[at], dtype)
      return (
        f"one_hot (negative_indices={rule!r}) of index {int(indices[at[0]])}, position {int(at[1])}: bits {shown}; "
        f"expected {expected}"
      )
    return None

  def compute(indices: Any, on: Any, off: Any) -> list[Any]:
    return [
      dml.one_hot(indices, depth, on_value=on[0], off_value=off[0], dtype=dtype, negative_indices=rule)
      for rule in rules
    ]

  return Plan(
    (indices, on, off),
    compute,
    lambda outputs: next((p for p in map(judge_one, rules, outputs) if p), None),
  )


AXIS_TYPES = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}


def _mesh(kind: str) -> jax.sharding.Mesh:
  return jax.make_mesh((len(jax.devices()),), ("d",), axis_types=(AXIS_TYPES[kind],))


def _place(x: np.ndarray, mesh: jax.sharding.Mesh, spec: PartitionSpec) -> jax.Array:
  return jax.device_put(x, NamedSharding(mesh, spec))


def sharded_top_k(kind: str) -> Check:
  """Top-k of rows split over every local device (``kind`` mesh axes), the table's own pick, both directions."""

  def check(dtype: np.dtype, seed: int) -> Plan:
    count, k, mesh = len(jax.devices()), 40, _mesh(kind)
    xs = [inputs.rows(dtype, (4, 256 * count), d, seed) for d in (True, False)]
    judges = [
      _selection_judge(f"top_k {_direction(d)} x{list(x.shape)} k={k} over {count} devices ({kind} axes)", x, k, d)
      for x, d in zip(xs, (True, False), strict=True)
    ]
    return Plan(
      tuple(_place(x, mesh, PartitionSpec(None, "d")) for x in xs),
      lambda dec, inc: [dml.top_k(dec, k), dml.top_k(inc, k, direction="increasing")],
      judge_all(judges),
      placed=True,
    )

  return check


def sharded_arg_extreme(kind: str) -> Check:
  """argmax and argmin along rows split over every local device (``kind`` mesh axes)."""

  def check(dtype: np.dtype, seed: int) -> Plan:
    count, mesh = len(jax.devices()), _mesh(kind)
    xs = [inputs.rows(dtype, (4, 64 * count), find_max, seed) for find_max in (True, False)]
    judges = [
      _index_judge(
        f"{'argmax' if find_max else 'argmin'} over {count} devices ({kind} axes)",
        reference.arg_extreme(x, find_max, last=False),
      )
      for x, find_max in zip(xs, (True, False), strict=True)
    ]
    return Plan(
      tuple(_place(x, mesh, PartitionSpec(None, "d")) for x in xs),
      lambda high, low: [dml.argmax(high, -1), dml.argmin(low, -1)],
      judge_all(judges),
      placed=True,
    )

  return check


def sharded_gather(kind: str) -> Check:
  """gather_nd of elements and of rows from a table whose rows are split over every local device."""

  def check(dtype: np.dtype, seed: int) -> Plan:
    count, mesh = len(jax.devices()), _mesh(kind)
    rng = np.random.default_rng(seed)
    x = inputs.rows(dtype, (4 * count, 32), True, seed)
    pairs = _gathered_indices(rng, x.shape, 64)
    rows = _gathered_indices(rng, x.shape[:1], 8)
    what = f"gather_nd of {{}} from rows over {count} devices ({kind} axes)"
    return Plan(
      (_place(x, mesh, PartitionSpec("d", None)),),
      lambda table: [dml.gather_nd(table, pairs), dml.gather_nd(table, rows)],
      judge_all([_gather_judge(what.format("elements"), x, pairs), _gather_judge(what.format("rows"), x, rows)]),
      placed=True,
    )

  return check
