"""p13_where_nan (pitfall P13): f(x) = sum(where(x > 0, sqrt(x), 0)) and its gradient.

Gradient flow: autograd differentiates both branches of `torch.where` and gives
the untaken one a zero cotangent; 0 * sqrt'(x) is nan at x <= 0.
Port note: torch `torch.where` and JAX `jnp.where` share the trap, so the fix is
the same on both sides: make the argument safe before the op (double where).
The trap: the forward value is fine, only the gradient is NaN ([nan, nan, 0.25]
on x = [-1, 0, 4]).
Shapes: N elements.
Reference: JAX FAQ, "Gradients contain NaN where using where".
"""

from __future__ import annotations

import numpy as np
import torch

from ..shared.core.checks import check_variant
from ._common import field, scenario_run

__all__ = ["sqrt_where", "value_and_grad", "run"]


def sqrt_where(x: torch.Tensor, variant: str) -> torch.Tensor:
    """sum over [N] of sqrt(x) where x > 0, else 0; scalar in x's dtype.

    "ported" guards the argument (double where); "naive" does not, so its
    gradient is NaN at every x <= 0. Source: PITFALLS P13.
    """
    check_variant("p13_where_nan", variant)
    pos = x > 0
    if variant == "ported":
        x = torch.where(pos, x, torch.ones_like(x))  # GRAD-FLOW: the untaken branch sees a safe argument
    return torch.where(pos, torch.sqrt(x), torch.zeros_like(x)).sum()


def value_and_grad(x: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(sqrt_where(x) [], its gradient [N]); x requires grad."""
    check_variant("p13_where_nan", variant)
    f = sqrt_where(x, variant)
    return f, torch.autograd.grad(f, [x])[0]


@scenario_run("p13_where_nan")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: f []; grads/x [N] (NaN at x <= 0 in "naive")."""
    x = field(fx, "x", requires_grad=True)
    f, g = value_and_grad(x, variant)
    return {"f": f, "grads/x": g}
