"""Token sampling: exact top-k, top-p and min-p filters with runtime parameters, and the draw.

:func:`top_k_mask`, :func:`top_p_mask` and :func:`min_p_mask` return the logits with the dropped
entries set to -inf, in dmljax's order (descending value, ties by ascending index; NaN never kept);
:func:`sample` divides by a temperature, applies the filters and draws one index per row. Every
parameter is data (traced or not), nothing sorts a row, and sharded rows give the unsharded result
bit for bit.
"""

from dmljax._src.sampling import min_p_mask, sample, top_k_mask, top_p_mask

__all__ = ["min_p_mask", "sample", "top_k_mask", "top_p_mask"]
