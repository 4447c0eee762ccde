"""p08_gru_bias: unroll torch's nn.GRUCell, whose candidate has a hidden-side bias b_hn.

Gradient flow: loss = sum(c ⊙ h_1..T) -> x (every step) and h0 (through the recurrence).
The candidate is n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)): b_hn is scaled by r.
Port note: nnx.GRUCell has no b_hn (its hidden-side Linear has no bias). Folding bias_hh
into the input bias, right for LSTM and for the r, z gates, is wrong for n whenever
r ≠ 1; the port is a small cell that keeps b_hn inside the reset gate.
Shapes: T steps, B sequences, I inputs, H hidden units, G = 3H gate rows (r, z, n).
Reference: Cho et al. 2014, arXiv:1406.1078; PyTorch docs, torch.nn.GRUCell.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run

__all__ = ["make_cell", "unroll", "states_and_grads", "run"]


def make_cell(fx, variant: str) -> nn.GRUCell:
    """nn.GRUCell(I, H) loaded from the fixture's torch state dict.

    Raises:
      ValueError: G != 3H.
    """
    check_variant("p08_gru_bias", variant)
    g, h = fx.dims["G"], fx.dims["H"]
    if g != 3 * h:
        raise ValueError(f"p08_gru_bias: state_dict rows G expected 3H = {3 * h}, got {g}")
    cell = nn.GRUCell(fx.dims["I"], h, dtype=getattr(torch, fx.dtype))
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    cell.load_state_dict({k: field(fx, f"state_dict/{k}") for k in names})
    return cell


def unroll(cell: nn.GRUCell, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Hidden states [T, B, H] from x [T, B, I] and h0 [B, H]."""
    hs = []
    for x_t in x:
        h = cell(x_t, h)
        hs.append(h)
    return torch.stack(hs)


def states_and_grads(cell: nn.GRUCell, x: torch.Tensor, h0: torch.Tensor, c: torch.Tensor):
    """(hidden states [T, B, H], d loss / dx [T, B, I], d loss / dh0 [B, H]) of loss = sum(c * h); x, h0 require grad."""
    hs = unroll(cell, x, h0)
    check_same_shape("weighted_sum", c=c.shape, h=hs.shape)
    gx, gh0 = torch.autograd.grad((c * hs).sum(), [x, h0])  # GRAD-FLOW: back through every step
    return hs, gx, gh0


@scenario_run("p08_gru_bias")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: h [T, B, H]; grads/x [T, B, I]; grads/h0 [B, H] of loss = sum(c * h)."""
    x, h0 = field(fx, "x", requires_grad=True), field(fx, "h0", requires_grad=True)
    hs, gx, gh0 = states_and_grads(make_cell(fx, variant), x, h0, field(fx, "c"))
    return {"h": hs, "grads/x": gx, "grads/h0": gh0}
