"""Row numbers, the first word of the noise's counter: a row's place in the batch plus an offset.

``sample`` numbers the rows of its batch ``0, 1, ...`` in row-major order of ``logits.shape[:-1]``, plus the
caller's ``row_offset`` (modulo 2**32). On one device, and wherever JAX partitions the program itself (automatic
or explicit mesh axes), the batch a call sees is the whole batch: every row gets its global number.

Inside ``jax.shard_map`` each device sees only its block, numbered from 0. Where the caller gives no offset,
:func:`shard_offset` keeps the blocks apart: it numbers them as if they were stacked in the order of the
device's position along the manual mesh axes the logits vary over (all the manual axes where JAX does not track
that: ``check_vma=False``), so two devices that hold different blocks never draw the same noise, and devices
that hold the same logits (replicated along an axis, which JAX's types prove) draw the same tokens. dmljax cannot
see which axis of the logits a mesh axis splits, so this numbering is the one-device numbering only when the
batch's leading axis is split over those mesh axes in the mesh's order (the usual ``P("batch")``); the caller's
``row_offset`` (the global number of the block's first row) gives the one-device tokens in every layout.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dmljax._src import shardings


def numbers(batch: tuple[int, ...], offset: jax.Array) -> jax.Array:
  """uint32 row numbers of a batch of rows of shape ``batch``: row-major positions plus ``offset`` (uint32)."""
  return jnp.arange(math.prod(batch), dtype=jnp.uint32).reshape(batch) + offset


def shard_offset(logits: jax.Array) -> jax.Array | np.uint32:
  """The default offset: 0 outside ``shard_map``; inside it, the device's block position times the block's rows."""
  mesh = jax.sharding.get_abstract_mesh()
  manual = tuple(name for name in mesh.axis_names if name in mesh.manual_axes)
  if not manual:
    return np.uint32(0)
  varying = shardings.varying_axes(logits)
  tracked = varying is not None and all(name in (shardings.varying_axes(lax.axis_index(name)) or ()) for name in manual)
  axes = tuple(name for name in manual if name in varying) if tracked and varying is not None else manual
  if not axes:  # the logits are the same on every device (JAX's types say so): so are the tokens
    return np.uint32(0)
  position = lax.axis_index(axes).astype(jnp.uint32)  # row-major over ``axes``, in the mesh's order
  return position * np.uint32(math.prod(logits.shape[:-1]) % 2**32)
