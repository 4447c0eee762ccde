"""p04_gelu: GELU, torch's exact (erf) form.

Gradient flow: x -> gelu(x) -> sum; gelu'(x) = Φ(x) + x·φ(x).
Port note: `F.gelu` is exact unless approximate='tanh'; `jax.nn.gelu` defaults to
approximate=True (the tanh formula). Port as `jax.nn.gelu(x, approximate=False)`;
at x = 1 the naive port gives 0.841192 instead of 0.841345.
Shapes: N elements.
Reference: Hendrycks & Gimpel 2016, arXiv:1606.08415; PyTorch docs, torch.nn.functional.gelu.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..shared.core.checks import check_variant
from ._common import field, scenario_run

__all__ = ["gelu", "gelu_and_grad", "run"]


def gelu(x: torch.Tensor, variant: str) -> torch.Tensor:
    """x·Φ(x) elementwise, [N] -> [N], exact in both variants (torch's default)."""
    check_variant("p04_gelu", variant)
    return F.gelu(x)


def gelu_and_grad(x: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(gelu(x) [N], gelu'(x) [N]); x requires grad."""
    check_variant("p04_gelu", variant)
    y = gelu(x, variant)
    (grad,) = torch.autograd.grad(y.sum(), [x])  # GRAD-FLOW: elementwise derivative of the activation
    return y, grad


@scenario_run("p04_gelu")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: y [N] = gelu(x); grads/x [N] = gelu'(x)."""
    y, grad = gelu_and_grad(field(fx, "x", requires_grad=True), variant)
    return {"y": y, "grads/x": grad}
