"""tbptt: truncated backpropagation through time, Elman tanh cell (nn.RNNCell) and GRU (nn.GRUCell).

Gradient flow: loss_t -> h_t -> h_{t-1} -> ... back to the start of t's window; the
carry is detached at t = 0, k, 2k, ..., so nothing reaches an earlier input step.
k = T is full BPTT. Idiomatic torch calls backward once per window (C11: that, not
detach, is what frees a window's activations); the summed gradient is the same.
Port note: nn.GRUCell computes n = tanh(W_in x + b_in + r * (W_hn h + b_hn)); the
canonical layout keeps torch's fused blocks, ih/kernel = weight_ih.T [I, 3H] with gate
columns r | z | n (torch_impl/_layout.py). nnx.GRUCell has no b_hn (P08): the JAX twin
is a plain function.
Shapes: T steps, B sequences, I inputs, H hidden units, G = 3H GRU gates, O outputs.
Reference: Williams & Peng 1990, doi:10.1162/neco.1990.2.4.490; Cho et al. 2014, arXiv:1406.1078.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_truncation, truncation_length
from ._common import StepCall, field, numpy, scenario_run, scenario_step, step_of
from ._layout import grads_of, load_params

__all__ = [
    "Recurrent",
    "build_model",
    "step_loss",
    "unroll",
    "unroll_windows",
    "train_windows",
    "gradients",
    "step_calls",
    "make_step",
    "run",
]

CELLS = ("elman", "gru")  # the cells this module implements (the record lists the same)


class Recurrent(nn.Module):
    """h_t = cell(x_t [B, I], h_{t-1} [B, H]); y_t [B, O] = readout(h_t). cell: "elman" (tanh) or "gru"."""

    def __init__(self, cell: str, i: int, h: int, o: int, dtype: torch.dtype) -> None:
        super().__init__()
        if cell not in CELLS:
            raise ValueError(f"Recurrent: cell expected one of {CELLS}, got {cell!r}")
        rnn_cell = nn.RNNCell if cell == "elman" else nn.GRUCell
        self.cell = rnn_cell(i, h, dtype=dtype)
        self.readout = nn.Linear(h, o, dtype=dtype)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.cell(x, h)  # nn.GRUCell: gates r, z, n; n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
        return h, self.readout(h)


def build_model(fx, cell: str) -> Recurrent:
    """A Recurrent model of one cell loaded with the fixture's canonical parameters."""
    params = fx.under(f"params/{cell}")
    i, h, o = fx.dims["I"], fx.dims["H"], fx.dims["O"]
    return load_params(Recurrent(cell, i, h, o, getattr(torch, fx.dtype)), params)


