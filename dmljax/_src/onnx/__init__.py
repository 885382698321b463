"""ONNX semantics on top of the dmljax operators (public names in :mod:`dmljax.onnx`)."""
