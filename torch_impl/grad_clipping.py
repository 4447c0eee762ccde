"""grad_clipping: truncated-BPTT training of an Elman RNN with clip_grad_norm_ and SGD.

Gradient flow: each window starts from a detached carry (truncation); the window's loss
flows to every parameter; clip_grad_norm_ then rescales all .grad in place by
min(max_norm / (‖g‖ + 1e-6), 1): one factor for the whole model, direction kept. It needs
no detach and records nothing (it runs on .grad, outside the graph).
Port note: optax.clip_by_global_norm uses a different formula (no epsilon, and no scaling
at all below the threshold); the JAX twin reproduces torch's with a small optax
transformation. torch >= 2.6 splits the op into get_total_norm + clip_grads_with_norm_.
Shapes: T = S·K steps, B sequences, I inputs, H hidden units, O outputs.
Reference: Pascanu et al. 2013, arXiv:1211.5063.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_scalar, check_values
from ._common import field, numpy, scenario_run, scenario_step
from ._layout import load_params, params_of

__all__ = [
    "Recurrent",
    "build_model",
    "masked_loss",
    "clip_by_global_norm_torch",
    "train_step",
    "NO_STEP_CALLS",
    "make_step",
    "run",
]


class Recurrent(nn.Module):
    """h_t = tanh(x_t W_ih + b_ih + h_{t-1} W_hh + b_hh) (nn.RNNCell); y_t [B, O] = readout(h_t)."""

    def __init__(self, i: int, h: int, o: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.cell = nn.RNNCell(i, h, dtype=dtype)
        self.readout = nn.Linear(h, o, dtype=dtype)

    def forward(self, xs: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Unroll a window xs [K, B, I] from h [B, H]: (outputs [K, B, O], last hidden state [B, H])."""
        ys = []
        for x_t in xs:
            h = self.cell(x_t, h)
            ys.append(self.readout(h))
        return torch.stack(ys), h


def build_model(fx) -> Recurrent:
    """A Recurrent model loaded with the fixture's canonical parameters."""
    params = fx.under("params")
    i, h, o = fx.dims["I"], fx.dims["H"], fx.dims["O"]
    return load_params(Recurrent(i, h, o, getattr(torch, fx.dtype)), params)


def masked_loss(y: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, weight: float) -> torch.Tensor:
    """weight * 0.5 * mean(mask * (y - target)^2) over y, target [K, B, O], mask [K, B] (0 = padding).

    Raises ValueError if y and target shapes differ, or mask is not [K, B] with values in {0, 1}.
    """
    check_same_shape("masked_loss", y=y.shape, target=target.shape)
    check_same_shape("masked_loss", y_steps=y.shape[:-1], mask=mask.shape)
    check_values("masked_loss", "mask", mask, choices=(0.0, 1.0))
    return weight * 0.5 * torch.mean((mask[..., None] * (y - target)) ** 2)


def clip_by_global_norm_torch(parameters, max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_: every .grad *= min(max_norm / (‖g‖ + 1e-6), 1), in place.

    Returns the global L2 norm ‖g‖ before clipping (0-d tensor). All-zero gradients stay zero
    (coefficient clamped to 1): no NaN. Raises ValueError unless max_norm > 0 (a negative one flips g).
    """
    check_scalar("clip_by_global_norm_torch", "max_norm", max_norm, 0.0, low_open=True)
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm)


def train_step(model: Recurrent, optimizer, h, xs, targets, mask, max_norm: float, weight: float):
    """One window: forward from a detached carry, backward, clip, SGD step.

    Returns (stats [3] = loss, norm before and after clipping; carry for the next window).
    """
    optimizer.zero_grad()
    h = h.detach()  # GRAD-FLOW: truncation: the window starts from a constant carry
    ys, h = model(xs, h)
    loss = masked_loss(ys, targets, mask, weight)
    loss.backward()
    norm = clip_by_global_norm_torch(model.parameters(), max_norm)
    clipped = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    optimizer.step()
    return torch.stack([loss, norm, clipped]), h


# no step_calls (the bench's tuned forms tune fixed calls): each call trains the next window, and the
# JAX step is a pure jax.jit whose parameters and carry pass from one call to the next
NO_STEP_CALLS = "its step walks the windows, threading the parameters and the carry from call to call"


@scenario_step("grad_clipping")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """One window's train_step (clip, SGD) in regime "above"; calls walk the windows, carrying h; returns its loss."""
    model = build_model(fx)
    optimizer = torch.optim.SGD(model.parameters(), lr=fx.scalar("lr"))
    r, k = (
        fx.spec.constants["regimes"].index("above"),
        int(fx["window"]),
    )  # "above": the gradient norm exceeds max_norm, clipping acts
    max_norm, weight = float(fx["max_norm"][r]), fx.scalar("loss_weight")
    x, targets, masks = field(fx, "x"), field(fx, "targets"), field(fx, "mask")
    windows = [(x[s : s + k], targets[s : s + k], masks[r, s : s + k]) for s in range(0, x.shape[0], k)]
    h0 = field(fx, "h0")
    h, i = h0, 0

    def step() -> torch.Tensor:
        nonlocal h, i
        stats, h = train_step(model, optimizer, h, *windows[i], max_norm, weight)
        i = (i + 1) % len(windows)
        if i == 0:
            h = h0  # the next pass over the sequence starts again from h0, as run's loop does
        return stats[0].detach()

    return step


@scenario_run("grad_clipping")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs per regime: loss, norms, coefs, clipped_norms [S]; moved/<param> after S steps."""
    out = {}
    k = int(fx["window"])
    x, targets, masks = field(fx, "x"), field(fx, "targets"), field(fx, "mask")
    for r, regime in enumerate(fx.spec.constants["regimes"]):
        model = build_model(fx)
        optimizer = torch.optim.SGD(model.parameters(), lr=fx.scalar("lr"))
        max_norm, weight = float(fx["max_norm"][r]), fx.scalar("loss_weight")
        before, h, rows = params_of(model), field(fx, "h0"), []
        for start in range(0, x.shape[0], k):
            w = slice(start, start + k)
            stats, h = train_step(model, optimizer, h, x[w], targets[w], masks[r, w], max_norm, weight)
            rows.append(numpy(stats))
        loss, norms, clipped = np.stack(rows).T
        out.update({f"{regime}/loss": loss, f"{regime}/norms": norms, f"{regime}/clipped_norms": clipped})
        out[f"{regime}/coefs"] = np.divide(clipped, norms, out=np.ones_like(norms), where=norms > 0)  # 1 where g = 0
        after = params_of(model)
        out.update({f"{regime}/moved/{leaf}": after[leaf] - before[leaf] for leaf in before})
    return out
