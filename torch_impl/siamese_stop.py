"""siamese_stop: BYOL's EMA target and SimSiam's stopped branch, the symmetric loss, one step.

Gradient flow: loss -> predictor -> online network, never the target branch: BYOL computes
the target network's projections under torch.no_grad(), SimSiam detaches the online
network's own projections; simsiam_no_stop lets the gradient through both branches.
BYOL's target then moves by target.lerp_(online, 1 − τ) under torch.no_grad(): a write.
Port note: torch's backward() walks every path, so BYOL needs the no_grad (else the target
gets .grad) and an optimizer over online + predictor only; JAX differentiates what the
DiffState filter names, which is why BYOL's JAX reference calls its stop "not necessary".
SimSiam's target is the online network itself: its detach is needed in both frameworks.
Shapes: B samples, D inputs, H hidden units, P projection dimensions.
Reference: Grill et al. 2020, arXiv:2006.07733; Chen & He 2021, arXiv:2011.10566 (simsiam/builder.py).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..shared.core.checks import check_same_shape, check_scalar, check_variant
from ._common import field, grads_or_zeros, numpy, scenario_run
from ._layout import grads_of, load_params, params_of

__all__ = ["Network", "Siamese", "build_model", "targets", "symmetric_loss", "ema_update", "train_step", "run"]


class Network(nn.Module):
    """f(x [B, D]) [B, P] = l2(tanh(l1(x))): encoder and projector."""

    def __init__(self, d: int, h: int, p: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(d, h, dtype=dtype)
        self.l2 = nn.Linear(h, p, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(x)))


class Siamese(nn.Module):
    """online f_θ, predictor q [P, P], target f_ξ (BYOL's EMA copy; unused by SimSiam)."""

    def __init__(self, d: int, h: int, p: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.online = Network(d, h, p, dtype)
        self.predictor = nn.Linear(p, p, dtype=dtype)
        self.target = Network(d, h, p, dtype)


def build_model(fx) -> Siamese:
    """A Siamese model loaded with the fixture's canonical parameters."""
    params = fx.under("params")
    dims = fx.dims
    return load_params(Siamese(dims["D"], dims["H"], dims["P"], getattr(torch, fx.dtype)), params)


def targets(
    model: Siamese, z1: torch.Tensor, z2: torch.Tensor, views, variant: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(t1, t2) [B, P]: the target network's projections of the views (byol), or z1, z2 stopped (simsiam) or not."""
    check_variant("siamese_stop", variant)
    if variant == "byol":
        with torch.no_grad():  # GRAD-FLOW: the target branch is a constant for the online network (BYOL)
            return model.target(views[0]), model.target(views[1])
    if variant == "simsiam":
        # GRAD-FLOW: SimSiam's target is the online projection, stopped
        return z1.detach(), z2.detach()
    return z1, z2


def symmetric_loss(p1, p2, t1, t2, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(D(p1, t2), D(p2, t1)) of predictions and targets [B, P]: mean(2 − 2 cos) (BYOL) or ½·(−mean cos) (SimSiam).

    Raises ValueError on an unknown variant or a shape mismatch. Reference: BYOL eq. 2; SimSiam eq. 1-2.
    """
    check_variant("siamese_stop", variant)
    check_same_shape("symmetric_loss", p1=p1.shape, t2=t2.shape, p2=p2.shape, t1=t1.shape)
    if variant == "byol":
        return (2 - 2 * F.cosine_similarity(p1, t2, dim=-1)).mean(), (
            2 - 2 * F.cosine_similarity(p2, t1, dim=-1)
        ).mean()
    return -0.5 * F.cosine_similarity(p1, t2, dim=-1).mean(), -0.5 * F.cosine_similarity(p2, t1, dim=-1).mean()


def ema_update(online: nn.Module, target: nn.Module, tau: float) -> nn.Module:
    """BYOL's ξ ← τ·ξ + (1 − τ)·θ, in place; returns target. Raises ValueError unless τ is in [0, 1]."""
    check_scalar("ema_update", "tau", tau, 0.0, 1.0)
    # GRAD-FLOW: the EMA target update is a parameter write, outside any graph
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            t.lerp_(o, 1.0 - tau)
    return target


def train_step(model: Siamese, optimizer: torch.optim.Optimizer, views: list, tau: float, variant: str):
    """One SGD step of online and predictor, then BYOL's EMA target update; returns (loss before the
    step, canonical gradients, {term: the views' gradients (x1, x2) [B, D]} in the simsiam variants)."""
    z1, z2 = model.online(views[0]), model.online(views[1])
    t1, t2 = targets(model, z1, z2, views, variant)
    term12, term21 = symmetric_loss(model.predictor(z1), model.predictor(z2), t1, t2, variant)
    view_grads = {}
    if variant != "byol":
        for name, term in (("term12", term12), ("term21", term21)):
            view_grads[name] = grads_or_zeros(term, views, retain_graph=True)
    loss = term12 + term21
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grads = grads_of(model)
    optimizer.step()
    if variant == "byol":
        ema_update(model.online, model.target, tau)
    return loss, grads, view_grads


@scenario_run("siamese_stop")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/<net>/<param> and params/<net>/<param> after one step for online, predictor
    (and target for byol); view_grads/{term12,term21}/{x1,x2} [B, D] (simsiam variants)."""
    model = build_model(fx)
    learned = [*model.online.parameters(), *model.predictor.parameters()]
    # GRAD-FLOW: the optimizer holds online and predictor only
    optimizer = torch.optim.SGD(learned, lr=fx.scalar("lr"))
    views = [field(fx, v, requires_grad=variant != "byol") for v in ("x1", "x2")]
    loss, grads, view_grads = train_step(model, optimizer, views, fx.scalar("tau"), variant)
    out = {}
    for name, (g1, g2) in view_grads.items():
        out.update({f"view_grads/{name}/x1": g1, f"view_grads/{name}/x2": g2})
    nets = ("online", "predictor", "target") if variant == "byol" else ("online", "predictor")
    out.update({f"grads/{k}": g for k, g in grads.items() if k.split("/")[0] in nets})
    out.update({f"params/{k}": v for k, v in params_of(model).items() if k.split("/")[0] in nets})
    out["loss"] = numpy(loss)
    return out
