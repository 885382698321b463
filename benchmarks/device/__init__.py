"""The one command for a GPU or TPU machine: ``benchmarks/device/check.sh OUTDIR`` (see ``docs/selfcheck.rst``)."""
