"""``python -m dmljax.selfcheck``: its reference, its CPU run, and that it names a wrong, refused or crashing cell.

The CPU run covers a few types of every kind here (a float, bfloat16, a float8 whose NaN is 0x80, a 4-bit
integer, float64 under x64) to stay within the suite's time; the long profile (``-m long``) runs every type.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import long_profile

from dmljax._src.selfcheck import inputs, reference, runner
from dmljax._src.strategies import dispatch

ROOT = pathlib.Path(__file__).resolve().parent.parent
TYPES = () if long_profile() else ("float32", "bfloat16", "float64", "float8_e4m3fnuz", "int4")  # (): every type


def _bits(values: list[int], dtype: Any) -> np.ndarray:
  return reference.from_bits(np.array(values, np.uint64), np.dtype(dtype))


def test_the_reference_orders_nan_above_inf_and_ties_by_index() -> None:
  x = _bits([0x3F800000, 0xFFC00001, 0x80000000, 0x7F800000, 0x00000000, 0x7FC00000, 0xFF800000], np.float32)
  # NaNs first (both signs, equal: by index), then +inf, 1, then -0.0 and +0.0 tied (by index), then -inf.
  assert reference.top_k(x, 7, largest_first=True).tolist() == [1, 5, 3, 0, 2, 4, 6]
  assert reference.top_k(x, 7, largest_first=False).tolist() == [6, 2, 4, 0, 3, 1, 5]
  assert reference.arg_extreme(x, find_max=False, last=False) == 1  # a NaN is the extreme for argmin too
  assert reference.arg_extreme(x, find_max=True, last=True) == 5


def test_the_reference_decodes_float8_without_a_sign_bit_or_with_nan_at_0x80() -> None:
  fnuz = _bits([0x01, 0x80, 0x81, 0x00], jnp.float8_e4m3fnuz)  # 0x80 is the NaN, 0x81 is negative
  assert reference.top_k(fnuz, 4, largest_first=True).tolist() == [1, 0, 3, 2]
  e8m0 = _bits([0x7F, 0x00, 0xFE, 0xFF], jnp.float8_e8m0fnu)  # no sign bit: 0x00 is the smallest, 0xFF NaN
  assert reference.top_k(e8m0, 4, largest_first=False).tolist() == [1, 0, 2, 3]
  four = _bits([0x1, 0x8, 0x0, 0xF], jnp.float4_e2m1fn)  # 0.5, -0.0, +0.0, -6
  assert reference.top_k(four, 4, largest_first=True).tolist() == [0, 1, 2, 3]


def test_the_reference_orders_integer_extremes() -> None:
  x = np.array([0, np.iinfo(np.int64).max, np.iinfo(np.int64).min, -1], np.int64)
  assert reference.top_k(x, 4, largest_first=True).tolist() == [1, 0, 3, 2]
  u = np.array([1, np.iinfo(np.uint64).max, 0], np.uint64)
  assert reference.top_k(u, 3, largest_first=False).tolist() == [2, 0, 1]


def test_the_sampling_reference_orders_drops_nan_and_sums_exactly() -> None:
  x = np.array([[1.0, np.nan, 3.0, 3.0, -0.0, 0.0, -np.inf]], np.float32)
  assert reference.sampling_order(x)[0].tolist() == [2, 3, 0, 4, 5, 1, 6]  # NaN as -inf, ties by index
  assert reference.top_k_keep(x, np.array([3]))[0].tolist() == [True, False, True, True, False, False, False]
  assert reference.top_k_keep(x, np.array([0])).sum() == 7 and reference.top_k_keep(x, np.array([9])).sum() == 7
  ties = np.zeros((1, 4), np.float32)  # probabilities 1/4 each, sums 0.25, 0.5, 0.75, 1 exactly
  # p = 0.75 keeps three, a hair more keeps four; p >= 1 all, p <= 0 the first.
  for p, kept in ((0.75, 3), (0.7500001, 4), (0.5, 2), (1.0, 4), (0.0, 1), (-1.0, 1)):
    assert reference.top_p_keep(ties, np.array([p])).sum() == kept, p
  logits = np.log(np.array([[0.5, 0.25, 0.125, 0.125]])).astype(np.float32)
  assert reference.min_p_keep(logits, np.array([0.3])).sum() == 2  # weights 1, 0.5, 0.25, 0.25
  assert reference.min_p_keep(logits, np.array([0.0])).sum() == 4
  assert reference.min_p_keep(logits, np.array([7.0])).sum() == 1  # min_p above 1 counts as 1
  infinite = np.array([[np.inf, 1.0, np.inf, np.nan]], np.float32)
  assert reference.top_p_keep(infinite, np.array([0.5]))[0].tolist() == [True, False, False, False]
  assert reference.min_p_keep(infinite, np.array([0.5]))[0].tolist() == [True, False, True, False]
  minus_inf = reference.bits_of(np.array([-np.inf], np.float32))[0]
  assert reference.masked_bits(x, reference.top_k_keep(x, np.array([1])))[0].tolist() == [
    minus_inf,
    minus_inf,
    0x40400000,
    *[minus_inf] * 4,
  ]


def test_the_sum_references() -> None:
  x = np.array([[1, 2, 3], [127, 1, 0]], np.int8)
  assert reference.integer_sum(x).tolist() == [6, 0x80]  # 128 wraps to -128
  assert reference.log_sum_exp(np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.nan, np.inf], [0.0, 0.0]])).tolist()[
    :3
  ] == [-np.inf, np.inf, pytest.approx(np.nan, nan_ok=True)]
  assert reference.ulp(np.array([1.0, 0.0]), np.dtype(np.float32)).tolist() == [2.0**-23, 2.0**-149]


def test_the_inputs_hold_no_subnormal_and_every_special_value() -> None:
  for dtype in inputs.types():
    pool = inputs.special_bits(dtype)
    assert (reference.bits_of(reference.from_bits(pool, dtype)) == pool).all(), dtype
    if reference.is_float(dtype):
      values = reference.decoded(reference.from_bits(pool, dtype))
      with np.errstate(invalid="ignore"):
        tiny = (values != 0) & (np.abs(values) < float(jnp.finfo(dtype).smallest_normal))
      assert not tiny.any(), dtype
  bf16 = set(inputs.special_bits(np.dtype(jnp.bfloat16)).tolist())
  assert {0x8000, 0x0000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81} <= bf16  # ±0, ±inf, quiet/payload/signalling


def _selfcheck(*arguments: str) -> subprocess.CompletedProcess[str]:
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["PYTHONPATH"] = str(ROOT)
  command = [sys.executable, "-m", "dmljax.selfcheck", *arguments]
  return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, cwd=ROOT, env=env)


@pytest.mark.deep
def test_the_cpu_run_is_exact_and_prints_a_table_per_section(tmp_path: pathlib.Path) -> None:
  report = tmp_path / "report.json"
  types = [a for t in TYPES for a in ("--type", t)]
  done = _selfcheck("--section", "selection", "--section", "reduce", "--json", str(report), *types)
  assert done.returncode == 0, done.stdout + done.stderr
  out = done.stdout
  for field in ("platform        cpu (strategy table: cpu)", "device kind", "jax / jaxlib", "dmljax", "C++ CPU kernel"):
    assert field in out
  header = next(line for line in out.splitlines() if line.startswith("type "))
  names = [s.name for s in dispatch.TABLES["cpu"]]
  assert header.split()[: 1 + len(names)] == ["type", *names]
  for t in TYPES:
    rows = [line for line in out.splitlines() if line.startswith(f"{t} ")]
    assert len(rows) == 2, out  # one line in each table
    assert all(set(row.split()[1:]) <= {"exact", "n/a"} for row in rows), rows
  assert "sum exact  sum tol  logsumexp exact  logsumexp tol" in out
  assert "Every result is exact." in out
  # Each section timed on its own (the progress lines on stderr, and the JSON), and no warning of the check's own.
  assert "Warning" not in done.stderr, done.stderr
  for section in ("selection", "reduce"):
    assert f"\n{section}: " in "\n" + done.stderr
  data = json.loads(report.read_text())
  assert [s["name"] for s in data["sections"]] == ["selection", "reduce"]
  for s in data["sections"]:
    assert s["seconds"] > 0
    assert len(s["rows"]) == len(TYPES) if TYPES else len(s["rows"]) > 5  # every type: more than the default's
  assert data["counts"]["WRONG"] == data["counts"]["ERROR"] == 0


def test_the_sampling_section_takes_float_logits_only() -> None:
  done = _selfcheck("--quiet", "--section", "sampling", "--type", "float32", "--type", "float64", "--type", "int8")
  assert done.returncode == 0, done.stdout + done.stderr
  table = done.stdout.split("\nsampling: ")[1]
  assert "top_k_mask  top_p_mask  min_p_mask  sample" in table
  rows = [line.split()[0] for line in table.splitlines()[2:] if line and not line[0].isdigit()][:3]
  assert rows[:2] == ["float32", "float64"] and "int8" not in table  # a type the whole section refuses: left out


def test_with_several_devices_the_sharded_checks_run() -> None:
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "PYTHONPATH": str(ROOT)}
  sharded = ("top_k auto", "top_k explicit", "arg auto", "arg explicit")
  command = [sys.executable, "-m", "dmljax.selfcheck", "--quiet", "--type", "float32"]
  command += [a for check in sharded for a in ("--check", check)]
  done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, cwd=ROOT, env=env)
  assert done.returncode == 0, done.stdout + done.stderr
  assert "device kind     cpu x 2" in done.stdout
  header = next(line for line in done.stdout.splitlines() if line.startswith("type "))
  assert {c.strip() for c in header.split("  ") if c.strip()} == {"type", *sharded}


def _broken(name: str, **changes: Any) -> dispatch.Strategy:
  return dataclasses.replace(dispatch.BY_NAME[name], **changes)


def _with(monkeypatch: pytest.MonkeyPatch, strategy: dispatch.Strategy) -> None:
  table = tuple(strategy if s.name == strategy.name else s for s in dispatch.TABLES["cpu"])
  monkeypatch.setitem(dispatch.TABLES, "cpu", table)
  monkeypatch.setitem(dispatch.BY_NAME, strategy.name, strategy)
  jax.clear_caches()  # the library's jitted entry points keep what they traced under the same choice


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
  """``monkeypatch``, then the original strategies back and nothing traced with a broken one kept."""
  yield monkeypatch
  monkeypatch.undo()
  jax.clear_caches()


def _swapped(select: Callable[[jax.Array, Any], tuple[jax.Array, jax.Array]]) -> Any:
  def wrong(x: jax.Array, case: Any) -> tuple[jax.Array, jax.Array]:
    values, indices = select(x, case)

    def swap(a: jax.Array) -> jax.Array:  # the first two swapped
      return jnp.concatenate([a[..., 1:2], a[..., :1], a[..., 2:]], axis=-1)

    return swap(values), swap(indices)

  return wrong


def _raising(x: jax.Array, case: Any) -> Any:
  raise RuntimeError("a kernel that does not build")


@pytest.mark.parametrize(
  ("change", "status", "code"),
  [("wrong", "WRONG", 1), ("crash", "ERROR", 1), ("refuse", "n/a", 0)],
)
def test_a_wrong_crashing_or_refusing_strategy_is_named(
  patched: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], change: str, status: str, code: int
) -> None:
  original = dispatch.BY_NAME["cpu_key_view"]
  changes = {
    "wrong": {"select": _swapped(original.select)},
    "crash": {"select": _raising},
    "refuse": {"handles": lambda case: False},
  }[change]
  _with(patched, _broken("cpu_key_view", **changes))
  assert runner.main(["--quiet", "--type", "float32", "--check", "cpu_key_view", "--check", "gather_nd"]) == code
  out = capsys.readouterr().out
  row = next(line for line in out.splitlines() if line.startswith("float32 "))
  assert row.split()[1:] == [status, "exact"], out
  if code:
    cell = next(line for line in out.splitlines() if line.strip().startswith("float32 / cpu_key_view:"))
    assert {"WRONG": "top_k decreasing x[8, 200] k=200, row 0, position 0: index", "ERROR": "RuntimeError"}[
      status
    ] in cell
    assert "attach this whole output to a bug report" in out


def _replaced(patched: pytest.MonkeyPatch, module: Any, name: str, wrong: Callable[..., Any]) -> None:
  original = getattr(module, name)
  patched.setattr(module, name, lambda *a, **k: wrong(original, *a, **k))


@pytest.mark.parametrize(
  ("check", "module", "name", "wrong", "said"),
  [
    (
      "top_p_mask",
      "sampling",
      "top_p_mask",
      lambda f, x, p: f(x, jnp.minimum(p + 0.01, 1.0)),
      "top_p_mask, p per row",
    ),
    ("min_p_mask", "sampling", "min_p_mask", lambda f, x, m: f(x, m / 2), "min_p_mask, min_p per row"),
    ("sample", "sampling", "sample", lambda f, key, x, **k: jnp.argmin(x, -1).astype(jnp.int32), "sample"),
    (
      "sum exact",
      "dml",
      "reduce",
      lambda f, x, fn, a: f(x, fn, a) + (jnp.ones((), x.dtype) if fn == "sum" else 0),
      "reduce sum",
    ),
    (
      "logsumexp tol",
      "dml",
      "reduce",
      lambda f, x, fn, a: f(x, fn, a) * jnp.asarray(1.01, x.dtype),
      "reduce logsumexp",
    ),
  ],
)
def test_a_wrong_sampling_filter_or_sum_is_named(
  patched: pytest.MonkeyPatch,
  capsys: pytest.CaptureFixture[str],
  check: str,
  module: str,
  name: str,
  wrong: Callable[..., Any],
  said: str,
) -> None:
  import dmljax

  _replaced(patched, dmljax.sampling if module == "sampling" else dmljax, name, wrong)
  assert runner.main(["--quiet", "--type", "float32", "--check", check]) == 1
  out = capsys.readouterr().out
  cell = next(line for line in out.splitlines() if line.strip().startswith(f"float32 / {check}:"))
  assert f"WRONG: {said}" in cell, out
