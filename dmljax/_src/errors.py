"""The library's one exception type and the collector that builds it.

Every rule violation found while validating an operator call is gathered in a
:class:`Problems` list first, so that one :class:`DescriptorError` names every
failing field at once (chex-style) instead of stopping at the first.
"""

from __future__ import annotations

import jax
import numpy as np


class DescriptorError(ValueError):
  """An operator call that breaks a DirectML rule.

  Raised at trace time, from shapes, dtypes and static parameters alone, so
  ``jax.eval_shape`` and ``jax.jit(...).lower(...)`` raise it without data.
  The message names the operator, each failing field, the rule and the value
  given. Data-dependent conditions (an out-of-range index) never raise; they
  follow the operators' policies.

  Attributes:
    operator: the operator (``"TOP_K1"``) or function (``"top_k"``) called.
    problems: every broken rule, one sentence each.

  Example:
    >>> import dmljax as dml, jax.numpy as jnp
    >>> try:
    ...   dml.top_k(jnp.zeros(4), 5)
    ... except dml.DescriptorError as error:
    ...   print(error)
    top_k: k must satisfy 0 <= k <= x.shape[axis] (= 4); got k=5
  """

  def __init__(self, operator: str, problems: list[str] | tuple[str, ...]):
    self.operator = operator
    self.problems = tuple(problems)
    if len(self.problems) == 1:
      message = f"{operator}: {self.problems[0]}"
    else:
      listed = "\n".join(f"  - {p}" for p in self.problems)
      message = f"{operator}: {len(self.problems)} problems:\n{listed}"
    super().__init__(message)


class StaticArgumentError(DescriptorError, jax.errors.ConcretizationTypeError):
  """A :class:`DescriptorError` for a traced value where a static Python int is needed (``k``, ``depth``, ``axis``).

  It also derives from ``jax.errors.ConcretizationTypeError``, the class JAX raises when ``jax.lax.top_k``'s
  ``k`` or ``jax.nn.one_hot``'s ``num_classes`` is traced, so code that catches either class catches it.
  The message names the argument and says how to pass it under ``jax.jit``.

  Example:
    >>> import dmljax as dml, jax, jax.numpy as jnp
    >>> try:
    ...   jax.jit(dml.one_hot)(jnp.array([0, 2]), 3)
    ... except jax.errors.ConcretizationTypeError as error:
    ...   print(type(error).__name__, isinstance(error, dml.DescriptorError))
    StaticArgumentError True
  """


class Problems:
  """Collects rule violations for one operator call, then raises them together."""

  def __init__(self, operator: str):
    self.operator = operator
    self._found: list[str] = []
    self._got: set[str] = set()
    self._traced = False

  def add(self, statement: str, got: str, *, traced: bool = False) -> None:
    """Records ``"<statement>; got <got>"``, e.g. ``"k must satisfy ...; got k=5"``.

    ``got`` starts with the field it judges and gives its value (``x.shape=(3, 3)``,
    ``output_tensor.data_type=FLOAT16``), so two fields wrong in the same way are two problems,
    while one value refused by two rules (the feature-level table and an operator's own check
    may both refuse an output type) is reported once. ``traced``: the problem is a traced value where a static
    one is needed, which makes the error a :class:`StaticArgumentError`.
    """
    self._traced |= traced
    if got not in self._got:
      self._got.add(got)
      self._found.append(f"{statement}; got {got}")

  def require(self, ok: bool | np.bool_, statement: str, got: str) -> bool:
    """Records the problem unless ``ok``; returns ``ok`` so callers can skip dependent checks."""
    if not ok:
      self.add(statement, got)
    return bool(ok)

  def __bool__(self) -> bool:
    return bool(self._found)

  def raise_if_any(self) -> None:
    if self._found:
      raise (StaticArgumentError if self._traced else DescriptorError)(self.operator, self._found)
