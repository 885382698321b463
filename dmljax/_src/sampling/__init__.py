"""dmljax.sampling's implementation: validation and parameters (:mod:`.params`), exact mass (:mod:`.mass`), the
whole-row search (:mod:`.search`), the filters' candidate route (:mod:`.filters`), the noise (:mod:`.noise`) and
the draw (:mod:`.draw`); the public functions are in :mod:`.api`."""

from dmljax._src.sampling.api import min_p_mask, sample, top_k_mask, top_p_mask

__all__ = ["min_p_mask", "sample", "top_k_mask", "top_p_mask"]
