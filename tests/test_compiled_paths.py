"""Per-path estimates of compiled programs (``benchmarks/compiled/paths.py``): the recorded path, the tree, the cost.

A program with a ``lax.cond`` and two loops, compiled for the CPU (whose HLO names the same Python lines as an
accelerator's), is priced at one second per operation: the costs of two paths must differ by exactly what their
branches and trip counts differ by. Where the compile-only packages are installed (CI's ``aot`` venv), dmljax's
sampling programs compiled for an H100 and a TPU v5e are checked the same way: every conditional and loop the CPU
run recorded is found in the compiled program, the candidates' path runs no loop, the search runs the guide's 32
passes, and each branch 0 (the candidates decide) costs no more than its branch 1. Nothing runs on a device.
"""

from __future__ import annotations

import glob
import sys
import tempfile
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.compiled import availability, hlo, launches, paths

availability.configure()  # before JAX starts its backends: the CPU's only, the accelerators compile-only
FREE = ("parameter", "constant", "get-tuple-element", "tuple", "bitcast")
AOT_PROBLEM = availability.problem("gpu") or availability.problem("tpu")
needs_aot = pytest.mark.skipif(AOT_PROBLEM is not None, reason=f"no accelerator compile: {AOT_PROBLEM}")


def program(x: jax.Array, n: jax.Array) -> jax.Array:
  def work() -> jax.Array:
    return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, jnp.sin(c[1]) * 2.0 + x), (0, x))[1]

  y = lax.cond(jnp.sum(x) > 0, work, lambda: x * 3.0)
  return lax.fori_loop(0, 40, lambda i, v: jnp.cos(v) + v * x, y)


def _cpu_module(fn: Any, *args: Any) -> hlo.Module:
  with tempfile.TemporaryDirectory() as folder:
    jax.jit(fn).lower(*args).compile(compiler_options={"xla_dump_to": folder})
    return hlo.parse(Path(sorted(glob.glob(f"{folder}/*after_optimizations.txt"))[-1]).read_text())


def _one_second(instruction: hlo.Instruction) -> paths.Op | None:
  return None if instruction.opcode in FREE else paths.Op(instruction.name, 1.0, 8, 1)


X = jnp.linspace(-1.0, 2.0, 1000, dtype=jnp.float32)


def test_the_recorded_path_names_each_branch_and_trip_count() -> None:
  path = paths.record(program, X, jnp.int32(3))
  here = Path(__file__).name
  assert path.branches == {(f"cond {here}:program",): 1}
  assert path.trips == {
    (f"loop {here}:program",): 40.0,
    (f"cond {here}:program", "branch 1", f"loop {here}:program.<locals>.work"): 3.0,
  }
  negative = paths.record(program, -X, jnp.int32(3))
  assert negative.branches == {(f"cond {here}:program",): 0}
  assert negative.trips == {(f"loop {here}:program",): 40.0}  # the while loop of branch 1 never ran


def test_the_cost_is_the_branch_taken_and_the_body_times_its_trips() -> None:
  module = _cpu_module(program, X, jnp.int32(3))
  tree = paths.tree(module, _one_second)
  three, seven = (paths.record(program, X, jnp.int32(n)) for n in (3, 7))
  negative = paths.record(program, -X, jnp.int32(3))
  assert paths.keyed(three, tree) == paths.keyed(seven, tree) == paths.keyed(negative, tree) == []
  (cond,) = list(paths.conditionals(tree))
  inner = next(loop for loop in paths.loops(tree) if loop.key[-1].endswith("work"))
  outer = next(loop for loop in paths.loops(tree) if loop is not inner)
  body = paths.cost(inner.body, three, gpu=False).seconds
  condition = paths.cost(inner.condition, three, gpu=False).seconds
  assert body >= 1 and condition >= 1
  cost = {name: paths.cost(tree, path, gpu=False) for name, path in (("3", three), ("7", seven), ("-", negative))}
  # Four more passes: four more bodies and conditions (a loop of unknown trips checks its condition once more).
  assert cost["7"].seconds - cost["3"].seconds == 4 * (body + condition)
  branch_0 = paths.cost(cond.branches[0], negative, gpu=False).seconds
  branch_1 = paths.cost(cond.branches[1], three, gpu=False).seconds
  assert cost["3"].seconds - cost["-"].seconds == branch_1 - branch_0
  assert branch_1 == paths.cost(cond.branches[1], three, gpu=False).seconds >= 3 * (body + condition)
  outer_ops = paths.cost(outer.body, three, gpu=False).seconds * 40
  assert cost["-"].seconds >= outer_ops + branch_0
  # On a GPU every conditional and every check of an unknown loop's condition is a host round trip.
  trips = 1 + sum(t + 1 for loop in paths.loops(tree) if loop.known_trips is None for t in [three.trips[loop.key]])
  gpu = paths.cost(tree, three, gpu=True)
  assert gpu.round_trips == trips
  assert gpu.seconds - cost["3"].seconds == pytest.approx(trips * paths.HOST_ROUND_TRIP_S)


