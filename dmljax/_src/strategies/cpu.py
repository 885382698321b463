"""XLA:CPU: ``lax.top_k`` on a float whose IEEE total order is dmljax's order, and when to stage it.

XLA:CPU runs ``TopK`` as a fast partial sort only for float32 operands (other types fall back
to a full sort), and its float comparator is the IEEE total order (sign-magnitude bit order),
with ties to the lower index. Two views keep dmljax's order under it:

* :func:`float_view` (float inputs): the canonical float (-0.0 as +0.0, every NaN the positive
  NaN), negated for the smallest first (NaN then sorts below -inf). About four operations an
  element, few enough that XLA:CPU keeps small programs on the calling thread.
* :func:`key_view` (any input): the integer rank key bitcast to the float32 (float64) whose total
  order is the key's order: every key, including the patterns that are NaNs as floats, keeps its
  place.

Long rows are selected in stages (:mod:`staged`): a partial sort over the whole row costs more
than a pass of chunk maxima plus partial sorts over the maxima and the candidates.
"""

from __future__ import annotations

import jax
from jax import lax

from dmljax._src import rank_keys
from dmljax._src.strategies import staged
from dmljax._src.strategies.case import Case, gathered

MIN_STAGED_SIZE = 1 << 14
MAX_EXTRACTED_K = 8
# Float rows at least this long stay on one lax.top_k below MAX_PLAIN_FLOAT_SIZE elements: with few rows
# the staged selection's extra passes cost more than they save (measured on 2 cores: (16, 2048) k=8
# and (4, 8192) k=50 staged took 1.2-1.3x the time of one lax.top_k; (16, 4096) k=8 took 0.8x).
MIN_PLAIN_FLOAT_ROW = 1024
MAX_PLAIN_FLOAT_SIZE = 1 << 16


def top_k_of_key(key: jax.Array, k: int) -> jax.Array:
  """Indices of the ``k`` largest integer keys (ties to the lower index) through the total-order float view."""
  return lax.top_k(rank_keys.key_as_total_order_float(key), k)[1]


def staged_kind(case: Case) -> str | None:
  """The staged selection that pays for keys of ``case.shape``: ``"chunked"``, ``"extracted"`` or ``None``."""
  if case.size < MIN_STAGED_SIZE:
    return None
  if staged.cpu_chunk(case.n, case.k) is not None:
    return "chunked"
  if case.k <= 2 and case.n <= 4096:
    return "extracted"
  return None


def float_view_handles(case: Case) -> bool:
  """Floats: their canonical float32 (float64) view holds every value exactly."""
  return case.is_float


def float_view_pays(case: Case) -> bool:
  """Floats skip the integer key where no staged selection runs, or where few long rows make staging cost more."""
  return staged_kind(case) is None or (case.size < MAX_PLAIN_FLOAT_SIZE and case.n >= MIN_PLAIN_FLOAT_ROW)


def chunked_handles(case: Case) -> bool:
  """Rows with a chunk length that leaves more chunks than ``k``."""
  return staged.cpu_chunk(case.n, case.k) is not None


def chunked_pays(case: Case) -> bool:
  return staged_kind(case) == "chunked"


def extracted_handles(case: Case) -> bool:
  """Any type and row; ``k`` up to :data:`MAX_EXTRACTED_K` (the rounds are unrolled)."""
  return case.k <= MAX_EXTRACTED_K


def extracted_pays(case: Case) -> bool:
  return staged_kind(case) == "extracted"


def every_case(case: Case) -> bool:
  """Any type, row and ``k``."""
  del case
  return True


@gathered
def float_view(x: jax.Array, case: Case) -> jax.Array:
  view = rank_keys.canonical_float(x)
  return lax.top_k(view if case.largest_first else -view, case.k)[1]


@gathered
def chunked(x: jax.Array, case: Case) -> jax.Array:
  chunk = staged.cpu_chunk(case.n, case.k)
  if chunk is None:
    raise ValueError(f"cpu_chunked does not handle {case}")
  return staged.chunked(rank_keys.selection_key(x, case.largest_first), case.k, chunk, top_k_of_key)


@gathered
def extracted(x: jax.Array, case: Case) -> jax.Array:
  return staged.extracted(rank_keys.selection_key(x, case.largest_first), case.k)


@gathered
def key_view(x: jax.Array, case: Case) -> jax.Array:
  return top_k_of_key(rank_keys.selection_key(x, case.largest_first), case.k)
