"""The documentation covers the public API: docstrings with examples, the API reference, the mapping table.

The Sphinx build itself (warnings as errors) runs in CI:
``sphinx-build -W --keep-going -b html docs docs/_build/html``.
"""

import dataclasses
import inspect
import itertools
import pathlib
import re

import pytest

import dmljax as dml

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
FUNCTIONS = ["top_k", "argmin", "argmax", "gather_nd", "reduce", "one_hot", "execute"]
# Functions that answer a question about the installation (no arguments, nothing to validate).
QUERIES = ["cpu_kernel_available", "cpu_kernel_status"]
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
  assert callables == set(FUNCTIONS) | set(QUERIES)
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
  documented = set(re.findall(r"^\.\. auto(?:function|class|exception):: (\w+)$", api, re.M))
  assert documented == set(dml.__all__)
  sampling = set(re.findall(r"^\.\. autofunction:: dmljax\.sampling\.(\w+)$", api, re.M))
  assert sampling == set(dml.sampling.__all__)


@pytest.mark.parametrize("name", sorted(dml.sampling.__all__))
def test_sampling_functions_document_arguments_errors_and_an_example(name):
  doc = inspect.getdoc(getattr(dml.sampling, name))
  assert "Args:" in doc and "Raises:" in doc and "DescriptorError" in doc
  assert "Example:" in doc and ">>> " in doc


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


# --------------------------------------------------------------------------- #
# The docs are the project's own contract: no pointer to files users never see.
# --------------------------------------------------------------------------- #
ROOT = DOCS.parent

# What a user of the repository must never be sent to: the contract file outside the repository
# ("SPEC.md", "SPEC §2", "the SPEC"), its folder of source pages ("seeds/"), or the names the project once used
# for DirectML's pages ("seed table", "seed examples", "seed ``DML_...``", "the seeds", "the seed says").
# Case matters for SPEC, so "PartitionSpec", "spec" and "specification" never match; the seed patterns need a
# word after "seed" that only the old wording used, so "seed=0", "seeded" and "random seed" never match.
FORBIDDEN = [
  re.compile(r"\bSPEC(?:\.md|\s*§|\s+section|\b)"),
  re.compile(r"seeds/"),
  re.compile(r"(?i)\bseed[ -](?:tables?|examples?|pages?|rules?|prose|constraints?)\b"),
  re.compile(r"(?i)\bseed\s+``?DML_"),
  re.compile(r"(?i)\b(?:the|these|its) seeds\b|\bseeds'"),
  re.compile(r"(?i)\bthe seed(?:'s)?\s+(?:says|say|gives|carries|tables?|examples?|pages?)\b|\bthe seed's\b"),
  re.compile(r"(?i)\b(?:match(?:es)?|differs? from) the seed\b"),
]


def user_facing_files() -> list[pathlib.Path]:
  files = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    *sorted((ROOT / "examples").glob("*.py")),
  ]
  for folder in (DOCS, ROOT / "dmljax"):
    files += sorted(
      p
      for p in folder.rglob("*")
      if p.is_file() and p.suffix in {".rst", ".md", ".py", ".pyi"} and "_build" not in p.relative_to(folder).parts
    )
  return files


def test_the_forbidden_patterns_catch_the_old_wording_and_spare_ordinary_words():
  caught = [
    "`SPEC.md` is the contract",
    "DirectML semantics (seed ``DML_TOP_K1_OPERATOR_DESC``, SPEC §2):",
    "an approximation of the SPEC",
    "Source: shared/seeds/ (000 DML_TOP_K1)",
    "applies the seed tables",
    "every DirectML seed example",
    "The seeds carry no tables",
    "the newest level in the seeds",
    "(the seed says",
    "no size 0); the seed's data-type and rank table",
    "[{'matches the seed' if same else 'DIFFERS FROM THE SEED'}]",
  ]
  spared = [
    "PartitionSpec('b')",
    "a seeded sample",
    "main(seed=0)",
    "jax.random.key(seed + 1)",
    "the specification",
    "`DMLJAX_CONFORMANCE_SEED=<n>`",
    "importlib.util.find_spec",
    "a random seed for the generator",
    "rng = np.random.default_rng(seed)",
  ]
  for text in caught:
    assert any(p.search(text) for p in FORBIDDEN), text
  for text in spared:
    assert not any(p.search(text) for p in FORBIDDEN), text


def test_no_user_facing_text_refers_to_files_outside_the_repository():
  files = user_facing_files()
  assert ROOT / "README.md" in files and DOCS / "semantics.rst" in files and len(files) > 20
  found = []
  for path in files:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
      found += [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for p in FORBIDDEN if p.search(line)]
  assert not found, "references to files outside the repository:\n" + "\n".join(found)


SEMANTICS_SECTIONS = [
  "How to read this page",
  "Two paths",
  "Value order",
  "NaN",
  "Signed zeros",
  "Integers",
  "Bit-exact values",
  "Ties",
  "TOP_K1 and TOP_K",
  "K range",
  "ARGMIN and ARGMAX",
  "GATHER_ND1 and GATHER_ND",
  "Shapes and batch dimensions",
  "REDUCE",
  "The twelve functions",
  "Accumulation",
  "Integer overflow",
  "NaN in MAX and MIN",
  "ONE_HOT",
  "Index policies",
  "Data types",
  "64-bit types",
  "Subnormals",
  "Ranks and sizes",
  "Feature levels",
  "Validation",
  "Differentiation",
  "Functional path conventions",
  "Where DirectML's pages are wrong or unclear",
]


def rst_headings(text: str) -> list[str]:
  """Section titles: a line followed by an underline of one punctuation character at least as long."""
  lines = text.splitlines()
  return [
    title
    for title, under in itertools.pairwise(lines)
    if title.strip() and re.fullmatch(r"([=\-^~\"'`#*+])\1*", under) and len(under) >= len(title)
  ]


def test_the_semantics_page_covers_every_policy():
  text = (DOCS / "semantics.rst").read_text(encoding="utf-8")
  headings = rst_headings(text)
  missing = [s for s in SEMANTICS_SECTIONS if s not in headings]
  assert not missing, f"docs/semantics.rst lacks the sections {missing}"
  assert "semantics" in (DOCS / "index.rst").read_text(encoding="utf-8").split(".. toctree::", 1)[1]


@pytest.mark.parametrize(
  "page",
  [
    "DML_TOP_K1_OPERATOR_DESC",
    "DML_TOP_K_OPERATOR_DESC",
    "DML_ARGMIN_OPERATOR_DESC",
    "DML_ARGMAX_OPERATOR_DESC",
    "DML_GATHER_ND1_OPERATOR_DESC",
    "DML_GATHER_ND_OPERATOR_DESC",
    "DML_REDUCE_OPERATOR_DESC",
    "DML_ONE_HOT_OPERATOR_DESC",
  ],
)
def test_the_semantics_page_names_directml_s_reference_pages(page):
  assert f"``{page}``" in (DOCS / "semantics.rst").read_text(encoding="utf-8")


def test_the_semantics_page_covers_every_reduce_function_and_marks_dmljax_s_choices():
  text = (DOCS / "semantics.rst").read_text(encoding="utf-8")
  table = text[text.index("\nThe twelve functions\n") : text.index("\nAccumulation\n")]
  for function in dml.ReduceFunction:
    assert re.search(rf"^   \* - .*\b{function.name}\b", table, re.M), f"no row for REDUCE {function.name}"
  assert text.count("dmljax's choice") >= 10