def test_a_path_that_does_not_name_a_reached_conditional_or_loop_is_an_error() -> None:
  tree = paths.tree(_cpu_module(program, X, jnp.int32(3)), _one_second)
  three = paths.record(program, X, jnp.int32(3))
  with pytest.raises(KeyError, match="which branch"):
    paths.cost(tree, paths.Path({}, three.trips, {}), gpu=False)
  with pytest.raises(KeyError, match="how many passes"):
    paths.cost(tree, paths.Path(three.branches, {}, {}), gpu=False)
  assert paths.keyed(paths.Path({("cond elsewhere.py:f",): 0}, {}, {}), tree) == ["cond elsewhere.py:f"]


def test_the_module_s_source_tables_name_the_lines() -> None:
  module = _cpu_module(program, X, jnp.int32(3))
  sources = {module.source(i) for i in module.instructions.values() if i.opcode in ("while", "conditional")}
  assert {(s.file, s.function) for s in sources if s is not None} == {
    (Path(__file__).name, "program"),
    (Path(__file__).name, "program.<locals>.work"),
  }


# --- dmljax's sampling on an H100 and a TPU v5e (CI's aot venv) --------------------------------------------------


# Two kernels of the form jaxlib 0.12's XLA prints: the second reads two elements of the first's tuple in place.
_TUPLE_OPERANDS = """HloModule m

ENTRY %main (p: f32[64,1024]) -> (s32[64,8], u8[64,8]) {
  %p = f32[64,1024]{1,0} parameter(0)
  %first = (s32[64,128]{1,0}, (u8[64,128]{1,0}, s32[]), f32[64,1024]{1,0}) custom-call(%p), custom_call_target="k"
  %second = (s32[64,8]{1,0}, u8[64,8]{1,0}) custom-call(%first#0, %first#2), custom_call_target="k"
  ROOT %out = (s32[64,8]{1,0}, u8[64,8]{1,0}) tuple(%second#0, %second#1)
}
"""


# A Mosaic GPU call as the compiled HLO prints it: its backend config holds the serialized module, whose strings
# (NUL-separated, \00 in the text) hold the module's name, its entry point <name>_mosaic_gpu and the dialect's own.
_MOSAIC_CALL = (
  "HloModule m\n\nENTRY %main (p: f32[8,1024]) -> s32[8,4] {\n  %p = f32[8,1024]{1,0} parameter(0)\n"
  '  ROOT %k.3 = s32[8,4]{1,0} custom-call(%p), custom_call_target="mosaic_gpu_v2", backend_config={kernel_hash = '
  '"h", module = "ML\\EFR\\00stable_mosaic_gpu\\00stable_mosaic_gpu.version\\00mosaic_gpu_init_tma_desc\\00'
  "dmljax_top_k_one_pass\\00"
  'mpmd_map\\00dmljax_top_k_one_pass_mosaic_gpu\\00ordering\\00"}\n}\n'
)


def test_a_mosaic_gpu_call_is_named_by_its_kernel() -> None:
  module = hlo.parse(_MOSAIC_CALL)
  call = module.instructions["k.3"]
  assert launches.pallas_name(call) == "dmljax_top_k_one_pass"
  assert launches.custom_calls(module) == {"mosaic_gpu_v2 (dmljax_top_k_one_pass)": 1}
  assert launches.launch(module, call).category == "pallas"


