"""The README's code runs and its comments tell the truth."""

from __future__ import annotations

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmljax as dml

README = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text()


def _two_paths_namespace() -> dict:
  code = re.search(r"## Two paths, one implementation\n\n```python\n(.*?)```", README, re.S)
  assert code is not None
  namespace: dict = {}
  exec(compile(code.group(1), "README.md", "exec"), namespace)
  return namespace


def test_two_paths_example_matches_its_comments() -> None:
  ns = _two_paths_namespace()
  assert ns["best"].tolist() == [3, 3] and ns["best"].dtype == jnp.argmax(ns["logits"], 1).dtype == jnp.int32
  assert int(ns["first_min"]) == 2
  assert ns["rows"].tolist() == [[4.0, 5.0], [4.0, 5.0], [4.0, 5.0]]
  np.testing.assert_allclose(ns["lse"], np.log(np.exp(np.float64([0, 1, 10, 11])).sum(keepdims=True)), rtol=1e-6)
  assert ns["hot"].tolist() == [[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]]
  assert ns["values"].tolist() == [[0.0, 1.0]] and ns["indices"].tolist() == [[0, 1]]
  assert ns["indices"].dtype == jnp.uint32
  values, indices = dml.top_k(ns["logits"], 2)
  assert indices.tolist() == [[3, 2], [3, 0]]
  assert values[0].tolist() == [11.0, 10.0] and np.isnan(values[1, 0]) and values[1, 1] == 3.0


def test_the_error_shown_is_the_error_raised() -> None:
  shown = re.search(r"DescriptorError: (top_k: 2 problems:\n.*?)\n```", README, re.S)
  assert shown is not None
  with pytest.raises(dml.DescriptorError) as error:
    jax.jit(lambda x, k: dml.top_k(x, k, direction="down"))(jnp.ones(3), 2)
  flat = " ".join(shown.group(1).split())
  assert flat == " ".join(str(error.value).split())


def _model_snippets() -> str:
  section = re.search(r"## Using dmljax in a JAX model\n(.*?)\n## ", README, re.S)
  assert section is not None
  blocks = re.findall(r"```python\n(.*?)```", section.group(1), re.S)
  assert len(blocks) >= 3, "decoding, MoE routing and kNN"
  return "\n".join(blocks)


def test_the_model_snippets_run_and_give_what_they_say() -> None:
  namespace: dict = {}
  exec(compile(_model_snippets(), "README.md", "exec"), namespace)
  if "next_tokens" in namespace:
    assert namespace["next_tokens"].shape == (4,) and namespace["next_tokens"].dtype == jnp.int32
  grads, params = namespace["grads"], namespace["params"]
  assert jax.tree.structure(grads) == jax.tree.structure(params)
  assert all(bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).sum()) > 0 for g in jax.tree.leaves(grads))
  # kNN on its own training points: every point is its own nearest neighbour, and the labels are separable.
  predicted, labels = namespace["predicted"], namespace["train_labels"][:20]
  assert predicted.dtype == jnp.int32 and (predicted == labels).mean() >= 0.9


def test_the_readme_is_a_guide_first() -> None:
  lines = README.splitlines()
  assert len(lines) <= 200
  # The first screen: what dmljax is, the Quick start, then how to use it in a model.
  headings = [line for line in lines if line.startswith("## ")]
  assert headings[:2] == ["## Quick start", "## Using dmljax in a JAX model"]
  assert 'pip install ".[test]" && python -m pytest -q -n auto --dist loadfile' in README
  assert "pip install . && python examples/quickstart.py" in README
  assert "`dml.gather_nd(train_labels, nearest[..., None])`" in README or "nearest[..., None]" in README
  # Every local link points at a file of the repository.
  root = pathlib.Path(__file__).resolve().parent.parent
  for target in re.findall(r"\]\(((?:docs|examples)/[^)#]+)\)", README):
    assert (root / target).is_file(), target
  # The pages a user needs are linked, and the README names what they are for.
  linked = set(re.findall(r"\]\(((?:docs|examples)/[^)#]+)\)", README))
  missing = {"docs/sampling.rst", "docs/cpu_kernel.rst", "docs/selfcheck.rst", "docs/testing.rst"} - linked
  assert not missing, missing
  for named in ("dml.cpu_kernel_status()", "pip wheel .", "benchmarks/device/check.sh"):
    assert named in README, named


def _ci_lines() -> set[tuple[str, str]]:
  """The (Python, jax) lines .ci/run runs the suite (or its release-dependent tests) on: the floor's venv and each
  .ci/jax-line call."""
  root = pathlib.Path(__file__).resolve().parent.parent
  run = (root / ".ci" / "run").read_text()
  lines = {(python, release) for python, release in re.findall(r"^\.ci/jax-line (\S+) (\S+) \S+$", run, re.M)}
  return lines | {("3.11", "floor")}


def test_the_supported_versions_are_the_ones_ci_runs() -> None:
  """The README, pyproject.toml and the Testing page name the Pythons and jax releases CI runs the suite on."""
  root = pathlib.Path(__file__).resolve().parent.parent
  lines = _ci_lines()
  pythons = {python for python, _ in lines}
  assert pythons == {"3.11", "3.12", "3.13"}, lines
  assert {release for _, release in lines} >= {"newest", "0.11.2"}, lines
  pyproject = (root / "pyproject.toml").read_text()
  classifiers = set(re.findall(r'"Programming Language :: Python :: (3\.\d+)"', pyproject))
  assert classifiers == pythons
  quick_start = README.split("## Quick start", 1)[1].split("```", 1)[0]
  for python in pythons:
    assert python in quick_start, python
  newest = re.search(r"jaxlib\s+0\.10\.0 to (\S+), the newest release", quick_start)
  assert newest is not None, quick_start
  testing = (root / "docs" / "testing.rst").read_text()
  table = testing.split("Supported jax releases", 1)[1].split("What changed between releases", 1)[0]
  assert f"**0.10.0 to {newest.group(1)}**" in testing
  for python, release in lines - {("3.11", "floor")}:
    call = f".ci/jax-line {python} {release}"
    assert call in table, call
