"""p04_gelu: GELU, ported as torch's exact (erf) form.

Gradient flow: x -> gelu(x) -> sum; gelu'(x) = Φ(x) + x·φ(x).
Port note: `jax.nn.gelu` defaults to approximate=True (the tanh formula); torch's
`F.gelu` is exact unless approximate='tanh'. Port as `jax.nn.gelu(x, approximate=False)`.
`naive` keeps the default: at x = 1 it gives 0.841192 instead of 0.841345.
Shapes: N elements.
Reference: Hendrycks & Gimpel 2016, arXiv:1606.08415; JAX docs, jax.nn.gelu.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_variant
from ._common import field, scenario_run

__all__ = ["gelu", "gelu_and_grad", "run"]


def gelu(x: jax.Array, variant: str) -> jax.Array:
    """x·Φ(x) elementwise, [N] -> [N]; "naive" is jax.nn.gelu's default tanh approximation."""
    check_variant("p04_gelu", variant)
    if variant == "naive":
        return jax.nn.gelu(x)
    return jax.nn.gelu(x, approximate=False)


@functools.partial(jax.jit, static_argnames="variant")
def gelu_and_grad(x: jax.Array, variant: str) -> tuple[jax.Array, jax.Array]:
    """(gelu(x) [N], gelu'(x) [N]), jitted."""
    check_variant("p04_gelu", variant)
    y, vjp = jax.vjp(lambda x: gelu(x, variant), x)
    (grad,) = vjp(jnp.ones_like(y))  # GRAD-FLOW: elementwise derivative of the activation
    return y, grad


@scenario_run("p04_gelu")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: y [N] = gelu(x); grads/x [N] = gelu'(x)."""
    y, grad = gelu_and_grad(field(fx, "x"), variant)
    return {"y": y, "grads/x": grad}
