"""Small helpers shared by the test modules (not a test module itself)."""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import pathlib
import re
import types
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dmljax as dml

# DirectML type name (as spelled in tests/seed_examples.py) -> NumPy dtype, from SPEC §1.
DML_NUMPY = {
  "FLOAT16": np.dtype(np.float16),
  "FLOAT32": np.dtype(np.float32),
  "FLOAT64": np.dtype(np.float64),
  "INT8": np.dtype(np.int8),
  "INT16": np.dtype(np.int16),
  "INT32": np.dtype(np.int32),
  "INT64": np.dtype(np.int64),
  "UINT8": np.dtype(np.uint8),
  "UINT16": np.dtype(np.uint16),
  "UINT32": np.dtype(np.uint32),
  "UINT64": np.dtype(np.uint64),
}
NUMPY_DML = {dtype: name for name, dtype in DML_NUMPY.items()}

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def peer(name: str) -> types.ModuleType:
  """The module ``name`` of a peer (ONNX, ONNX Runtime, PyTorch, ...), or a skip of the calling test module saying
  which extra installs it: the default run needs only the ``test`` extra, CI installs the peers too."""
  import pytest

  return pytest.importorskip(name, reason=f"needs {name.split('.')[0]}: pip install '.[peers]'")


def long_profile() -> bool:
  """Whether this run is the long profile (``python -m pytest -m long``; see conftest.py): ``deep`` tests go deeper."""
  return os.environ.get("DMLJAX_TEST_PROFILE") == "long"


def ties(direction: Any) -> str:
  """The functional path's ``ties`` for DirectML's ARGMIN/ARGMAX ``axis_direction`` (a name or a member)."""
  decreasing = direction == dml.AxisDirection.DECREASING or str(direction).lower() == "decreasing"
  return "last" if decreasing else "first"


def load_example(name: str) -> types.ModuleType:
  """``examples/<name>.py`` as a module (examples/ is no package)."""
  spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


BFLOAT16 = np.dtype(jnp.bfloat16)
SMALL_FLOATS = (np.dtype(np.float16), BFLOAT16, np.dtype(np.float32))
SMALL_INTS = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32))
WIDE_TYPES = tuple(np.dtype(t) for t in (np.float64, np.int64, np.uint64))


def tensor_desc(name: str, sizes: tuple[int, ...]) -> dml.TensorDesc:
  return dml.TensorDesc(dml.DataType[name], tuple(sizes))


def desc_of(dtype: Any, shape: tuple[int, ...]) -> dml.TensorDesc:
  """The tensor descriptor of an array of ``dtype`` and ``shape`` (DirectML types only)."""
  return tensor_desc(NUMPY_DML[np.dtype(dtype)], shape)


def seed_array(spec: tuple[str, tuple[int, ...], Any]) -> np.ndarray:
  """A seed tensor ``(data_type, sizes, data)`` as a NumPy array, checking the seed's sizes."""
  name, sizes, data = spec
  array = np.array(data, dtype=DML_NUMPY[name])
  assert array.shape == tuple(sizes), (array.shape, sizes)
  return array


def seed_desc(spec: tuple[str, tuple[int, ...], Any]) -> dml.TensorDesc:
  name, sizes, _ = spec
  return tensor_desc(name, sizes)


@contextlib.contextmanager
def x64() -> Iterator[None]:
  """``jax_enable_x64`` on inside the block, restored after (whatever jax version)."""
  if hasattr(jax, "enable_x64"):
    with jax.enable_x64(True):
      yield
  else:  # pragma: no cover - older jax
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
      yield
    finally:
      jax.config.update("jax_enable_x64", previous)


