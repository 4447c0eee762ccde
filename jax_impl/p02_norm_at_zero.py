"""p02_norm_at_zero: the gradient of ‖x‖₂ at the zero vector, ported with torch's convention (0).

Gradient flow: x -> ‖x‖ -> loss; d‖x‖/dx = x / ‖x‖, pinned to 0 at x = 0 as in torch.
Port note: `jnp.linalg.norm` differentiates sqrt at 0: its gradient at the zero vector
is NaN, and `norm(x)**2` is NaN too (0 · NaN). `optax.safe_norm(x, 0.0)` has gradient 0
there (a double `jnp.where` inside); for ‖x‖² use `jnp.sum(x**2)`. `naive` uses
`jnp.linalg.norm` and the NaN spreads into the penalised gradient.
Shapes: N elements.
Reference: optax docs, optax.safe_norm; JAX FAQ, "gradients contain NaN where using where".
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..shared.core.checks import check_same_shape, check_scalar, check_variant
from ._common import field, scenario_run

__all__ = ["norm", "sq_norm", "penalized", "norm_and_grads", "run"]


def norm(x: jax.Array, variant: str) -> jax.Array:
    """‖x‖₂ of x [N] -> []; gradient 0 at the zero vector in "ported", NaN in "naive"."""
    check_variant("p02_norm_at_zero", variant)
    if variant == "naive":
        return jnp.linalg.norm(x)
    return optax.safe_norm(x, 0.0)  # GRAD-FLOW: d‖x‖/dx pinned to 0 at the zero vector


def sq_norm(x: jax.Array, variant: str) -> jax.Array:
    """‖x‖₂² of x [N] -> []; gradient 2x ("naive": norm(x)**2, NaN at 0)."""
    check_variant("p02_norm_at_zero", variant)
    if variant == "naive":
        return jnp.linalg.norm(x) ** 2
    return jnp.sum(x**2)  # GRAD-FLOW: d‖x‖²/dx = 2x, finite at the zero vector


def penalized(x: jax.Array, t: jax.Array, lam: jax.Array, variant: str) -> jax.Array:
    """0.5·‖x − t‖² + λ‖x‖: a data term plus a norm penalty (group-lasso style), x, t [N] -> [].

    Raises ValueError on a shape mismatch, a λ < 0 or an unknown variant.
    """
    check_variant("p02_norm_at_zero", variant)
    check_same_shape("penalized", x=x.shape, t=t.shape)
    check_scalar("penalized", "lam", lam, 0.0)  # a negative λ rewards a large norm
    return 0.5 * jnp.sum((x - t) ** 2) + lam * norm(x, variant)


@functools.partial(jax.jit, static_argnames="variant")
def norm_and_grads(x: jax.Array, t: jax.Array, lam: jax.Array, variant: str) -> dict[str, jax.Array]:
    """norm [] and the gradients of norm, sq_norm and penalized at x [N], jitted."""
    check_variant("p02_norm_at_zero", variant)
    return {
        "norm": norm(x, variant),
        "grads/norm": jax.grad(norm)(x, variant),
        "grads/sq_norm": jax.grad(sq_norm)(x, variant),
        "grads/penalized": jax.grad(penalized)(x, t, lam, variant),
    }


@scenario_run("p02_norm_at_zero")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: norm []; grads/norm, grads/sq_norm, grads/penalized [N], all taken at x."""
    return norm_and_grads(field(fx, "x"), field(fx, "t"), field(fx, "lam"), variant)
