"""p13_where_nan (pitfall P13): f(x) = sum(where(x > 0, sqrt(x), 0)) and its gradient.

Gradient flow: jax.grad differentiates both branches of `jnp.where` and gives
the untaken one a zero cotangent; 0 * sqrt'(x) is nan at x <= 0.
Port note: JAX `jnp.where` and torch `torch.where` share the trap, so the fix is
the same on both sides: make the argument safe before the op (double where).
The trap: the forward value is fine, only the gradient is NaN ([nan, nan, 0.25]
on x = [-1, 0, 4]).
Shapes: N elements.
Reference: JAX FAQ, "Gradients contain NaN where using where".
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_variant
from ._common import field, scenario_run

__all__ = ["sqrt_where", "value_and_grad", "run"]


def sqrt_where(x: jax.Array, variant: str) -> jax.Array:
    """sum over [N] of sqrt(x) where x > 0, else 0; scalar in x's dtype.

    "ported" guards the argument (double where); "naive" does not, so its
    gradient is NaN at every x <= 0. Source: PITFALLS P13.
    """
    check_variant("p13_where_nan", variant)
    pos = x > 0
    if variant == "ported":
        x = jnp.where(pos, x, jnp.ones_like(x))  # GRAD-FLOW: the untaken branch sees a safe argument
    return jnp.where(pos, jnp.sqrt(x), jnp.zeros_like(x)).sum()


@functools.partial(jax.jit, static_argnames="variant")
def value_and_grad(x: jax.Array, variant: str) -> tuple[jax.Array, jax.Array]:
    """(sqrt_where(x) [], its gradient [N]), jitted."""
    check_variant("p13_where_nan", variant)
    return jax.value_and_grad(sqrt_where)(x, variant)


@scenario_run("p13_where_nan")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: f []; grads/x [N] (NaN at x <= 0 in "naive")."""
    x = field(fx, "x")
    f, g = value_and_grad(x, variant)
    return {"f": f, "grads/x": g}
