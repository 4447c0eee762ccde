"""p09_lstm_layout (pitfall P09): an nn.LSTMCell unrolled over T steps, the reference layout.

Gradient flow: loss(h_T, c_T) -> every step's gates -> both biases and kernels
(b_ih and b_hh get the same gradient: they are added).
Port note: torch `nn.LSTMCell` packs the gates i | f | g | o in weight_ih [4H, D]
and weight_hh [4H, H], has two biases and returns (h, c). JAX `nnx.LSTMCell`
has one kernel per gate, one bias per gate and carries (c, h): split the blocks,
bias = b_ih + b_hh, swap the carry. The trap: dropping b_hh or passing the carry
in torch's order runs without error.
Shapes: T steps, B sequences, D inputs, H hidden units, G = 4H.
Reference: Hochreiter & Schmidhuber 1997; PyTorch docs, torch.nn.LSTMCell.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run
from ._layout import grads_of, load_params

__all__ = ["Recurrent", "build_model", "lstm_loss", "state_and_grads", "run"]


class Recurrent(nn.Module):
    """Unrolls self.cell = nn.LSTMCell(D, H) over x [T, B, D] from (h0, c0) [B, H]; returns (h_T, c_T)."""

    def __init__(self, d: int, h: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(d, h, dtype=dtype)

    def forward(
        self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, variant: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_variant("p09_lstm_layout", variant)
        for x_t in x:
            h, c = self.cell(x_t, (h, c))  # torch: carry and result are (h, c)
        return h, c


def build_model(fx, variant: str) -> Recurrent:
    """A Recurrent loaded with the fixture's canonical parameters (torch_impl/_layout.py transposes the kernels).

    torch is the reference: the same model in both variants.
    """
    check_variant("p09_lstm_layout", variant)
    params = fx.under("params")
    return load_params(Recurrent(fx.dims["D"], fx.dims["H"], getattr(torch, fx.dtype)), params)


def lstm_loss(h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """0.5 * sum(h_T**2) + sum(c_T) over [B, H]: reaches both halves of the carry. ValueError if shapes differ."""
    check_same_shape("lstm_loss", h=h.shape, c=c.shape)
    return 0.5 * (h**2).sum() + c.sum()


def state_and_grads(model: Recurrent, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor, variant: str):
    """(h_T, c_T [B, H], canonical gradients of lstm_loss for every parameter) after T steps."""
    check_variant("p09_lstm_layout", variant)
    h, c = model(x, h0, c0, variant)
    lstm_loss(h, c).backward()  # GRAD-FLOW: both biases and kernels are trained through every step
    return h, c, grads_of(model)


@scenario_run("p09_lstm_layout")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: h, c [B, H] after T steps; grads/cell/{ih,hh}/{kernel,bias} (canonical layout)."""
    model = build_model(fx, variant)
    h, c, grads = state_and_grads(model, field(fx, "x"), field(fx, "h0"), field(fx, "c0"), variant)
    return {"h": h, "c": c, **{f"grads/{k}": g for k, g in grads.items()}}
