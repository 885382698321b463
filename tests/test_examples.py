"""Runs every program in examples/ on its reduced settings (``main(fast=True)``) and checks its success criteria.

Each example asserts its own criteria inside ``main``; the tests restate the bars on the returned figures so
that a weakened example cannot pass silently. The examples run in-process under the suite's strict JAX
configuration (strict dtype promotion, rank promotion raises, warnings are errors).
"""

import importlib.util
import pathlib
import sys

import numpy as np
import pytest
from _helpers import EXAMPLES, load_example, peer

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


load = load_example


def check_picture(result: dict, path: pathlib.Path) -> None:
  assert result["plotted"] == HAS_MATPLOTLIB
  assert path.exists() == HAS_MATPLOTLIB
  if HAS_MATPLOTLIB:
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_digits_classifier(tmp_path):
  peer("sklearn")  # the example's data set
  example = load("digits_classifier")
  result = example.main(fast=True, out_dir=tmp_path)
  # The reduced settings must clear the full program's bar: 95% test accuracy.
  assert result["bar"] == 0.95
  assert result["test_accuracy"] >= 0.95
  assert result["test_top3_accuracy"] >= result["test_accuracy"]
  check_picture(result, tmp_path / "digits_training.png")


def test_digits_cross_entropy_matches_a_numpy_log_softmax():
  peer("sklearn")
  example = load("digits_classifier")
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(6, 10)).astype(np.float32) * 5
  labels = rng.integers(0, 10, size=6).astype(np.int32)
  shifted = logits.astype(np.float64) - logits.max(1, keepdims=True)
  expected = np.mean(np.log(np.exp(shifted).sum(1)) - shifted[np.arange(6), labels])
  np.testing.assert_allclose(float(example.cross_entropy(logits, labels)), expected, rtol=1e-5)
  top1, top3 = example.accuracies(logits, labels)
  np.testing.assert_allclose(float(top1), np.mean(np.argmax(logits, 1) == labels), rtol=1e-6)
  in_top3 = (np.argsort(-logits, axis=1, kind="stable")[:, :3] == labels[:, None]).any(1)
  np.testing.assert_allclose(float(top3), np.mean(in_top3), rtol=1e-6)


def test_knn_point_clouds(tmp_path):
  result = load("knn_point_clouds").main(fast=True, out_dir=tmp_path)
  assert result["index_mismatches"] == 0
  assert result["feature_mismatches"] == 0
  assert result["distance_error"] < 1e-4
  assert result["median_normal_angle"] < 5.0
  assert result["voted_accuracy"] > result["noisy_accuracy"] + 0.05
  check_picture(result, tmp_path / "knn_point_clouds.png")


def test_moe_layer(tmp_path):
  result = load("moe_layer").main(fast=True, out_dir=tmp_path)
  assert result["last_loss"] < 0.5 * result["first_loss"]
  assert result["task_mse"] < result["affine_mse"] / 4
  check_picture(result, tmp_path / "moe_layer.png")


def test_lm_decoding(tmp_path):
  result = load("lm_decoding").main(fast=True, out_dir=tmp_path)
  assert result["outside_top_k"] == 0
  assert result["score_error"] < 1e-3
  assert result["held_out_loss"] < 1.0
  assert result["valid_sampled"] > 0.9
  assert result["valid_beams"] > 0.9
  check_picture(result, tmp_path / "lm_decoding.png")


def test_sharded_decoding(monkeypatch):
  monkeypatch.syspath_prepend(str(EXAMPLES))  # the example imports examples/local_cluster.py, its launcher
  result = load("sharded_decoding").main(fast=True)
  assert result["same_tokens"]
  # Only every shard's candidates cross devices, where jax.lax.top_k gathers all the logits.
  assert result["dml_bytes"] <= result["candidate_bytes"] < result["logit_bytes"] <= result["lax_bytes"]
  assert result["sample_bytes"] < result["logit_bytes"] // 10  # per-row sums and candidates, not the vocabulary
  assert result["distinct_tokens"] > 50  # 8 prompts x 12 steps, sampled, not a fixed point


@pytest.mark.parametrize("name", ["digits_classifier", "knn_point_clouds", "moe_layer", "lm_decoding"])
def test_examples_skip_only_the_picture_without_matplotlib(name, tmp_path, monkeypatch):
  if name == "digits_classifier":
    peer("sklearn")
  example = load(name)
  monkeypatch.setitem(sys.modules, "matplotlib", None)
  path = tmp_path / "picture.png"
  if name == "digits_classifier":
    drawn = example.plot({"step": [1], "loss": [1.0], "test_top1": [0.5], "test_top3": [0.9]}, path)
  elif name == "knn_point_clouds":
    drawn = example.plot(np.zeros((1, 4, 3)), np.zeros((1, 4, 2), int), np.zeros((1, 4)), path)
  elif name == "moe_layer":
    drawn = example.plot([1.0], example.init(example.jax.random.key(0)), path)
  else:
    drawn = example.plot([1.0], path)
  assert drawn is False
  assert not path.exists()


def test_quickstart_shows_directml_s_examples_and_a_model(capsys):
  quickstart = load("quickstart")
  assert quickstart.main() == 0
  shown = capsys.readouterr().out
  assert "32 of 32 runs match DirectML's pages" in shown
  assert "in a model: sampling matches NumPy, kNN matches NumPy" in shown
