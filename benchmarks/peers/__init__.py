"""The peers as contenders (PyTorch, ONNX Runtime, each optional at run time) and the ONNX backend's overhead."""
