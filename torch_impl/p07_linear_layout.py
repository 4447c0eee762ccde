"""p07_linear_layout: load a torch nn.Linear checkpoint and train on it; weight is [out, in].

Gradient flow: loss = mean((x Wᵀ + b − y)²) -> W, b. Outputs in the canonical layout:
grads/kernel [I, O] is weight.grad transposed (torch_impl/_layout.py).
Port note: a Flax kernel is [in, out], so kernel = weight.T. A square layer loaded
without the transpose raises nothing and computes x W + b: a different function.
Non-square layers fail at load time, which is why the square case is the dangerous one.
Shapes: B samples, I inputs, O outputs (I = O).
Reference: PyTorch docs, torch.nn.Linear; Flax docs, flax.nnx.Linear.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run
from ._layout import grads_of

__all__ = ["load_linear", "mse", "loss_and_grads", "run"]


def load_linear(fx, variant: str) -> nn.Linear:
    """nn.Linear(I, O) from the fixture's torch state dict (weight [O, I], bias [O]), as torch stores it."""
    check_variant("p07_linear_layout", variant)
    o, i = fx["state_dict/weight"].shape
    lin = nn.Linear(i, o, dtype=getattr(torch, fx.dtype))
    lin.load_state_dict({"weight": field(fx, "state_dict/weight"), "bias": field(fx, "state_dict/bias")})
    return lin


def mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error of pred [B, O] against target [B, O]. Raises ValueError on a shape mismatch."""
    check_same_shape("mse", pred=pred.shape, target=target.shape)
    return F.mse_loss(pred, target)


def loss_and_grads(lin: nn.Linear, x: torch.Tensor, y: torch.Tensor):
    """(loss [], pred [B, O], canonical gradients of kernel [I, O] and bias [O])."""
    pred = lin(x)
    loss = mse(pred, y)
    loss.backward()  # GRAD-FLOW: d loss / d (kernel, bias)
    return loss, pred, grads_of(lin)


@scenario_run("p07_linear_layout")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; pred [B, O]; grads/kernel [I, O] (canonical); grads/bias [O]."""
    loss, pred, grads = loss_and_grads(load_linear(fx, variant), field(fx, "x"), field(fx, "y"))
    out = {"loss": loss, "pred": pred}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    return out
