"""Decode-step sampling against the recipes users write (``python -m benchmarks.sampling.bench``)."""
