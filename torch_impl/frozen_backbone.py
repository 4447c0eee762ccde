"""frozen_backbone: train a new classifier head on a frozen MLP backbone with AdamW.

Gradient flow: loss -> head flows; head -/-> backbone (requires_grad_(False) or
features.detach()). A parameter whose .grad is None is skipped by AdamW: no
moments and no weight decay, so the backbone stays bit-for-bit unchanged.
Port note: in JAX a stop_gradient gives a zero gradient, not a missing one, and
optax.adamw decays it; `naive_stop_gradient` shows that port (here: zero tensors
in .grad, as zero_grad(set_to_none=False) leaves them).
Shapes: B samples, D inputs, H features, C classes.
Reference: Yosinski et al. 2014, arXiv:1411.1792; Loshchilov & Hutter 2019, arXiv:1711.05101.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_variant
from ._common import StepCall, cross_entropy, field, numpy, scenario_run, scenario_step, step_of
from ._layout import grads_of, load_params, params_of

__all__ = ["Backbone", "Classifier", "build_model", "make_optimizer", "train_step", "step_calls", "make_step", "run"]

STOPPED = ("detach_features", "naive_stop_gradient")


class Backbone(nn.Module):
    """features [B, H] = tanh(l2(tanh(l1(x [B, D]))))."""

    def __init__(self, d: int, h: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(d, h, dtype=dtype)
        self.l2 = nn.Linear(h, h, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.l2(torch.tanh(self.l1(x))))


class Classifier(nn.Module):
    """logits [B, C] = head(backbone(x)); features detached in the STOPPED variants."""

    def __init__(self, d: int, h: int, c: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.backbone = Backbone(d, h, dtype)
        self.head = nn.Linear(h, c, dtype=dtype)

    def forward(self, x: torch.Tensor, variant: str) -> torch.Tensor:
        check_variant("frozen_backbone", variant)
        features = self.backbone(x)
        if variant in STOPPED:
            features = features.detach()  # GRAD-FLOW: the head trains on fixed features
        return self.head(features)


def build_model(fx) -> Classifier:
    """A Classifier loaded with the fixture's canonical parameters."""
    params = fx.under("params")
    d, h, c = fx.dims["D"], fx.dims["H"], fx.dims["C"]
    return load_params(Classifier(d, h, c, getattr(torch, fx.dtype)), params)


def make_optimizer(model: Classifier, fx, variant: str) -> torch.optim.AdamW:
    """AdamW over the trainable parameters; the backbone is frozen in "freeze_params".

    "naive_stop_gradient" leaves zero tensors in every .grad (not None), so AdamW decays them.
    """
    check_variant("frozen_backbone", variant)
    params = model.parameters()
    if variant == "freeze_params":
        model.backbone.requires_grad_(False)  # GRAD-FLOW: differentiate the head only
        params = model.head.parameters()  # GRAD-FLOW: frozen leaves stay out of the optimizer
    if variant == "naive_stop_gradient":
        for p in model.parameters():  # what an earlier backward + zero_grad(set_to_none=False) leaves behind
            p.grad = torch.zeros_like(p)
    betas = (fx.scalar("b1"), fx.scalar("b2"))
    return torch.optim.AdamW(
        params, lr=fx.scalar("lr"), betas=betas, eps=fx.scalar("eps"), weight_decay=fx.scalar("weight_decay")
    )


def train_step(
    model: Classifier, optimizer: torch.optim.Optimizer, x: torch.Tensor, labels: torch.Tensor, variant: str
) -> torch.Tensor:
    """One AdamW step; returns the loss before the step. .grad holds this step's gradients after it."""
    check_variant("frozen_backbone", variant)
    # the naive port keeps zero tensors in .grad instead of None: AdamW then decays the backbone
    optimizer.zero_grad(set_to_none=variant != "naive_stop_gradient")
    loss = cross_entropy(model(x, variant), labels)
    loss.backward()
    optimizer.step()
    return loss


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one AdamW train_step of a classifier built from the fixture (the loss)."""
    model = build_model(fx)
    optimizer = make_optimizer(model, fx, variant)
    x, labels = field(fx, "x"), field(fx, "labels")
    return [StepCall(train_step, (model, optimizer), (x, labels), {"variant": variant}, loss=())]


@scenario_step("frozen_backbone")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """One AdamW train_step of the classifier; returns the cross-entropy before the update."""
    return step_of(step_calls(fx, variant))


@scenario_run("frozen_backbone")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/<param> of step 1; params/<param> after `steps`; moved/<param> = after - before."""
    model = build_model(fx)
    optimizer = make_optimizer(model, fx, variant)

    x, labels = field(fx, "x"), field(fx, "labels")
    before = params_of(model)
    for step in range(int(fx["steps"])):
        loss = train_step(model, optimizer, x, labels, variant)
        if step == 0:
            loss0, grads0 = numpy(loss), grads_of(model)
    after = params_of(model)
    out = {"loss": loss0}
    out.update({f"grads/{k}": g for k, g in grads0.items()})
    out.update({f"params/{k}": v for k, v in after.items()})
    out.update({f"moved/{k}": after[k] - before[k] for k in after})
    return out
