"""p03_subgradient_kinks: abs and clamp at their kinks, torch's subgradients.

Gradient flow: x -> |x|, clamp(x, lo, hi) -> sums. torch picks abs'(0) = 0 (sign) and
clamp' = 1 on the bounds (lo <= x <= hi inclusive), 0 outside.
Port note: jnp.abs'(0) = 1 and jnp.clip' = 0.5 exactly on a bound. Any subgradient is
valid, so the package pins torch's in the JAX port: a `jax.custom_jvp` abs with
tangent sign(x), and clamp as `jnp.where(lo <= x <= hi, x, bound)`. relu'(0) = 0 and
maximum(x, 0)' = 0.5 at 0 already agree.
Shapes: N elements; lo, hi scalars.
Reference: PyTorch autograd formulas (derivatives.yaml: abs, clamp); JAX docs, custom_jvp.
"""

from __future__ import annotations

import numpy as np
import torch

from ..shared.core.checks import check_scalar, check_variant, is_traced
from ._common import field, scenario_run

__all__ = ["l1", "clamp", "values_and_grads", "run"]


def l1(x: torch.Tensor, variant: str) -> torch.Tensor:
    """sum |x| of x [N] -> []; gradient sign(x), 0 at 0."""
    check_variant("p03_subgradient_kinks", variant)
    return x.abs().sum()  # GRAD-FLOW: abs'(0) = 0, torch's subgradient


def clamp(x: torch.Tensor, lo: float, hi: float, variant: str) -> torch.Tensor:
    """x [N] clamped to [lo, hi]; gradient 1 for lo <= x <= hi (bounds included), else 0.

    Raises ValueError if hi < lo (values checked when concrete), or for an unknown variant.
    """
    check_variant("p03_subgradient_kinks", variant)
    if not is_traced(lo):  # an empty interval: both frameworks would return hi everywhere
        check_scalar("clamp", "hi", hi, low=float(lo))
    return x.clamp(lo, hi)  # GRAD-FLOW: clamp' = 1 on the bounds, torch's subgradient


def values_and_grads(x: torch.Tensor, lo: float, hi: float, variant: str) -> dict[str, torch.Tensor]:
    """l1 [], clamped [N] and the gradients of l1 and sum(clamped) at x [N]; x requires grad."""
    check_variant("p03_subgradient_kinks", variant)
    return {
        "l1": l1(x, variant),
        "clamped": clamp(x, lo, hi, variant),
        "grads/l1": torch.autograd.grad(l1(x, variant), [x])[0],
        "grads/clamp": torch.autograd.grad(clamp(x, lo, hi, variant).sum(), [x])[0],
    }


@scenario_run("p03_subgradient_kinks")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: l1 []; clamped [N]; grads/l1, grads/clamp [N] (d sum / dx)."""
    return values_and_grads(field(fx, "x", requires_grad=True), fx.scalar("lo"), fx.scalar("hi"), variant)
