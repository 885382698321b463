"""The checks every descriptor goes through in :func:`dmljax.execute`, before its operator's own rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from dmljax._src import dtypes, feature_levels, tensor_desc
from dmljax._src.errors import Problems
from dmljax._src.tensor_desc import TensorDesc


def check_descriptor(
  p: Problems,
  desc: Any,
  inputs: Sequence[Any],
  *,
  input_fields: Sequence[str],
  output_fields: Sequence[str],
  table: str | None,
  feature_level: Any,
  same_rank: bool = True,
) -> bool:
  """Feature level, tensor descriptors, the level's support table, and the given arrays.

  Returns whether every tensor descriptor is well formed, so that the operator's
  own rules can read their sizes. Problems found are recorded in ``p``.
  """
  level = feature_levels.canonical_feature_level(p, feature_level)
  fields = [*input_fields, *output_fields]
  if not all([tensor_desc.well_formed(p, f, getattr(desc, f)) for f in fields]):
    return False
  tensors: dict[str, TensorDesc] = {f: getattr(desc, f) for f in fields}
  if same_rank:
    tensor_desc.same_rank(p, tensors)
  if level is not None and table is not None:
    row = feature_levels.support_row(p, table, level)
    if row is not None:
      level_name = level.name.removeprefix("FL_")
      for f in fields:
        tensor_desc.supported(p, f, tensors[f], row[f], level_name)
  if p.require(
    len(inputs) == len(input_fields),
    f"execute needs {len(input_fields)} input array(s) ({', '.join(input_fields)})",
    f"len(inputs)={len(inputs)}",
  ):
    for f, x in zip(input_fields, inputs, strict=False):
      tensor_desc.array_matches(p, f, x, tensors[f])
  return True


def input_arrays(desc: Any, inputs: Sequence[Any], input_fields: Sequence[str]) -> list[jax.Array]:
  """The validated inputs as JAX arrays of their descriptors' dtypes."""
  return [
    jnp.asarray(x, dtypes.numpy_dtype(getattr(desc, f).data_type)) for f, x in zip(input_fields, inputs, strict=False)
  ]
