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

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_same_shape
from ._common import StepCall, field, numpy, scenario_run, scenario_step, step_of

__all__ = ["write_zeros", "step", "step_calls", "make_step", "run"]

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


@functools.partial(jax.jit, static_argnames="how")
def step(x: jax.Array, c: jax.Array, how: str) -> tuple[jax.Array, ...]:
    """loss = Σ c·σ(x); write zeros via `how`; gradient.

    Args: x [N], c [N]. Returns (loss [], dL/dx [N], out before the write [N], written [N],
    out after the write [N] — the same values: arrays are immutable).
    Raises:
      ValueError: unknown `how` (never the torch RuntimeError: nothing is written in place), or
        c's shape differs from x's (no broadcasting in the loss).
    """
    check_same_shape("step", x=x.shape, c=c.shape)

    def loss_fn(x: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        out = jax.nn.sigmoid(x)
        loss = jnp.sum(c * out)
        return loss, (out, write_zeros(out, how))

    (loss, (out, written)), grad = jax.value_and_grad(loss_fn, has_aux=True)(x)
    return loss, grad, out, written, out


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one step on the fixture, the zero write spelled `variant` (the loss first)."""
    x = field(fx, "x")
    c = field(fx, "c")
    return [StepCall(step, (), (x, c), {"how": variant})]


@scenario_step("data_vs_detach")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One step (σ forward, the zero write spelled `variant`, d loss / dx); returns the loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("data_vs_detach")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: out, written, out_after_write, grads/x [N]."""
    x = field(fx, "x")
    c = field(fx, "c")
    _, grad, before, written, after = step(x, c, variant)
    return {"out": numpy(before), "written": numpy(written), "out_after_write": numpy(after), "grads/x": numpy(grad)}
