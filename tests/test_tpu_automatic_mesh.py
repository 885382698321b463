"""top_k on automatic mesh axes, compiled (not run) for a TPU slice: benchmarks/compiled/tpu_automatic_mesh.py.

Runs where libtpu is installed (``pip install "jax[tpu]"`` at jax's version: no TPU needed), and is skipped
elsewhere. XLA cannot call custom_partitioning's Python rule on TPUs, so there dmljax gives a matrix's exact keys
to XLA's own TopK, which XLA partitions (and selects other arrays in device-count chunks); this compiles that
for 8 chips of a v5e and checks that only candidates cross chips.
The script runs in a process of its own, as libtpu's settings are read from the environment when it loads.
"""

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
  importlib.util.find_spec("libtpu") is None, reason="libtpu is not installed (jax[tpu] compiles for TPUs)"
)


@pytest.fixture(scope="module")
def report() -> dict:
  # As a module from the repository's root: the process imports this checkout's dmljax.
  command = [
    sys.executable,
    "-m",
    "benchmarks.compiled.tpu_automatic_mesh",
    "--topology",
    "v5e:2x4",
    "--shape",
    "64",
    "32768",
  ]
  done = subprocess.run([*command, "--k", "8"], capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
  assert done.returncode == 0, done.stdout + done.stderr
  return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["automatic", "explicit"])
@pytest.mark.parametrize("name", ["dml.top_k", "dml.argmax"])
def test_selection_compiles_for_a_tpu_slice_and_moves_only_candidates(report: dict, kind: str, name: str) -> None:
  program = report["programs"][f"{kind} {name}"]
  assert "error" not in program, program
  # 8 chips, 64 rows: a shard is 64 x 4096 x 4 bytes = 1 MiB; the candidates are at most 8 x 8 x 64 x 8 bytes.
  candidates = 8 * 8 * 64 * (4 + 4)
  # top_k on automatic axes reads a selected value from the input only where its key merged several (a zero, a
  # NaN): that branch of its conditional all-reduces the k selected values of every row, 64 x 8 x 4 bytes.
  read = 64 * 8 * 4 if (kind, name) == ("automatic", "dml.top_k") else 0
  assert 0 < program["bytes"] <= candidates + read < report["shard_bytes"], program


def test_the_report_shows_why_custom_partitioning_cannot_serve_tpus(report: dict) -> None:
  """The evidence the docs cite: libtpu lacks the extension, and a bare custom_partitioning fails to compile."""
  assert "Custom_Partitioner" not in report["extensions"]["libtpu"]
  assert report["tpu_factory_has_c_api"] is False
  assert "Custom emitter for CustomSPMDPartitioning not found" in report["bare_custom_partitioning"]["error"]
