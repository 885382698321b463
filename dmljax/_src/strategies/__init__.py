"""Per-device top-k selection strategies, one module each; :mod:`dispatch` picks one per platform.

Every strategy returns the int32 indices of the ``k`` first elements along the last axis in
dmljax's order (NaN above +inf, -0.0 equal to +0.0, ties in ascending index order), for any
number of leading axes.
"""