def step_loss(y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """0.5 * mean((y - target)^2) of one step, y and target [B, O]. Raises ValueError on a shape mismatch."""
    check_same_shape("step_loss", y=y.shape, target=target.shape)
    return 0.5 * torch.mean((y - target) ** 2)


def unroll(model: Recurrent, x: torch.Tensor, h: torch.Tensor, k: int) -> list[torch.Tensor]:
    """Outputs y_t [B, O] for t < T over x [T, B, I] from h [B, H], the carry detached every k steps.

    Raises ValueError unless k is an int in [1, T] (k = 0 once raised ZeroDivisionError).
    """
    check_truncation("unroll", k, x.shape[0], divides=False)
    ys = []
    for t in range(x.shape[0]):
        if t % k == 0:
            h = h.detach()  # GRAD-FLOW: a new window starts from a constant carry
        h, y = model(x[t], h)
        ys.append(y)
    return ys


def unroll_windows(model: Recurrent, x: torch.Tensor, h: torch.Tensor, k: int) -> list[torch.Tensor]:
    """As `unroll`, structured as a loop over windows of k steps, each starting from a detached carry.

    Raises ValueError unless k is an int in [1, T] dividing T (mirrors the JAX scan over equal windows).
    """
    t_steps = x.shape[0]
    k = check_truncation("unroll_windows", k, t_steps)
    ys = []
    for start in range(0, t_steps, k):
        h = h.detach()  # GRAD-FLOW: a new window starts from a constant carry
        for x_t in x[start : start + k]:
            h, y = model(x_t, h)
            ys.append(y)
    return ys


def train_windows(model: Recurrent, x: torch.Tensor, h: torch.Tensor, targets: torch.Tensor, k: int) -> torch.Tensor:
    """Truncated BPTT as a training loop runs it: k steps forward, backward, then the next window.

    x [T, B, I], h [B, H], targets [T, B, O]. The gradient of the summed loss accumulates in
    the parameters' .grad (zero them first); returns the summed loss [] (no graph). Only one
    window's graph is alive at a time: peak memory is flat in T for a fixed k (C11).
    Raises ValueError unless k is an int in [1, T] dividing T (mirrors the JAX scan over equal
    windows) and targets have T steps, or on a targets shape mismatch (step_loss).
    """
    t_steps = x.shape[0]
    k = check_truncation("train_windows", k, t_steps, targets.shape[0])
    total = x.new_zeros(())
    for start in range(0, t_steps, k):
        h = h.detach()  # GRAD-FLOW: a new window starts from a constant carry
        loss = x.new_zeros(())
        for t in range(start, start + k):
            h, y = model(x[t], h)
            loss = loss + step_loss(y, targets[t])
        loss.backward()  # frees this window's graph before the next window builds its own
        total += loss.detach()
    return total


def gradients(model: Recurrent, x: torch.Tensor, h: torch.Tensor, targets: torch.Tensor, k: int):
    """One forward, then the gradients run reports: (summed loss [], canonical gradients of the
    parameters, d loss / dx [T, B, I], d loss_{T-1} / dx [T, B, I] of the last step's loss alone).

    x [T, B, I] requiring grad, h [B, H], targets [T, B, O]; the carry detached every k steps (unroll).
    Resets .grad first: backward accumulates, each call starts from no gradient.
    """
    model.zero_grad(set_to_none=True)
    x.grad = None
    losses = [step_loss(y, targets[t]) for t, y in enumerate(unroll(model, x, h, k))]  # T of []
    (grad_last,) = torch.autograd.grad(losses[-1], x, retain_graph=True)  # the last step's loss alone
    for start in range(0, x.shape[0], k):  # one backward per window, as a TBPTT training loop does
        torch.stack(losses[start : start + k]).sum().backward()
    return torch.stack(losses).sum(), grads_of(model), x.grad, grad_last


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: run's gradients of each cell on the fixture (no update; the summed loss first)."""
    k = truncation_length(variant, fx.dims["T"])
    models = [build_model(fx, cell) for cell in CELLS]
    x, targets, h0 = field(fx, "x", requires_grad=True), field(fx, "targets"), field(fx, "h0")
    return [StepCall(gradients, (model,), (x, h0, targets, k)) for model in models]


@scenario_step("tbptt")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """Both cells, as run: per-window backward and d(last loss)/dx; returns the loss summed over steps and cells."""
    return step_of(step_calls(fx, variant))


@scenario_run("tbptt")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs per cell: loss [], grads/<param>, grads/x [T, B, I], grads_last/x/tNN [B, I] (last step's loss)."""
    out = {}
    t_steps = fx.dims["T"]
    k = truncation_length(variant, t_steps)
    for cell in CELLS:
        model = build_model(fx, cell)
        x, targets = field(fx, "x", requires_grad=True), field(fx, "targets")
        loss, grads, g_x, grad_last = gradients(model, x, field(fx, "h0"), targets, k)
        out[f"{cell}/loss"] = numpy(loss)
        out.update({f"{cell}/grads/{key}": g for key, g in grads.items()})
        out[f"{cell}/grads/x"] = numpy(g_x)
        grad_last = numpy(grad_last)
        out.update({f"{cell}/grads_last/x/t{t:02d}": grad_last[t] for t in range(t_steps)})
    return out
