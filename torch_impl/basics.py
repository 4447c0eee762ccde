"""basics: y = 2x and z = y.detach() have the same values; z carries no gradient.

Gradient flow: x -> y -> loss flows; x -> y -> z -/-> loss is cut at z.
Port note: `y.detach()` aliases y's storage (an in-place write to z shows in y);
a loss built only from z has no graph, so torch raises on backward where JAX
returns zeros. `grads_or_zeros` maps that to zeros explicitly (pitfall P11).
Shapes: N elements.
Reference: PyTorch docs, torch.Tensor.detach.
"""

from __future__ import annotations

import numpy as np
import torch

from torch_impl._common import grads_or_zeros, numpy, scenario_run, tensor

__all__ = ["forward", "loss_via_z", "loss_total", "run"]


def forward(x: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    """y = 2x [N] and its copy z [N], stopped in variant "z_stopped"."""
    y = 2 * x
    z = y.detach() if variant == "z_stopped" else y  # GRAD-FLOW: z has y's values but is a constant
    return y, z


def loss_via_z(x: torch.Tensor, c: torch.Tensor, variant: str) -> torch.Tensor:
    """sum(c * z): a loss that reaches x only through z."""
    _, z = forward(x, variant)
    return (c * z).sum()


def loss_total(x: torch.Tensor, c: torch.Tensor, d: torch.Tensor, variant: str) -> torch.Tensor:
    """sum(d * y + c * z): y's path always flows, z's only without the stop."""
    y, z = forward(x, variant)
    return (d * y + c * z).sum()


@scenario_run("basics")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: y, z [N]; grads/x_via_z, grads/x_total [N] (d loss / d x)."""
    x = tensor(fx, "x", requires_grad=True)
    c, d = tensor(fx, "c"), tensor(fx, "d")
    y, z = forward(x, variant)
    (g_via_z,) = grads_or_zeros(loss_via_z(x, c, variant), [x])
    (g_total,) = grads_or_zeros(loss_total(x, c, d, variant), [x])
    return {"y": numpy(y), "z": numpy(z), "grads/x_via_z": numpy(g_via_z), "grads/x_total": numpy(g_total)}
