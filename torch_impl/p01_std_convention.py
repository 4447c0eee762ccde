"""p01_std_convention: the standard deviation over the last axis, torch's way.

Gradient flow: x -> std(x) -> sum -> loss; d std_i / d x_ij = (x_ij − mean_i) / ((N − 1) std_i).
Port note: torch `x.std(dim)` is unbiased (correction=1, divide by N − 1); `jnp.std`
divides by N (ddof=0). Port `x.std(dim)` as `jnp.std(x, axis, ddof=1)` and torch
`correction=0` as the jnp default. A single element: torch NaN, jnp.std 0.
Shapes: R rows, N elements per row.
Reference: PyTorch docs, torch.std (correction).
"""

from __future__ import annotations

import numpy as np
import torch

from ..shared.core.checks import check_variant
from ._common import field, scenario_run

__all__ = ["row_std", "std_and_grad", "run"]


def row_std(x: torch.Tensor, variant: str) -> torch.Tensor:
    """Std over the last axis: [R, N] -> [R], unbiased (torch's default) in both variants."""
    check_variant("p01_std_convention", variant)
    return x.std(dim=-1)


def std_and_grad(x: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(row_std(x) [R], d sum(std) / dx [R, N]); x requires grad."""
    check_variant("p01_std_convention", variant)
    std = row_std(x, variant)
    (grad,) = torch.autograd.grad(std.sum(), [x])  # GRAD-FLOW: d sum(std) / dx through the mean and the N − 1 divisor
    return std, grad


@scenario_run("p01_std_convention")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: std [R]; grads/x [R, N] = d sum(std) / dx."""
    std, grad = std_and_grad(field(fx, "x", requires_grad=True), variant)
    return {"std": std, "grads/x": grad}
