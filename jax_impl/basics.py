"""basics: y = 2x and z = stop_gradient(y) have the same values; z carries no gradient.

Gradient flow: x -> y -> loss flows; x -> y -> z -/-> loss is cut at z.
Port note: `jax.lax.stop_gradient(y)` is a new immutable array (no aliasing);
a loss built only from z differentiates to zeros without any error, where torch
raises on backward (pitfall P11).
Shapes: N elements.
Reference: JAX docs, jax.lax.stop_gradient.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_same_shape, check_variant
from ._common import StepCall, field, numpy, scenario_run, scenario_step, step_of

__all__ = ["forward", "loss_via_z", "loss_total", "gradients", "step_calls", "make_step", "run"]


def forward(x: jax.Array, variant: str) -> tuple[jax.Array, jax.Array]:
    """y = 2x [N] and its copy z [N], stopped in variant "z_stopped"."""
    check_variant("basics", variant)
    y = 2 * x
    z = jax.lax.stop_gradient(y) if variant == "z_stopped" else y  # GRAD-FLOW: z has y's values but is a constant
    return y, z


def loss_via_z(x: jax.Array, c: jax.Array, variant: str) -> jax.Array:
    """sum(c * z) of x [N], c [N]: a loss that reaches x only through z.

    Raises ValueError on an unknown variant or if c's shape differs from x's (no broadcasting).
    """
    check_same_shape("loss_via_z", x=x.shape, c=c.shape)
    check_variant("basics", variant)
    _, z = forward(x, variant)
    return jnp.sum(c * z)


def loss_total(x: jax.Array, c: jax.Array, d: jax.Array, variant: str) -> jax.Array:
    """sum(d * y + c * z) of x, c, d [N]: y's path always flows, z's only without the stop.

    Raises ValueError on an unknown variant or if c's or d's shape differs from x's.
    """
    check_same_shape("loss_total", x=x.shape, c=c.shape, d=d.shape)
    check_variant("basics", variant)
    y, z = forward(x, variant)
    return jnp.sum(d * y + c * z)


@functools.partial(jax.jit, static_argnames="variant")
def gradients(x: jax.Array, c: jax.Array, d: jax.Array, variant: str) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(loss_total [], d loss_via_z / dx [N], d loss_total / dx [N]): the lesson's two gradients, jitted."""
    g_via_z = jax.grad(loss_via_z)(x, c, variant)
    loss, g_total = jax.value_and_grad(loss_total)(x, c, d, variant)
    return loss, g_via_z, g_total


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: the lesson's two gradients on the fixture (loss_total first)."""
    x = field(fx, "x")
    c, d = field(fx, "c"), field(fx, "d")
    return [StepCall(gradients, (), (x, c, d), {"variant": variant})]


@scenario_step("basics")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """d/dx of loss_via_z and of loss_total (both gradients of run); returns loss_total."""
    return step_of(step_calls(fx, variant))


@scenario_run("basics")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: y, z [N]; grads/x_via_z, grads/x_total [N] (d loss / d x)."""
    x = field(fx, "x")
    c, d = field(fx, "c"), field(fx, "d")
    y, z = forward(x, variant)
    _, g_via_z, g_total = gradients(x, c, d, variant)
    return {"y": numpy(y), "z": numpy(z), "grads/x_via_z": numpy(g_via_z), "grads/x_total": numpy(g_total)}
