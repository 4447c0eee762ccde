"""p02_norm_at_zero: the gradient of ‖x‖₂ at the zero vector, torch's way (0).

Gradient flow: x -> ‖x‖ -> loss; d‖x‖/dx = x / ‖x‖, which torch defines as 0 at x = 0.
Port note: torch's `linalg.vector_norm` backward masks the 0/0 at the zero vector;
`jnp.linalg.norm` (and optax.global_norm) differentiates sqrt at 0 and returns NaN,
also for `norm(x)**2`. Port with `optax.safe_norm(x, 0.0)` and `jnp.sum(x**2)`.
Shapes: N elements.
Reference: PyTorch docs, torch.linalg.vector_norm; optax docs, optax.safe_norm.
"""

from __future__ import annotations

import numpy as np
import torch

from ..shared.core.checks import check_same_shape, check_scalar, check_variant
from ._common import field, scenario_run

__all__ = ["norm", "sq_norm", "penalized", "norm_and_grads", "run"]


def norm(x: torch.Tensor, variant: str) -> torch.Tensor:
    """‖x‖₂ of x [N] -> []; its gradient at 0 is 0 (torch's convention)."""
    check_variant("p02_norm_at_zero", variant)
    return torch.linalg.vector_norm(x)  # GRAD-FLOW: d‖x‖/dx pinned to 0 at the zero vector


def sq_norm(x: torch.Tensor, variant: str) -> torch.Tensor:
    """‖x‖₂² of x [N] -> []; gradient 2x, finite at 0."""
    check_variant("p02_norm_at_zero", variant)
    return torch.linalg.vector_norm(x) ** 2  # GRAD-FLOW: d‖x‖²/dx = 2x, finite at the zero vector


def penalized(x: torch.Tensor, t: torch.Tensor, lam: float, variant: str) -> torch.Tensor:
    """0.5·‖x − t‖² + λ‖x‖: a data term plus a norm penalty (group-lasso style), x, t [N] -> [].

    Raises ValueError on a shape mismatch, a λ < 0 or an unknown variant.
    """
    check_variant("p02_norm_at_zero", variant)
    check_same_shape("penalized", x=x.shape, t=t.shape)
    check_scalar("penalized", "lam", lam, 0.0)  # a negative λ rewards a large norm
    return 0.5 * ((x - t) ** 2).sum() + lam * norm(x, variant)


def norm_and_grads(x: torch.Tensor, t: torch.Tensor, lam: float, variant: str) -> dict[str, torch.Tensor]:
    """norm [] and the gradients of norm, sq_norm and penalized at x [N]; x requires grad."""
    check_variant("p02_norm_at_zero", variant)
    return {
        "norm": norm(x, variant),
        "grads/norm": torch.autograd.grad(norm(x, variant), [x])[0],
        "grads/sq_norm": torch.autograd.grad(sq_norm(x, variant), [x])[0],
        "grads/penalized": torch.autograd.grad(penalized(x, t, lam, variant), [x])[0],
    }


@scenario_run("p02_norm_at_zero")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: norm []; grads/norm, grads/sq_norm, grads/penalized [N], all taken at x."""
    return norm_and_grads(field(fx, "x", requires_grad=True), field(fx, "t"), fx.scalar("lam"), variant)
