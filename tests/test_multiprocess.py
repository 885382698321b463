"""Two JAX processes on this machine, 4 CPU devices each (issue 19, point 1).

``examples/local_cluster.py`` launches tests/multiprocess_worker.py as two processes that join through
``jax.distributed`` on a free loopback port and exchange data through gloo. Every operator runs there under
``jax.jit`` on a global mesh of the 8 devices, on automatic and explicit axes, with the operated axis split
across the two processes; the outputs equal this process's one-device run bit for bit (sums of exponentials
to a few ulps), and the selections move only candidates between devices, as in one process
(tests/test_sharding.py, ``test_only_candidates_cross_devices``).

Every operator in two processes is a wide product: the long profile runs it (``-m long``); the default run's
two-process check is ``examples/sharded_decoding.py`` (tests/test_examples.py).
"""

import json
import pathlib
import time

import jax
import multiprocess_worker as worker
import numpy as np
import pytest
from _helpers import assert_bitwise_equal, load_example

pytestmark = pytest.mark.long
TESTS = pathlib.Path(__file__).resolve().parent
cluster = load_example("local_cluster")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, float]:
  """One launch of the two processes for every test here (the folder of their results, the seconds it took)."""
  out_dir = tmp_path_factory.mktemp("multiprocess")
  start = time.monotonic()
  outputs = cluster.launch(TESTS / "multiprocess_worker.py", [str(out_dir)], processes=2, devices=4, timeout=240)
  seconds = time.monotonic() - start
  for output in outputs:
    print(output.strip().splitlines()[-1])
  print(f"two processes: {seconds:.1f} s")
  return out_dir, seconds


def _results(out_dir: pathlib.Path, process: int) -> dict[str, np.ndarray]:
  with np.load(out_dir / f"process_{process}.npz") as data:
    return dict(data)


def _one_process(case: worker.Case) -> list[np.ndarray]:
  return [np.asarray(leaf) for leaf in jax.tree.leaves(jax.jit(case.fn)(*case.args))]


@pytest.mark.parametrize("process", [0, 1])
@pytest.mark.parametrize("case", worker.CASES, ids=[case.name for case in worker.CASES])
def test_each_process_gets_the_one_process_result(
  run: tuple[pathlib.Path, float], case: worker.Case, process: int
) -> None:
  got = _results(run[0], process)
  want = _one_process(case)
  rtol = worker.INEXACT.get(case.name, 0.0)
  for kind in ("auto", "explicit"):
    for n, expected in enumerate(want):
      actual = got[f"{kind}/{case.name}/{n}"]
      what = f"{kind} {case.name} output {n}"
      if rtol and np.issubdtype(expected.dtype, np.floating) and not np.array_equal(actual, expected):
        assert actual.dtype == expected.dtype, what
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=0, err_msg=what)
      else:
        assert_bitwise_equal(actual, expected, what)
    assert f"{kind}/{case.name}/{len(want)}" not in got


@pytest.mark.parametrize("process", [0, 1])
def test_exported_multiprocess_program_round_trips(run: tuple[pathlib.Path, float], process: int) -> None:
  got = _results(run[0], process)
  want = [np.asarray(leaf) for leaf in jax.tree.leaves(jax.jit(worker.export_case)(worker.X))]
  for n, expected in enumerate(want):
    assert_bitwise_equal(got[f"export/{n}"], expected, f"export output {n}")


def _moved(run: tuple[pathlib.Path, float]) -> dict[str, int]:
  moved = [json.loads((run[0] / f"process_{p}.json").read_text()) for p in (0, 1)]
  assert moved[0] == moved[1]  # one SPMD program
  return moved[0]


SHARD = worker.X.nbytes // 8


SELECTIONS = [("top_k", worker.K), ("top_k_increasing", worker.K), ("argmin", 1), ("argmax_last", 1)]


