"""The one parser for enum-valued options: directions, reduce functions, feature levels.

Every option that names a member of an ``IntEnum`` takes the member itself, its
numeric value, or a name. Names are matched without regard to case,
underscores, dots or a known prefix (``"log_sum_exp"``, ``"LogSumExp"``,
``"DML_FEATURE_LEVEL_3_0"``), and may be aliases (``"mean"`` for AVERAGE). An
unknown name is reported with the valid ones and the closest match.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from dmljax._src.errors import Problems

E = TypeVar("E", bound=enum.IntEnum)


def _normalized(name: str, prefixes: Sequence[str]) -> str:
  key = name.lower().replace("_", "").replace(".", "").replace("-", "")
  for prefix in prefixes:
    key = key.removeprefix(prefix)
  return key


def parse_enum(
  p: Problems,
  field: str,
  value: Any,
  enum_type: type[E],
  *,
  names: Mapping[str, E] | None = None,
  prefixes: Sequence[str] = (),
  elsewhere: Mapping[str, str] | None = None,
) -> E | None:
  """``value`` as a member of ``enum_type``, or ``None`` with the problem recorded in ``p``.

  Args:
    p: where a problem goes.
    field: the option's name in messages.
    value: a member, its numeric value (not a bool), or a name.
    enum_type: the ``IntEnum``.
    names: the accepted names, as shown in messages, and the members they stand
      for; default: the members' own names in lower case.
    prefixes: normalized prefixes a name may carry (``"reduce"``).
    elsewhere: normalized names that are no member but something else, and what to use instead
      (``"softmax"``: ``"jax.nn.softmax"``); such a name gets that advice rather than a look-alike.
  """
  shown = names if names is not None else {m.name.lower(): m for m in enum_type}
  if isinstance(value, str):
    table = {_normalized(name, prefixes): member for name, member in shown.items()}
    key = _normalized(value, prefixes)
    if key in table:
      return table[key]
    if elsewhere and key in elsewhere:
      suggestion = f" ({value!r} is not one of them: {elsewhere[key]})"
    else:
      # 0.7 keeps the look-alikes of a typo ('mean' for 'median') and drops a shared syllable ('max' for 'softmax').
      close = difflib.get_close_matches(value.lower(), list(shown), n=1, cutoff=0.7)
      suggestion = f" (did you mean {close[0]!r}?)" if close else ""
    listed = ", ".join(repr(n) for n in shown)
    p.add(f"{field} must be one of {listed}{suggestion}", f"{field}={value!r}")
    return None
  if not isinstance(value, bool):
    try:
      return enum_type(value)
    except (ValueError, TypeError):
      pass
  listed = ", ".join(repr(n) for n in shown)
  p.add(f"{field} must be a dml.{enum_type.__name__} or one of {listed}", f"{field}={value!r}")
  return None
