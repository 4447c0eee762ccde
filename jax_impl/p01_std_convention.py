"""p01_std_convention: the standard deviation over the last axis, ported from torch.

Gradient flow: x -> std(x) -> sum -> loss; d std_i / d x_ij = (x_ij − mean_i) / ((N − 1) std_i).
Port note: torch `x.std(dim)` is unbiased (correction=1, divide by N − 1); `jnp.std`
divides by N (ddof=0). Port `x.std(dim)` as `jnp.std(x, axis, ddof=1)` and torch
`correction=0` as the jnp default; on a constant row torch's gradient is 0 and jnp.std's
NaN, so the port takes the square root behind a double `jnp.where`. `naive` is the straightforward `jnp.std(x, -1)`:
every std is sqrt((N − 1)/N) too small, with no error.
Shapes: R rows, N elements per row.
Reference: JAX docs, jax.numpy.std (ddof).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_variant
from ._common import field, scenario_run

__all__ = ["row_std", "std_and_grad", "run"]


def row_std(x: jax.Array, variant: str) -> jax.Array:
    """Std over the last axis: [R, N] -> [R]; unbiased (ddof=1) in "ported", ddof=0 in "naive".

    "ported" has torch's gradient on a constant row too: 0, where d sqrt(var) = 0 / 0 makes
    jnp.std's NaN (a double where keeps sqrt away from 0). "naive" is jnp.std as is: NaN there.
    """
    check_variant("p01_std_convention", variant)
    if variant == "naive":
        return jnp.std(x, axis=-1)  # the straightforward port: population std
    var = jnp.var(x, axis=-1, ddof=1)
    varies = var > 0
    return jnp.where(varies, jnp.sqrt(jnp.where(varies, var, 1.0)), 0.0)  # jnp.std's value, torch's gradient at 0


@functools.partial(jax.jit, static_argnames="variant")
def std_and_grad(x: jax.Array, variant: str) -> tuple[jax.Array, jax.Array]:
    """(row_std(x) [R], d sum(std) / dx [R, N]), jitted."""
    check_variant("p01_std_convention", variant)
    std, vjp = jax.vjp(lambda x: row_std(x, variant), x)
    (grad,) = vjp(jnp.ones_like(std))  # GRAD-FLOW: d sum(std) / dx through the mean and the N − 1 divisor
    return std, grad


@scenario_run("p01_std_convention")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: std [R]; grads/x [R, N] = d sum(std) / dx."""
    std, grad = std_and_grad(field(fx, "x"), variant)
    return {"std": std, "grads/x": grad}
