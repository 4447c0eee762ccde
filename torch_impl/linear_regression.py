"""linear_regression: y_hat = x @ w + b with squared error; optionally x stopped.

Gradient flow: loss -> y_hat -> (w, b, x); with x stopped, x -/-> loss.
Port note: `.backward()` accumulates into `.grad` (zero it between calls);
jax.grad returns fresh arrays. Dense weight w is a vector here: no layout issue.
Shapes: B samples, D features.
Reference: A3 §1.2 (C03); PyTorch docs, autograd mechanics.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..shared.core.checks import check_rank, check_same_shape, check_variant
from ._common import StepCall, field, grads_or_zeros, numpy, scenario_run, scenario_step, step_of

__all__ = ["predict", "mse_loss", "loss_and_grads", "step_calls", "make_step", "run"]


def predict(w: torch.Tensor, b: torch.Tensor, x: torch.Tensor, variant: str) -> torch.Tensor:
    """y_hat [B] = x [B, D] @ w [D] + b []; x stopped in variant "x_stopped".

    Raises ValueError unless x is [B, D], w [D] and b a scalar.
    """
    check_variant("linear_regression", variant)
    check_rank("predict", "x", x.shape, "BD")  # a [D, 1] w or a [B] x would broadcast silently
    check_rank("predict", "w", w.shape, "D")
    check_rank("predict", "b", b.shape, "")
    check_same_shape("predict", x_features=x.shape[1:], w=w.shape)
    if variant == "x_stopped":
        x = x.detach()  # GRAD-FLOW: the input is data, not something to learn
    return x @ w + b


def mse_loss(y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mean((y_hat - y)²), scalar. Raises ValueError if y_hat and y differ in shape."""
    check_same_shape("mse_loss", y_hat=y_hat.shape, y=y.shape)
    return ((y_hat - y) ** 2).mean()


def loss_and_grads(w: torch.Tensor, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor, variant: str):
    """(loss [], (d loss / dw [D], d loss / db [], d loss / dx [B, D])) of the squared error; w, b, x require grad."""
    loss = mse_loss(predict(w, b, x, variant), y)
    return loss, tuple(grads_or_zeros(loss, [w, b, x]))


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: the squared error's gradients for w, b and x on the fixture (no update; the loss first)."""
    w, b, x = (field(fx, k, requires_grad=True) for k in ("w", "b", "x"))
    y = field(fx, "y")
    return [StepCall(loss_and_grads, (), (w, b, x, y), {"variant": variant})]


@scenario_step("linear_regression")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """Gradients of the squared error for w, b and x (no update: run takes none); returns the loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("linear_regression")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/w [D], grads/b [], grads/x [B, D]."""
    w, b, x = (field(fx, k, requires_grad=True) for k in ("w", "b", "x"))
    y = field(fx, "y")
    loss, (g_w, g_b, g_x) = loss_and_grads(w, b, x, y, variant)
    return {"loss": numpy(loss), "grads/w": numpy(g_w), "grads/b": numpy(g_b), "grads/x": numpy(g_x)}
