"""p10_adam_weight_decay (pitfall P10): Adam with weight decay on a linear regression.

Gradient flow: loss -> w; torch Adam(weight_decay=wd) adds wd * w to the
gradient before the moments (coupled L2), so the decay is rescaled by Adam.
Port note: torch `Adam(weight_decay=wd)` is `optax.chain(optax.add_decayed_weights(wd),
optax.adam(lr))` in JAX; torch `AdamW` is `optax.adamw` with weight_decay passed
explicitly (defaults: torch 1e-2, optax 1e-4). The trap: porting Adam(wd) as
optax.adamw runs, and differs by about 3e-2 after 3 steps with wd = 0.1.
Shapes: B samples, D features.
Reference: Loshchilov & Hutter 2019, arXiv:1711.05101.
"""

from __future__ import annotations

import numpy as np
import torch

from ..shared.core.checks import check_same_shape
from ._common import field, numpy, scenario_run

__all__ = ["make_optimizer", "mse_loss", "loss_and_grad", "run"]


def make_optimizer(w: torch.Tensor, fx) -> torch.optim.Adam:
    """torch.optim.Adam over [w] with the fixture's lr, betas, eps and weight_decay (both variants)."""
    betas = (fx.scalar("b1"), fx.scalar("b2"))
    wd, hyper = fx.scalar("weight_decay"), dict(lr=fx.scalar("lr"), betas=betas, eps=fx.scalar("eps"))
    return torch.optim.Adam([w], weight_decay=wd, **hyper)  # GRAD-FLOW: coupled L2 (wd * w joins the gradient)


def mse_loss(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """0.5 * mean((pred - y)**2) over pred, y [B]. Raises ValueError if the shapes differ."""
    check_same_shape("mse_loss", pred=pred.shape, y=y.shape)
    return 0.5 * ((pred - y) ** 2).mean()


def loss_and_grad(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mse_loss(x @ w, y) [], its gradient in w [D], no decay term: Adam adds it); w requires grad."""
    loss = mse_loss(x @ w, y)
    loss.backward()
    return loss, w.grad


@scenario_run("p10_adam_weight_decay")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss [] and grads/w [D] of step 1 (no decay term); params/w, moved/w [D] after `steps`."""
    w = field(fx, "w", requires_grad=True)
    x, y = field(fx, "x"), field(fx, "y")
    optimizer = make_optimizer(w, fx)
    for step in range(int(fx["steps"])):
        optimizer.zero_grad()
        loss, grads = loss_and_grad(w, x, y)
        if step == 0:
            loss0, grads0 = numpy(loss), numpy(grads).copy()
        optimizer.step()
    after = numpy(w)
    return {"loss": loss0, "grads/w": grads0, "params/w": after, "moved/w": after - fx["w"]}
