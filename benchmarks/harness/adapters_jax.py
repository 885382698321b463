"""JAX contenders: dmljax and the native forms, compiled under ``jax.jit`` (and dmljax eagerly).

The compile time and a canonical text of the optimised program are kept, so that the report can
mark a native form whose compiled program is identical to dmljax's, and so are the compiled program's
temporary bytes (XLA's ``memory_analysis().temp_size_in_bytes``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import jax

from benchmarks.harness import timing
from benchmarks.harness.timing import Contender


def value(out: Any, index: int | None) -> Any:
  """The differentiated output: ``out[index]``, or ``out`` itself for a single output."""
  return out[index] if index is not None else out


def canonical_program(compiled: Any) -> str | None:
  """The optimised HLO without names, metadata and source locations, to compare two programs' work."""
  try:
    text = compiled.as_text()
  except Exception:
    return None
  text = re.sub(r", metadata=\{[^}]*\}", "", text)
  text = text[text.find("\n%") :]
  text = re.sub(r"%[\w.\-]+", "%v", text)
  return re.sub(r"\b([A-Za-z_][\w\-]*)\.\d+\b", r"\1", text)


def temp_bytes(compiled: Any) -> int | None:
  """The temporary bytes XLA allocates for one run of ``compiled`` (``None`` where the backend does not say)."""
  try:
    analysis = compiled.memory_analysis()
  except Exception:
    return None
  size = getattr(analysis, "temp_size_in_bytes", None)
  return None if size is None else int(size)


def jax_contender(
  name: str, family: str, fn: Callable[..., Any], inputs: Sequence[tuple[Any, ...]], *, eager: bool = False
) -> Contender:
  """``fn`` under ``jax.jit`` (compiled ahead, its compile time recorded), or called eagerly."""
  if eager:

    def forward_eager(i: int) -> None:
      jax.block_until_ready(fn(*inputs[i]))

    return Contender(name, family, forward_eager)
  compiled, compile_s = timing.timed(lambda: jax.jit(fn).lower(*inputs[0]).compile())
  jitted = jax.jit(fn)

  def forward(i: int) -> None:
    jax.block_until_ready(jitted(*inputs[i]))

  return Contender(
    name, family, forward, compile_s=compile_s, program=canonical_program(compiled), temp_bytes=temp_bytes(compiled)
  )


def fwd_bwd_function(fn: Callable[..., Any], index: int | None) -> Callable[..., tuple[Any, jax.Array]]:
  """The value and the input's gradient for a given cotangent (one ``jax.vjp``): ``f(x, *rest, cotangent)``."""

  def loss_and_grad(x: jax.Array, *rest_and_ct: Any) -> tuple[Any, jax.Array]:
    *rest, ct = rest_and_ct
    out, pull = jax.vjp(lambda x_: value(fn(x_, *rest), index), x)
    return out, pull(ct)[0]

  return loss_and_grad


def add_jax_fwd_bwd(
  c: Contender, fn: Callable[..., Any], inputs: Sequence[tuple[Any, ...]], cotangents: Sequence[Any], index: int | None
) -> None:
  """Adds the timed value-and-input-gradient (one ``jax.vjp`` for a given cotangent) under ``jax.jit``."""
  loss_and_grad = fwd_bwd_function(fn, index)
  compiled, c.fwd_bwd_compile_s = timing.timed(
    lambda: jax.jit(loss_and_grad).lower(*inputs[0], cotangents[0]).compile()
  )
  c.fwd_bwd_program = canonical_program(compiled)
  c.fwd_bwd_temp_bytes = temp_bytes(compiled)
  jitted = jax.jit(loss_and_grad)

  def fwd_bwd(i: int) -> None:
    jax.block_until_ready(jitted(*inputs[i], cotangents[i]))

  c.fwd_bwd = fwd_bwd
