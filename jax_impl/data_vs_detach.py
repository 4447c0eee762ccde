"""data_vs_detach: zeros written into an activation that autograd saved for backward.

Gradient flow: x -> out = σ(x) -> loss flows; the zeros land in a new array, so
nothing the gradient reads can change.
Port note: torch's three spellings (`out.data`, `out.detach()`, `out.detach().clone()`,
then `.zero_()`) become one JAX program: `.at[].set` over every entry, which returns a
new array with no gradient path from out (no stop_gradient needed). torch's `.data`
write silently corrupts the gradient and its `.detach()` write raises; JAX has neither
hazard. Porting JAX to torch, clone first.
Shapes: N elements.
Reference: JAX docs, "JAX - The Sharp Bits: in-place updates" (jax.numpy.ndarray.at).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_same_shape
from ._common import field, numpy, scenario_run, scenario_step

__all__ = ["write_zeros", "step", "make_step", "run"]

HOW = ("detach_clone", "data_inplace", "detach_inplace")


def write_zeros(out: jax.Array, how: str) -> jax.Array:
    """Zeros written over every entry of out [N]: a new array [N], no gradient path from out; out unchanged.

    how: the torch spelling being ported; all three are the same program in JAX.
    Raises:
      ValueError: unknown `how`.
    """
    if how == "data_inplace":
        written = out.at[:].set(0.0)  # GRAD-FLOW: out.data: torch shares storage, no version bump; JAX: new array
    elif how == "detach_inplace":
        written = out.at[:].set(0.0)  # GRAD-FLOW: out.detach(): torch shares storage and version; JAX: new array
    elif how == "detach_clone":
        written = out.at[:].set(0.0)  # GRAD-FLOW: out.detach().clone(): a snapshot with its own storage in both
    else:
        raise ValueError(f"write_zeros: how expected one of {list(HOW)}, got {how!r}")
    return written  # out-of-place, every entry overwritten: a stop_gradient here would change nothing


def _loss(x, c, how):
    out = jax.nn.sigmoid(x)
    loss = jnp.sum(c * out)
    written = write_zeros(out, how)
    return loss, (out, written, out)


_step = jax.jit(jax.value_and_grad(_loss, has_aux=True), static_argnames="how")


def step(x: jax.Array, c: jax.Array, how: str) -> tuple[jax.Array, ...]:
    """loss = Σ c·σ(x); write zeros via `how`; gradient.

    Args: x [N], c [N]. Returns (loss [], dL/dx [N], out before the write [N], written [N],
    out after the write [N] — the same values: arrays are immutable).
    Raises:
      ValueError: unknown `how` (never the torch RuntimeError: nothing is written in place), or
        c's shape differs from x's (no broadcasting in the loss).
    """
    check_same_shape("step", x=x.shape, c=c.shape)
    (loss, (before, written, after)), grad = _step(x, c, how)
    return loss, grad, before, written, after


@scenario_step("data_vs_detach")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One step (σ forward, the zero write spelled `variant`, d loss / dx); returns the loss."""
    x = field(fx, "x")
    c = field(fx, "c")

    def one_step() -> jax.Array:
        return jax.block_until_ready(step(x, c, variant))[0]

    return one_step


@scenario_run("data_vs_detach")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: out, written, out_after_write, grads/x [N]."""
    x = field(fx, "x")
    c = field(fx, "c")
    _, grad, before, written, after = step(x, c, variant)
    return {"out": numpy(before), "written": numpy(written), "out_after_write": numpy(after), "grads/x": numpy(grad)}
