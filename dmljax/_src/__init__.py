"""Private implementation of dmljax; import from :mod:`dmljax` instead."""
