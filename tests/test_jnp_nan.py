"""What ``jnp.max`` and ``jnp.min`` do with a NaN on CPU, measured on the running jax release and held against the
one statement of it in the docs (docs/semantics.rst, "NaN in MAX and MIN"), which dmljax's MAX and MIN differ from.

The docs' table has a row per platform and release the suite covers; a release without a CPU row fails here, so
that the docs record what it does before anyone relies on it.
"""

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmljax as dml

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "semantics.rst"


def _table() -> list[list[str]]:
  text = DOCS.read_text()
  block = text.split(".. jnp-max-nan-begin", 1)[1].split(".. jnp-max-nan-end", 1)[0]
  rows = [line for line in block.strip().splitlines() if line and not line.startswith("=")]
  return [re.split(r"\s{2,}", row.strip()) for row in rows[1:]]  # the header row is the first


def _documented_cpu_row() -> list[str]:
  for row in _table():
    if row[0] == "CPU" and row[1] == jax.__version__:
      return row
  pytest.fail(f"docs/semantics.rst records no CPU row for jax {jax.__version__}: measure it and add one")


def _with_a_nan() -> jax.Array:
  x = np.random.default_rng(0).uniform(1.0, 2.0, (4096, 8)).astype(np.float32)
  x[1234, 5] = np.nan
  return jax.device_put(x, jax.devices("cpu")[0])


@pytest.mark.parametrize("reduce", [jnp.max, jnp.min], ids=["jnp.max", "jnp.min"])
@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_the_docs_say_what_jnp_does_with_a_nan_on_cpu(reduce, jitted: bool) -> None:
  documented = _documented_cpu_row()[2]
  assert documented in ("NaN skipped", "NaN returned"), documented
  x = _with_a_nan()
  fn = jax.jit(reduce) if jitted else reduce
  whole = np.asarray(fn(x))
  per_row = np.asarray((jax.jit(lambda v: reduce(v, axis=1)) if jitted else (lambda v: reduce(v, axis=1)))(x))[1234]
  skipped = not np.isnan(whole)
  assert skipped == (documented == "NaN skipped"), (jax.__version__, float(whole))
  assert np.isnan(per_row) != skipped, "the table's statement holds per row too"


def test_dmljax_max_and_min_return_the_nan() -> None:
  x = _with_a_nan()
  for function in (dml.ReduceFunction.MAX, dml.ReduceFunction.MIN):
    assert np.isnan(np.asarray(jax.jit(lambda v, f=function: dml.reduce(v, f, None))(x)))
    assert np.isnan(np.asarray(dml.reduce(x, function, 1))[1234])
