"""How each path names an operator's fields in messages: the one vocabulary of the validation layer.

The rules shared by both paths never spell a field's name. They take a
:class:`Fields` and ask it: the functional path names the arguments (``x``,
``x.shape``, ``batch_dims``), the descriptor path the struct's fields
(``input_tensor``, ``input_tensor.sizes``, ``batch_dimension_count``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Fields:
  """Names of an operator's fields on one path, looked up by their functional-path names (the roles).

  Attributes:
    names: role -> field name where the path's name differs (``{"x": "input_tensor"}``).
    sizes: the attribute that holds a tensor's sizes: ``"shape"`` or ``"sizes"``.
  """

  names: Mapping[str, str]
  sizes: str

  def __getitem__(self, role: str) -> str:
    return self.names.get(role, role)

  def shape(self, role: str) -> str:
    """``"x.shape"`` on the functional path, ``"input_tensor.sizes"`` on the descriptor path."""
    return f"{self[role]}.{self.sizes}"


FUNCTIONAL = Fields({}, "shape")


def descriptor(**names: str) -> Fields:
  """The descriptor path's names: each role given maps to a struct field (``x="input_tensor"``)."""
  return Fields(names, "sizes")
