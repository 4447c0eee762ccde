"""p03_subgradient_kinks: abs and clamp at their kinks, with torch's subgradients pinned.

Gradient flow: x -> |x|, clamp(x, lo, hi) -> sums. The port pins torch's choices:
abs'(0) = 0 (sign) and clamp' = 1 on the bounds (lo <= x <= hi inclusive), 0 outside.
Port note: `jnp.abs`'(0) = 1 and `jnp.clip`' = 0.5 exactly on a bound (JAX splits ties).
Any subgradient is valid; the package pins torch's with a `jax.custom_jvp` abs (tangent
sign(x)) and clamp written as `jnp.where(lo <= x <= hi, x, clip(x))`. relu'(0) = 0 and
maximum(x, 0)' = 0.5 at 0 already agree. `naive` uses jnp.abs and jnp.clip.
Shapes: N elements; lo, hi scalars.
Reference: JAX docs, Custom derivative rules (jax.custom_jvp).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_scalar, check_variant, is_traced
from ._common import field, scenario_run

__all__ = ["l1", "clamp", "values_and_grads", "run"]


@jax.custom_jvp
def _abs_sign_at_zero(x: jax.Array) -> jax.Array:
    """|x| whose derivative is sign(x): 0 at 0, torch's subgradient."""
    return jnp.abs(x)


@_abs_sign_at_zero.defjvp
def _abs_sign_at_zero_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return jnp.abs(x), jnp.sign(x) * t


def l1(x: jax.Array, variant: str) -> jax.Array:
    """sum |x| of x [N] -> []; gradient sign(x) ("naive": jnp.abs, 1 at 0)."""
    check_variant("p03_subgradient_kinks", variant)
    if variant == "naive":
        return jnp.abs(x).sum()
    return _abs_sign_at_zero(x).sum()  # GRAD-FLOW: abs'(0) = 0, torch's subgradient


def clamp(x: jax.Array, lo: jax.Array, hi: jax.Array, variant: str) -> jax.Array:
    """x [N] clamped to [lo, hi]; gradient 1 for lo <= x <= hi ("naive": jnp.clip, 0.5 on a bound).

    Raises ValueError if hi < lo (values checked when concrete), or for an unknown variant.
    """
    check_variant("p03_subgradient_kinks", variant)
    if not is_traced(lo):  # an empty interval: both frameworks would return hi everywhere
        check_scalar("clamp", "hi", hi, low=float(lo))
    if variant == "naive":
        return jnp.clip(x, lo, hi)
    inside = (x >= lo) & (x <= hi)
    return jnp.where(inside, x, jnp.clip(x, lo, hi))  # GRAD-FLOW: clamp' = 1 on the bounds, torch's subgradient


@functools.partial(jax.jit, static_argnames="variant")
def values_and_grads(x: jax.Array, lo: jax.Array, hi: jax.Array, variant: str) -> dict[str, jax.Array]:
    """l1 [], clamped [N] and the gradients of l1 and sum(clamped) at x [N], jitted."""
    check_variant("p03_subgradient_kinks", variant)
    return {
        "l1": l1(x, variant),
        "clamped": clamp(x, lo, hi, variant),
        "grads/l1": jax.grad(l1)(x, variant),
        "grads/clamp": jax.grad(lambda v: clamp(v, lo, hi, variant).sum())(x),
    }


@scenario_run("p03_subgradient_kinks")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: l1 []; clamped [N]; grads/l1, grads/clamp [N] (d sum / dx)."""
    return values_and_grads(field(fx, "x"), field(fx, "lo"), field(fx, "hi"), variant)