def bits(a: Any) -> np.ndarray:
  """The raw bit patterns of an array, as unsigned integers of the same width."""
  a = np.asarray(a)
  return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def assert_bitwise_equal(actual: Any, expected: Any, msg: str = "") -> None:
  """Same dtype, same shape, same bits in every element (NaN payloads and the sign of zero included)."""
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert actual.dtype == expected.dtype, f"{msg}: dtype {actual.dtype} != {expected.dtype}"
  assert actual.shape == expected.shape, f"{msg}: shape {actual.shape} != {expected.shape}"
  if actual.dtype.kind == "c":  # the real and the imaginary parts, each by its bits
    assert_bitwise_equal(actual.real, expected.real, f"{msg} (real part)")
    assert_bitwise_equal(actual.imag, expected.imag, f"{msg} (imaginary part)")
    return
  mismatch = bits(actual) != bits(expected)
  assert not mismatch.any(), (
    f"{msg}: {int(mismatch.sum())} of {mismatch.size} elements differ; first at "
    f"{np.argwhere(mismatch)[0].tolist()}: {actual[mismatch][:5]} vs {expected[mismatch][:5]}"
  )


def assert_exactly(actual: Any, expected: Any, dtype: Any, msg: str = "") -> None:
  """Same dtype, shape and values (``-0.0 == 0.0``; NaN equal to NaN)."""
  actual = np.asarray(actual)
  assert actual.dtype == np.dtype(dtype), f"{msg}: dtype {actual.dtype} != {np.dtype(dtype)}"
  np.testing.assert_array_equal(actual, np.asarray(expected).astype(dtype), err_msg=msg, strict=True)


def one_hot_dml_layout(indices: Any, values: Any, depth: int, *, axis: int) -> jax.Array:
  """DirectML's ONE_HOT layout through the functional :func:`dml.one_hot` (``jax.nn.one_hot``'s layout).

  ``indices`` has size 1 on ``axis`` (DirectML's IndicesTensor); ``values.flat[0]`` is OffValue and
  ``values.flat[1]`` OnValue (DirectML's ValuesTensor). The functional call takes the indices without that
  axis and inserts ``depth`` there, so its output has DirectML's OutputTensor shape and the values' dtype;
  negative indices count from the end (DirectML's rule, ``negative_indices="from_end"``).
  """
  flat = jnp.asarray(values).reshape(-1)
  rank = jnp.ndim(indices)
  squeezed = jnp.squeeze(jnp.asarray(indices), axis % rank)
  return dml.one_hot(squeezed, depth, axis=axis, on_value=flat[1], off_value=flat[0], negative_indices="from_end")


# Every problem of a DescriptorError ends with "; got <field>=<value>", "; got <field> array ..." or
# "; got <field> of type ..." (a count: "len(<field>)=<n>"): the 'got' part names its field first, so the
# old "got shape (2, 3)" or "got ranks a=1, b=2" fail.
_GOT_FIELD = re.compile(r"; got (?:[A-Za-z_][\w.\[\]\-]*|len\([A-Za-z_]\w*\))(?:=| array | of type )")


def assert_got_names_its_field(error: dml.DescriptorError) -> None:
  for problem in error.problems:
    got = problem.rfind("; got ")
    assert got >= 0 and _GOT_FIELD.match(problem, got), f"{error.operator}: 'got' names no field in {problem!r}"


def spy_on(functions: tuple[tuple[Any, str], ...], monkeypatch: Any) -> set[str]:
  """Replaces each ``module.name`` by a spy; the returned set fills with the names the trace reaches."""
  reached: set[str] = set()
  for module, name in functions:
    original = getattr(module, name)

    def spy(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
      reached.add(_name)
      return _original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
  return reached


def maximum_reduction_lengths(lowered: str) -> list[int]:
  """How many elements each maximum reduction of a lowered (StableHLO text) program reduces into one."""
  lengths = []
  pattern = r"applies stablehlo\.maximum across dimensions = \[([\d, ]+)\] : \(tensor<([\dx]+)x[a-z]"
  for dimensions, shape in re.findall(pattern, lowered):
    sizes = [int(s) for s in shape.split("x")]
    lengths.append(math.prod(sizes[int(d)] for d in dimensions.split(",")))
  return lengths