def test_an_operand_named_in_place_is_its_tuple_element() -> None:
  module = hlo.parse(_TUPLE_OPERANDS)
  second = module.instructions["second"]
  assert second.operands == ["first#0", "first#2"]
  assert [module.instructions[o].shape for o in second.operands] == ["s32[64,128]{1,0}", "f32[64,1024]{1,0}"]
  assert [module.instructions[o].bytes for o in second.operands] == [64 * 128 * 4, 64 * 1024 * 4]
  assert hlo.tuple_elements(module.instructions["first"].shape)[1] == "(u8[64,128]{1,0}, s32[])"
  assert [i.name for i in module.entry.instructions] == ["p", "first", "second", "out"]  # no launch of their own


@pytest.fixture(scope="module")
def sampling() -> Any:
  from benchmarks.sampling import compiled

  dmljax, _ = compiled._programs()
  return compiled, {p.name: p for p in dmljax}


@needs_aot
@pytest.mark.parametrize("target", ["h100", "tpu-v5e"])
@pytest.mark.parametrize("name", ["sample(T=0.7, top_k=k, top_p=0.95)", "sample(top_p=0.95)", "top_k_mask(x, k)"])
def test_sampling_paths_are_found_in_the_compiled_programs(sampling: Any, target: str, name: str) -> None:
  from benchmarks.compiled import devices

  compiled, programs = sampling
  program_ = programs[name]
  shape = (8, 4096)
  tree = compiled._priced(
    target, program_.fn, compiled._placed_args(program_, shape, "float32", devices.devices(target)[0])
  )
  gpu = target == "h100"
  costs = {}
  for scenario in program_.scenarios:
    x = compiled._logits(*shape, "float32", scenario.scale)
    path = paths.record(program_.fn, *compiled._cpu_args(program_, x, scenario.k))
    assert paths.keyed(path, tree) == [], scenario
    costs[scenario.path] = paths.cost(tree, path, gpu=gpu)
    if scenario.path == "candidates":
      # no whole-row loop (a pass per row that needs it) makes a pass, but top-p's row totals (a row whose last
      # candidate weighs a unit needs its whole row's total, as the row-total conditional it replaced)
      assert all(t == 0 for k, t in path.trips.items() if "[row_totals]" not in k[-1]), path.trips
      assert all(b == 0 for k, b in path.branches.items() if "_row_total" not in k[-1])
    else:
      guides = [t for k, t in path.trips.items() if k[-1].endswith("search.py:_guess")]
      assert guides and all(t == 32 for t in guides), path.trips
      assert all(1 <= t <= 400 for k, t in path.trips.items() if k[-1].endswith("search.py:cut")), path.trips
      for cond in paths.conditionals(tree):
        if cond.key in path.branches and "_row_total" not in cond.key[-1]:
          skip, work = (paths.cost(b, path, gpu=gpu).seconds for b in cond.branches)
          assert skip <= work, cond.key
  assert costs["candidates"].seconds < costs["search"].seconds
  if gpu:  # the guide loops have a trip count XLA knows: no host round trip a pass
    assert all(loop.known_trips == 32 for loop in paths.loops(tree) if loop.key[-1].endswith("search.py:_guess"))


@needs_aot
def test_the_tpu_op_floor_is_xla_s_estimate_of_the_least_array_write() -> None:
  from benchmarks.compiled import devices, program

  device = devices.devices("tpu-v5e")[0]
  least = program.compile_program(lambda x: jnp.broadcast_to(x[:1], (8, 128)), devices.place((8,), np.float32, device))
  assert least.codegen is not None
  assert [i.estimated_cycles() for i in least.codegen.instructions.values() if i.estimated_cycles()] == [
    paths.TPU_OP_FLOOR_CYCLES
  ]
  wider = program.compile_program(
    lambda x: jnp.sort(x, axis=-1)[:, :8] + jnp.max(x), devices.place((8, 4096), np.float32, device)
  )
  assert wider.codegen is not None
  # Every fusion and reduction XLA estimates costs the floor or more; one it does not (from libtpu 0.0.50 the custom
  # fusion of the sort whose prefix alone is used) is priced by its bytes on top of the floor, never as free.
  ops = [i for i in wider.codegen.instructions.values() if i.opcode in ("fusion", "reduce")]
  estimated = [i.estimated_cycles() for i in ops if i.estimated_cycles() is not None]
  assert estimated and all(c >= paths.TPU_OP_FLOOR_CYCLES for c in estimated)
  price = paths.tpu_pricer(wider.codegen)
  priced = [price(i) for i in ops]
  assert all(p is not None and p.seconds >= paths.TPU_OP_FLOOR_CYCLES / paths.TPU_CLOCK_HZ for p in priced), priced
