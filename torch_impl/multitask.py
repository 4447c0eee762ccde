"""multitask: a shared trunk and two heads; isolate one task from the trunk.

Gradient flow: loss1 -> head1 -> trunk; loss2 -> head2 -/-> trunk when task 2 is
isolated (head2 reads features.detach()). The isolated head still learns: the stop
is on its input, not on its parameters.
Port note: `features.detach()` becomes `jax.lax.stop_gradient(features)`; one
backward of the scalar total (loss1 + loss2) becomes one nnx.value_and_grad.
Calling backward() on a non-scalar output raises in torch, as jax.grad does.
Shapes: B samples, D inputs, H trunk features, C classes of task 2.
Reference: Caruana 1997, "Multitask Learning", doi:10.1023/A:1007379606734.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..shared.core.checks import check_rank, check_same_shape, check_values, check_variant
from ._common import StepCall, field, numpy, scenario_run, scenario_step, step_of
from ._layout import grads_of, load_params

__all__ = ["MultiTaskNet", "build_model", "task_losses", "loss_and_grads", "step_calls", "make_step", "run"]


class MultiTaskNet(nn.Module):
    """pred1 [B] = head1(f1), logits2 [B, C] = head2(f2), f = tanh(trunk(x [B, D])) [B, H]."""

    def __init__(self, d: int, h: int, c: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.trunk = nn.Linear(d, h, dtype=dtype)
        self.head1 = nn.Linear(h, 1, dtype=dtype)
        self.head2 = nn.Linear(h, c, dtype=dtype)

    def forward(self, x: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
        check_variant("multitask", variant)
        features = torch.tanh(self.trunk(x))  # [B, H]
        f1 = f2 = features
        if variant == "isolate_task1":
            f1 = features.detach()  # GRAD-FLOW: task 1 trains its head only, not the trunk
        if variant == "isolate_task2":
            f2 = features.detach()  # GRAD-FLOW: task 2 trains its head only, not the trunk
        return self.head1(f1).squeeze(-1), self.head2(f2)


def build_model(fx) -> MultiTaskNet:
    """A MultiTaskNet loaded with the fixture's canonical parameters (dtype of the fixture)."""
    params = fx.under("params")
    d, h, c = fx.dims["D"], fx.dims["H"], fx.dims["C"]
    return load_params(MultiTaskNet(d, h, c, getattr(torch, fx.dtype)), params)


def task_losses(
    pred1: torch.Tensor, y1: torch.Tensor, logits2: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss1, loss2): mean squared error of pred1 [B] vs y1 [B]; cross-entropy of logits2 [B, C] vs labels [B] int.

    Raises:
      ValueError: pred1 and y1 differ in shape (e.g. [B, 1] vs [B]), a batch size mismatch, or a label
        outside [0, C) (torch raises IndexError, optax silently gives a wrong loss).
    Reference: Caruana 1997.
    """
    check_same_shape("task_losses", pred1=pred1.shape, y1=y1.shape)
    check_rank("task_losses", "logits2", logits2.shape, "BC")
    check_same_shape("task_losses", logits2_batch=logits2.shape[:1], labels=labels.shape)
    check_values("task_losses", "labels", labels, low=0, high=logits2.shape[-1], high_open=True)
    return F.mse_loss(pred1, y1), F.cross_entropy(logits2, labels)


def loss_and_grads(
    model: MultiTaskNet, x: torch.Tensor, y1: torch.Tensor, labels: torch.Tensor, variant: str
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], dict[str, np.ndarray]]:
    """(total, (loss1, loss2), canonical gradients of the total) after one backward of loss1 + loss2."""
    check_variant("multitask", variant)
    model.zero_grad(set_to_none=True)
    pred1, logits2 = model(x, variant)
    loss1, loss2 = task_losses(pred1, y1, logits2, labels)
    total = loss1 + loss2
    total.backward()
    return total, (loss1, loss2), grads_of(model)


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one loss_and_grads of a model built from the fixture (the total first)."""
    model = build_model(fx)
    x, y1, labels = field(fx, "x"), field(fx, "y1"), field(fx, "labels")
    return [StepCall(loss_and_grads, (model,), (x, y1, labels), {"variant": variant})]


@scenario_step("multitask")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """One backward of loss1 + loss2 (loss_and_grads, no update: run takes none); returns the total."""
    return step_of(step_calls(fx, variant))


@scenario_run("multitask")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, loss_task1, loss_task2 []; grads/<param> of the total loss (trunk, head1, head2)."""
    model = build_model(fx)
    x, y1, labels = field(fx, "x"), field(fx, "y1"), field(fx, "labels")
    total, (loss1, loss2), grads = loss_and_grads(model, x, y1, labels, variant)
    out = {"loss": numpy(total), "loss_task1": numpy(loss1), "loss_task2": numpy(loss2)}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    return out
