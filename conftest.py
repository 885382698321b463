"""The doctests of dmljax.onnx's modules need onnx (the ``peers`` extra): without it they are not collected.

The tests' own configuration is tests/conftest.py.
"""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("onnx") else ["dmljax/_src/onnx/*.py"]
