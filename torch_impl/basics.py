"""basics: y = 2x and z = y.detach() have the same values; z carries no gradient.

Gradient flow: x -> y -> loss flows; x -> y -> z -/-> loss is cut at z.
Port note: `y.detach()` aliases y's storage (an in-place write to z shows in y);
a loss built only from z has no graph, so torch raises on backward where JAX
returns zeros. `grads_or_zeros` maps that to zeros explicitly (pitfall P11).
Shapes: N elements.
Reference: PyTorch docs, torch.Tensor.detach.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..shared.core.checks import check_same_shape, check_variant
from ._common import StepCall, field, grads_or_zeros, numpy, scenario_run, scenario_step, step_of

__all__ = ["forward", "loss_via_z", "loss_total", "gradients", "step_calls", "make_step", "run"]


def forward(x: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    """y = 2x [N] and its copy z [N], stopped in variant "z_stopped"."""
    check_variant("basics", variant)
    y = 2 * x
    z = y.detach() if variant == "z_stopped" else y  # GRAD-FLOW: z has y's values but is a constant
    return y, z


def loss_via_z(x: torch.Tensor, c: torch.Tensor, variant: str) -> torch.Tensor:
    """sum(c * z) of x [N], c [N]: a loss that reaches x only through z.

    Raises ValueError on an unknown variant or if c's shape differs from x's (no broadcasting).
    """
    check_same_shape("loss_via_z", x=x.shape, c=c.shape)
    check_variant("basics", variant)
    _, z = forward(x, variant)
    return (c * z).sum()


def loss_total(x: torch.Tensor, c: torch.Tensor, d: torch.Tensor, variant: str) -> torch.Tensor:
    """sum(d * y + c * z) of x, c, d [N]: y's path always flows, z's only without the stop.

    Raises ValueError on an unknown variant or if c's or d's shape differs from x's.
    """
    check_same_shape("loss_total", x=x.shape, c=c.shape, d=d.shape)
    check_variant("basics", variant)
    y, z = forward(x, variant)
    return (d * y + c * z).sum()


def gradients(x: torch.Tensor, c: torch.Tensor, d: torch.Tensor, variant: str):
    """(loss_total [], d loss_via_z / dx [N], d loss_total / dx [N]): the lesson's two gradients; x requires grad."""
    (g_via_z,) = grads_or_zeros(loss_via_z(x, c, variant), [x])
    loss = loss_total(x, c, d, variant)
    (g_total,) = grads_or_zeros(loss, [x])
    return loss, g_via_z, g_total


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: the lesson's two gradients on the fixture (loss_total first)."""
    x = field(fx, "x", requires_grad=True)
    c, d = field(fx, "c"), field(fx, "d")
    return [StepCall(gradients, (), (x, c, d), {"variant": variant})]


@scenario_step("basics")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """d/dx of loss_via_z and of loss_total (both gradients of run); returns loss_total."""
    return step_of(step_calls(fx, variant))


@scenario_run("basics")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: y, z [N]; grads/x_via_z, grads/x_total [N] (d loss / d x)."""
    x = field(fx, "x", requires_grad=True)
    c, d = field(fx, "c"), field(fx, "d")
    y, z = forward(x, variant)
    _, g_via_z, g_total = gradients(x, c, d, variant)
    return {"y": numpy(y), "z": numpy(z), "grads/x_via_z": numpy(g_via_z), "grads/x_total": numpy(g_total)}