@pytest.mark.parametrize("kind", ["auto", "explicit"])
@pytest.mark.parametrize(("name", "k"), SELECTIONS)
def test_only_candidates_cross_devices(run: tuple[pathlib.Path, float], kind: str, name: str, k: int) -> None:
  """Each device receives every shard's candidates (values and indices), never a shard of the input.

  8 shards of a (4, 2048) float32 array: a shard is 4096 bytes, the array 32768. ``jax.lax.top_k`` gathers
  the whole array; dmljax's top_k gathers 8 shards x 8 candidates x 4 rows x (4 + 4) bytes = 2048 bytes,
  argmin/argmax one candidate a shard (256 bytes).
  """
  moved = _moved(run)
  assert moved["auto/lax.top_k"] >= worker.X.nbytes
  output_sized = 8 * k * worker.ROWS * (4 + 4)
  assert 0 < moved[f"{kind}/{name}"] <= output_sized < SHARD, moved


def test_what_the_other_operators_move(run: tuple[pathlib.Path, float]) -> None:
  """Reductions exchange partial results, gather_nd its output, one_hot nothing (the figures the docs cite)."""
  moved = _moved(run)
  for kind in ("auto", "explicit"):
    assert moved[f"{kind}/reduce"] < SHARD  # 12 reductions of an (8, 512) array, 8 values out of each
    assert moved[f"{kind}/gather_nd"] <= worker.IDS.shape[0] * worker.TABLE.shape[1] * 4  # the output, summed once
    assert moved[f"{kind}/one_hot"] == 0
    assert moved[f"{kind}/grad_top_k"] <= 8 * worker.K * worker.ROWS * (4 + 4)  # the forward's candidates
    assert moved[f"{kind}/grad_gather_nd"] == 0
  assert moved["explicit/arg_several_axes"] < SHARD
  assert moved["explicit/reduce_two_axes"] < SHARD


def test_argmin_over_several_sharded_axes_on_automatic_axes(run: tuple[pathlib.Path, float]) -> None:
  """Over several trailing axes, split on automatic mesh axes, only candidates move: the axes are selected one
  at a time, never merged (merging a split inner axis with another gathered the keys)."""
  moved = _moved(run)
  assert moved["auto/arg_several_axes"] < SHARD and moved["auto/reduce_two_axes"] < SHARD, moved


def test_sampling_moves_per_row_sums_not_the_vocabulary(run: tuple[pathlib.Path, float]) -> None:
  """The filters exchange their candidates (each shard's first 64 per row, value and index: 3 calls, and the row's
  largest for min_p) and, for their searches and the draw, a few int32 per row and pass (each collective counted
  once): a bound per row that does not grow with the vocabulary (this one is small: 2,048 entries over 8 shards)."""
  moved = _moved(run)
  shards, rows = 8, worker.ROWS
  bound = rows * (shards * 8 * (3 * 64 + 1) + 64 * 64)
  for kind in ("auto", "explicit"):
    assert moved[f"{kind}/sampling"] <= bound, (kind, moved[f"{kind}/sampling"], bound)


def test_a_failing_process_stops_the_other_and_shows_both_logs(tmp_path: pathlib.Path) -> None:
  program = tmp_path / "fails.py"
  program.write_text(
    "import sys, time, jax\n"
    "print('process', jax.process_index(), 'of', jax.process_count(), flush=True)\n"
    "if jax.process_index() == 1:\n"
    "  raise RuntimeError('process 1 gives up')\n"
    "time.sleep(600)\n"
  )
  start = time.monotonic()
  with pytest.raises(cluster.ClusterError) as failure:
    cluster.launch(program, processes=2, devices=1, timeout=300)
  assert time.monotonic() - start < 150  # neither process 0's sleep nor the timeout: about 5 s
  message = str(failure.value)
  assert "process 1 exited with status 1" in message
  assert "process 0 of 2" in message and "process 1 of 2" in message
  assert "RuntimeError: process 1 gives up" in message
