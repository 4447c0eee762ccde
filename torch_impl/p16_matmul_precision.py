"""p16_matmul_precision (pitfall P16): a dense layer's output and gradients at full float32 precision.

Gradient flow: loss = sum(g * (x @ W)) -> x and W (both differentiated).
Port note: torch computes float32 matmuls in full float32 unless TF32 is allowed
(`torch.backends.cuda.matmul.allow_tf32`, False by default and pinned for every
call by torch_impl._common.numerics). JAX's default may be one bfloat16 (TPU) or TF32 (GPU)
pass: the package pins `jax_default_matmul_precision = "highest"` for every call, in
jax_impl._common.numerics. The trap: on CPU both are exact, so an unpinned port
passes every test here and drifts by ~1e-2 relative on an accelerator.
Shapes: B rows, I inputs, O outputs.
Reference: JAX docs, jax.default_matmul_precision; PyTorch docs, TF32 on Ampere.
"""

from __future__ import annotations

import numpy as np
import torch

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run

__all__ = ["dense", "forward_and_grads", "run"]


def dense(x: torch.Tensor, kernel: torch.Tensor, variant: str) -> torch.Tensor:
    """y [B, O] = x [B, I] @ kernel [I, O] in full float32 / float64 (torch: the same in both variants)."""
    check_variant("p16_matmul_precision", variant)
    return x @ kernel


def forward_and_grads(x: torch.Tensor, kernel: torch.Tensor, g: torch.Tensor, variant: str):
    """(y [B, O], (d sum(g * y) / dx [B, I], / d kernel [I, O])); x and kernel require grad."""
    check_variant("p16_matmul_precision", variant)
    y = dense(x, kernel, variant)
    check_same_shape("weighted_sum", g=g.shape, y=y.shape)
    grads = torch.autograd.grad((g * y).sum(), [x, kernel])  # GRAD-FLOW: differentiate x and the kernel
    return y, grads


@scenario_run("p16_matmul_precision")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: y [B, O]; grads/x [B, I] and grads/kernel [I, O] of sum(g * y)."""
    x = field(fx, "x", requires_grad=True)
    kernel = field(fx, "kernel", requires_grad=True)
    y, (gx, gk) = forward_and_grads(x, kernel, field(fx, "g"), variant)
    return {"y": y, "grads/x": gx, "grads/kernel": gk}
