"""The dmljax benchmark suite: ``python -m benchmarks.run`` (see ``benchmarks/run.py``)."""
