"""gradient_penalty: WGAN-GP's critic loss, with the gradient penalty differentiated to second order.

Gradient flow: L -> critic through D(fake), D(real) and, second order, through the input
gradient g = ∇ₓD(x̂) of the penalty (create_graph=True keeps g's graph); the generator's
samples are detached, so it gets no gradient. no_create_graph builds g without a graph:
the penalty becomes a constant and its gradient (all of it second order) is lost, silently.
Port note: torch.autograd.grad(D(x̂).sum(), x̂, create_graph=True) is the JAX port's
jax.grad(lambda x: D(x).sum())(x̂) inside the differentiated loss; JAX has no create_graph,
its nested grad is always second order. torch.linalg.vector_norm has gradient 0 at 0, as
optax.safe_norm(g, 0.0); jnp.linalg.norm would give NaN at the zero-gradient row (P02).
Shapes: B samples, Z noise, X data, H hidden units, O = 1 critic output.
Reference: Gulrajani et al. 2017, arXiv:1704.00028 (igul222/improved_wgan_training).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_scalar, check_variant
from ._common import field, numpy, scenario_run
from ._layout import grads_of, load_params

__all__ = ["Critic", "WGAN", "build_model", "interpolates", "gradient_penalty", "critic_loss", "loss_and_grads", "run"]


class Critic(nn.Module):
    """D(x [B, X]) [B, O] = l2(relu(l1(x)))."""

    def __init__(self, x: int, h: int, o: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(x, h, dtype=dtype)
        self.l2 = nn.Linear(h, o, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x)))


class WGAN(nn.Module):
    """generator: z [B, Z] -> x [B, X] (linear); critic: x -> D(x) [B, O]."""

    def __init__(self, z: int, x: int, h: int, o: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.generator = nn.Linear(z, x, dtype=dtype)
        self.critic = Critic(x, h, o, dtype)


def build_model(fx) -> WGAN:
    """A WGAN loaded with the fixture's canonical parameters."""
    params = fx.under("params")
    dims = fx.dims
    return load_params(WGAN(dims["Z"], dims["X"], dims["H"], dims["O"], getattr(torch, fx.dtype)), params)


def interpolates(real: torch.Tensor, fake: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """x̂ = ε·real + (1 − ε)·fake of real, fake [B, X] and ε [B, 1]. Raises ValueError on a shape mismatch."""
    check_same_shape("interpolates", real=real.shape, fake=fake.shape)
    return eps * real + (1 - eps) * fake


def gradient_penalty(critic: Critic, x_hat: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean_b (‖∇ₓD(x̂_b)‖ − 1)² [], ‖∇ₓD(x̂_b)‖ [B]) at x̂ [B, X] (a leaf; set to require grad).

    create_graph follows the variant: False makes the input gradient a constant.
    Raises ValueError for an unknown variant. Reference: Gulrajani et al. 2017, eq. 3.
    """
    check_variant("gradient_penalty", variant)
    x_hat.requires_grad_(True)
    (g,) = torch.autograd.grad(
        critic(x_hat).sum(),  # the rows are independent: the gradient of the sum is the per-row gradient
        x_hat,
        create_graph=variant == "create_graph",  # GRAD-FLOW: the penalty's gradient is second order: it needs g's graph
    )
    norms = torch.linalg.vector_norm(g, dim=1)  # [B]; gradient 0 at g = 0 (the zero-norm row)
    return ((norms - 1) ** 2).mean(), norms


def critic_loss(model: WGAN, batch: dict[str, torch.Tensor], gp_weight: float, variant: str):
    """(L = mean D(fake) − mean D(real) + λ·penalty, (wasserstein [], penalty [], norms [B])) of the batch
    real [B, X], z [B, Z], eps [B, 1]. Raises ValueError for an unknown variant or gp_weight < 0."""
    check_scalar("critic_loss", "gp_weight", gp_weight, 0.0)
    # GRAD-FLOW: the critic step treats generated samples as data
    fake = model.generator(batch["z"]).detach()
    wasserstein = model.critic(fake).mean() - model.critic(batch["real"]).mean()
    penalty, norms = gradient_penalty(model.critic, interpolates(batch["real"], fake, batch["eps"]), variant)
    return wasserstein + gp_weight * penalty, (wasserstein, gp_weight * penalty, norms)


def loss_and_grads(model: WGAN, batch: dict[str, torch.Tensor], gp_weight: float, variant: str):
    """(L [], (wasserstein [], penalty [], norms [B]), canonical gradients of L)."""
    loss, aux = critic_loss(model, batch, gp_weight, variant)
    model.zero_grad(set_to_none=True)
    loss.backward()
    return loss, aux, grads_of(model)  # .grad None -> 0 (P11)


@scenario_run("gradient_penalty")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, loss/{wasserstein,penalty} []; grad_norms [B]; grads/<param> of L (generator and critic)."""
    model = build_model(fx)
    batch = {k: field(fx, k) for k in ("real", "z", "eps")}
    loss, (wasserstein, penalty, norms), grads = loss_and_grads(model, batch, fx.scalar("gp_weight"), variant)
    out = {"loss": numpy(loss), "loss/wasserstein": numpy(wasserstein), "loss/penalty": numpy(penalty)}
    out["grad_norms"] = numpy(norms)
    out.update({f"grads/{k}": g for k, g in grads.items()})
    return out
