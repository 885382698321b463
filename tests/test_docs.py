"""The documentation covers the public API: docstrings with examples, the API reference, the mapping table.

The Sphinx build itself (warnings as errors) runs in CI:
``sphinx-build -W --keep-going -b html docs docs/_build/html``.
"""

import dataclasses
import inspect
import pathlib
import re

import pytest

import dmljax as dml

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
FUNCTIONS = ["top_k", "argmin", "argmax", "gather_nd", "reduce", "one_hot", "execute"]
DESCRIPTORS = [
  "TensorDesc",
  "TopKDesc",
  "TopK1Desc",
  "ArgMinDesc",
  "ArgMaxDesc",
  "GatherNDDesc",
  "GatherND1Desc",
  "ReduceDesc",
  "OneHotDesc",
]


def test_the_lists_above_hold_every_public_function_and_descriptor():
  public = set(dml.__all__)
  assert set(FUNCTIONS) <= public and set(DESCRIPTORS) <= public
  callables = {n for n in public if inspect.isfunction(getattr(dml, n))}
  dataclasses_ = {n for n in public if dataclasses.is_dataclass(getattr(dml, n))}
  assert callables == set(FUNCTIONS)
  assert dataclasses_ == set(DESCRIPTORS)


@pytest.mark.parametrize("name", sorted(dml.__all__))
def test_every_public_name_has_a_docstring_with_an_example(name):
  doc = inspect.getdoc(getattr(dml, name))
  assert doc is not None and len(doc.splitlines()[0]) > 10
  assert "Example:" in doc and ">>> " in doc


@pytest.mark.parametrize("name", FUNCTIONS + DESCRIPTORS)
def test_functions_and_descriptors_document_arguments_and_errors(name):
  doc = inspect.getdoc(getattr(dml, name))
  section = "Attributes:" if name in DESCRIPTORS else "Args:"
  assert section in doc and "Raises:" in doc and "DescriptorError" in doc
  for field in dataclasses.fields(getattr(dml, name)) if name in DESCRIPTORS else []:
    assert re.search(rf"^\s+{field.name}:", doc, re.M), f"{name} does not document {field.name}"


def test_the_api_reference_lists_every_public_name():
  api = (DOCS / "api.rst").read_text()
  documented = set(re.findall(r"^\.\. auto(?:function|class|exception):: (\w+)", api, re.M))
  assert documented == set(dml.__all__)


def dml_member(field: str) -> str:
  """``input_tensor`` -> ``InputTensor``: the DirectML struct member a descriptor field mirrors."""
  return "".join(part.capitalize() for part in field.split("_"))


@pytest.mark.parametrize("name", [d for d in DESCRIPTORS if d != "TensorDesc"])
def test_the_guide_maps_every_descriptor_field_to_its_directml_member(name):
  guide = (DOCS / "guide.rst").read_text()
  assert f":class:`{name}`" in guide
  for field in dataclasses.fields(getattr(dml, name)):
    assert f"``{field.name}``" in guide, f"{name}.{field.name} is missing from the mapping"
    member = "AxisCount``, ``Axes" if field.name == "axes" else dml_member(field.name)
    assert f"``{member}``" in guide, f"DirectML's {member} is missing from the mapping"


@pytest.mark.parametrize(
  "policy",
  [
    "NaN ordering",
    "-0.0 and +0.0 ties",
    "Out-of-range GATHER_ND indices",
    "ONE_HOT with invalid indices",
    "K equal to the axis size",
    "Integer ordering and wrapping",
    "float16 accumulation",
    "Subgradients",
  ],
)
def test_the_guide_compares_every_policy_with_each_library(policy):
  guide = (DOCS / "guide.rst").read_text()
  start = guide.index(f"\n{policy}\n")
  end = guide.find("\n^^^", start + len(policy) + 10)
  section = guide[start : end if end != -1 else len(guide)]
  for library in ("jax", "PyTorch", "TensorFlow", "ONNX"):
    assert f"   * - {library}\n" in section, f"{policy}: no row for {library}"
