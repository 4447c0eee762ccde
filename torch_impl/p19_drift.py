"""p19_drift (pitfall P19): 1,000 full-batch SGD steps with weight decay, torch's way.

Gradient flow: loss -> every parameter; torch.optim.SGD adds wd·θ to each gradient (coupled decay).
What drifts between frameworks is rounding, or a porting bug.
Port note: torch.optim.SGD(params, lr, weight_decay=wd) is optax.chain(optax.add_decayed_weights(wd),
optax.sgd(lr)); optax.sgd has no weight_decay argument, and the port that drops it agrees to 5e-6
after one step, not after 1,000. Float noise is told from a bug by a float64 rerun (noise vanishes)
and by a same-framework run in another summation order, e.g. the batch permuted (noise is that size).
torch runs the steps as a tight eager loop.
Shapes: B samples, D inputs, H hidden units.
Reference: PyTorch docs, torch.optim.SGD (weight_decay); Goldberg 1991, "What every computer
scientist should know about floating-point arithmetic", doi:10.1145/103162.103163.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, numpy, scenario_run
from ._layout import load_params, params_of

__all__ = ["MLP", "build_model", "make_optimizer", "train", "run"]


class MLP(nn.Module):
    """pred [B, 1] = l2(tanh(l1(x [B, D])))."""

    def __init__(self, d: int, h: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(d, h, dtype=dtype)
        self.l2 = nn.Linear(h, 1, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(x)))


def build_model(fx) -> MLP:
    """An MLP loaded with the fixture's canonical parameters (the same starting point on both sides)."""
    params = fx.under("params")
    return load_params(MLP(fx.dims["D"], fx.dims["H"], getattr(torch, fx.dtype)), params)


def make_optimizer(model: MLP, fx, variant: str) -> torch.optim.SGD:
    """torch.optim.SGD(lr, weight_decay) in both variants: torch is the reference."""
    check_variant("p19_drift", variant)
    return torch.optim.SGD(model.parameters(), lr=fx.scalar("lr"), weight_decay=fx.scalar("weight_decay"))


def train(model: MLP, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, steps: int) -> torch.Tensor:
    """`steps` full-batch steps on mean((pred − y)²), in place; returns the loss before each step [steps].

    Raises ValueError unless pred and y are both [B, 1].
    """
    losses = torch.empty(steps, dtype=x.dtype)
    for t in range(steps):
        optimizer.zero_grad(set_to_none=True)
        pred = model(x)
        check_same_shape("train", pred=pred.shape, y=y.shape)
        loss = torch.mean((pred - y) ** 2)
        loss.backward()  # GRAD-FLOW: the same gradient on both sides: only rounding (or a bug) differs
        optimizer.step()
        losses[t] = loss.detach()
    return losses


@scenario_run("p19_drift")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: losses [steps] (before each step); params/<param> after `steps`."""
    model = build_model(fx)
    losses = train(model, make_optimizer(model, fx, variant), field(fx, "x"), field(fx, "y"), int(fx["steps"]))
    return {"losses": numpy(losses), **{f"params/{k}": v for k, v in params_of(model).items()}}
