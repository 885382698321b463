"""Sphinx configuration: API reference (autodoc + napoleon, Google style) and the guide.

Build (warnings are errors): ``sphinx-build -W --keep-going -b html docs docs/_build/html``.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import dmljax

project = "dmljax"
author = "dmljax developers"
copyright = "dmljax developers"
release = dmljax.__version__
version = release

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax"]

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True
napoleon_use_rtype = False
napoleon_attr_annotations = False

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_class_signature = "mixed"
add_module_names = False
autodoc_type_aliases = {"ArrayLike": "jax.typing.ArrayLike"}

exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []
html_title = f"dmljax {release}"
