"""dmljax.sampling: top-k, top-p (nucleus) and min-p filters over the last axis of logits, and :func:`sample`.

Every filter returns the logits with the entries it drops set to ``-inf`` (same shape and dtype), so
filters compose and feed ``jax.random.categorical``. They use :func:`dmljax.top_k`'s order (larger
first, equal logits by lower index), drop NaN logits, sort nothing, and give the same answer bit for
bit whether the vocabulary is split across devices or not.
"""

from dmljax._src.sampling import min_p_mask, sample, top_k_mask, top_p_mask

__all__ = ["min_p_mask", "sample", "top_k_mask", "top_p_mask"]
