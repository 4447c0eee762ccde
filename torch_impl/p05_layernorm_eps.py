"""p05_layernorm_eps: LayerNorm with torch's default epsilon (1e-5).

Gradient flow: x -> LN(x) -> sum(c * LN(x)); the gradient flows through the row mean
and variance, and eps sits under the square root: 1 / sqrt(var + eps).
Port note: `nn.LayerNorm(D)` uses eps=1e-5, `nnx.LayerNorm(D)` epsilon=1e-6. Pass
`epsilon=1e-5` explicitly; it matters when the feature variance is near eps
(std ≈ 0.01: outputs off by ~0.1, input gradients by ~23 %). torch `weight` is Flax `scale`.
Shapes: B rows, D features.
Reference: Ba et al. 2016, arXiv:1607.06450; PyTorch docs, torch.nn.LayerNorm.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run
from ._layout import grads_of, load_params

__all__ = ["make_layer_norm", "forward_and_grads", "run"]


def make_layer_norm(fx, variant: str) -> nn.LayerNorm:
    """nn.LayerNorm(D) with its default eps = 1e-5, loaded with the fixture's scale and bias."""
    check_variant("p05_layernorm_eps", variant)
    params = fx.under("params")
    return load_params(nn.LayerNorm(fx.dims["D"], dtype=getattr(torch, fx.dtype)), params)


def forward_and_grads(ln: nn.LayerNorm, x: torch.Tensor, c: torch.Tensor):
    """(y [B, D], canonical gradients of scale and bias, d loss / dx [B, D]) of loss = sum(c * y); x requires grad."""
    y = ln(x)
    check_same_shape("weighted_sum", c=c.shape, y=y.shape)
    (c * y).sum().backward()  # GRAD-FLOW: through the row mean and 1 / sqrt(var + eps)
    return y, grads_of(ln), x.grad


@scenario_run("p05_layernorm_eps")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: y [B, D]; grads/x [B, D]; grads/scale, grads/bias [D] of loss = sum(c * y)."""
    y, g_ln, g_x = forward_and_grads(make_layer_norm(fx, variant), field(fx, "x", requires_grad=True), field(fx, "c"))
    out = {"y": y, "grads/x": g_x}
    out.update({f"grads/{k}": g for k, g in g_ln.items()})
    return out
