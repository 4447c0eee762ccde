"""straight_through: a VQ-VAE quantizer's straight-through estimator, its two stopped losses, the EMA codebook.

Gradient flow: recon -> decoder, and -> encoder through z_e + (z_q − z_e).detach() (never the
codebook); codebook loss mean((z_e.detach() − z_q)²) -> codebook only; commitment
mean((z_e − z_q.detach())²) -> encoder only. ema_codebook: the codebook is written under
torch.no_grad() from the EMA statistics, never by a gradient.
Port note: `.detach()` becomes `jax.lax.stop_gradient` on the same operand; torch.round and
torch.sign have zero derivatives, like jnp.round / jnp.sign, so the estimator is the only
path. Second order: torch.autograd.grad(..., create_graph=True) then a second grad gives the
identity's Hessian through the estimator (1 for 0.5·(y − t)²), as nested jax.grad does.
Shapes: B rows, D input features, K latent dimensions, C codebook entries.
Reference: van den Oord et al. 2017, arXiv:1711.00937; DeepMind Sonnet, sonnet/src/nets/vqvae.py.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_scalar, check_variant
from ._common import field, grads_or_zeros, numpy, scenario_run
from ._layout import load_params, params_of

__all__ = [
    "VQVAE",
    "build_model",
    "straight_through",
    "quantize",
    "vq_losses",
    "ema_update",
    "second_order",
    "train_step",
    "run",
]


class VQVAE(nn.Module):
    """encoder: x [B, D] -> z_e [B, K]; codebook [C, K]; decoder: z [B, K] -> x̂ [B, D]; EMA buffers [C], [C, K]."""

    def __init__(self, d: int, k: int, c: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.encoder = nn.Linear(d, k, dtype=dtype)
        self.codebook = nn.Parameter(torch.zeros(c, k, dtype=dtype))
        self.decoder = nn.Linear(k, d, dtype=dtype)
        self.register_buffer("ema_count", torch.ones(c, dtype=dtype))
        self.register_buffer("ema_sum", torch.zeros(c, k, dtype=dtype))


def build_model(fx) -> VQVAE:
    """A VQVAE loaded with the fixture's parameters and EMA statistics."""
    dims = fx.dims
    model = VQVAE(dims["D"], dims["K"], dims["C"], getattr(torch, fx.dtype))
    load_params(
        model, {k: fx[f"params/{k}"] for k in ("encoder/kernel", "encoder/bias", "decoder/kernel", "decoder/bias")}
    )
    model.codebook = nn.Parameter(field(fx, "params/codebook"))  # not an nn.Linear: outside the layout rules
    model.ema_count.copy_(field(fx, "ema_count"))
    model.ema_sum.copy_(field(fx, "ema_sum"))
    return model


def straight_through(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """x + (q − x).detach(): forward value q, gradient (and Hessian) of the identity in x. Same shapes."""
    check_same_shape("straight_through", x=x.shape, q=q.shape)
    return x + (q - x).detach()  # GRAD-FLOW: straight-through: forward q, backward the identity


def quantize(z_e: torch.Tensor, codebook: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(z_q [B, K] = codebook[k], k [B] int64): the nearest code of each z_e [B, K] (first on a tie)."""
    distances = ((z_e[:, None, :] - codebook[None]) ** 2).sum(-1)  # [B, C]
    codes = distances.argmin(dim=1)
    return codebook[codes], codes


def vq_losses(
    model: VQVAE, x: torch.Tensor, variant: str
) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """({recon, codebook, commit} scalar losses of x [B, D], z_e [B, K], codes [B]); no codebook term with EMA.

    Raises ValueError for an unknown variant. Reference: van den Oord et al. 2017, eq. 3.
    """
    check_variant("straight_through", variant)
    z_e = model.encoder(x)
    z_q, codes = quantize(z_e, model.codebook)
    z = z_q if variant == "no_straight_through" else straight_through(z_e, z_q)
    losses = {"recon": ((model.decoder(z) - x) ** 2).mean()}
    if variant != "ema_codebook":
        # GRAD-FLOW: the codebook loss moves the codes only
        losses["codebook"] = ((z_e.detach() - z_q) ** 2).mean()
    # GRAD-FLOW: the commitment loss moves the encoder only
    losses["commit"] = ((z_e - z_q.detach()) ** 2).mean()
    return losses, z_e, codes


def ema_update(model: VQVAE, z_e: torch.Tensor, codes: torch.Tensor, decay: float, eps: float) -> None:
    """Sonnet's VectorQuantizerEMA step on z_e [B, K] assigned to codes [B]: statistics, then the codebook, in place.

    Raises ValueError unless decay is in [0, 1) and eps > 0.
    """
    check_scalar("ema_update", "decay", decay, 0.0, 1.0, high_open=True)
    check_scalar("ema_update", "eps", eps, 0.0, low_open=True)
    # GRAD-FLOW: the EMA codebook update is a parameter write, outside any graph
    with torch.no_grad():
        onehot = nn.functional.one_hot(codes, model.codebook.shape[0]).to(z_e.dtype)  # [B, C]
        model.ema_count.lerp_(onehot.sum(0), 1.0 - decay)
        model.ema_sum.lerp_(onehot.T @ z_e, 1.0 - decay)
        total = model.ema_count.sum()
        smoothed = (model.ema_count + eps) / (total + model.ema_count.shape[0] * eps) * total  # Laplace
        model.codebook.copy_(model.ema_sum / smoothed[:, None])


def second_order(u: torch.Tensor, t: torch.Tensor, rounding: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, dL/du, d²L/du² diagonal) of L = 0.5·Σ(y − t)², y = straight_through(u, round(u) or sign(u)), all [B, K].

    u: a leaf tensor (it is set to require grad).
    """
    u.requires_grad_(True)
    y = straight_through(u, torch.round(u) if rounding == "round" else torch.sign(u))
    (grad,) = torch.autograd.grad(0.5 * ((y - t) ** 2).sum(), u, create_graph=True)
    (second,) = torch.autograd.grad(grad.sum(), u)  # L is a sum over elements: its Hessian is diagonal
    return y, grad, second


def _canonical(model: VQVAE, tensors: list[torch.Tensor]) -> dict[str, np.ndarray]:
    named = dict(zip((n for n, _ in model.named_parameters()), tensors, strict=True))
    codebook = named.pop("codebook")
    return {**params_of(model, named), "codebook": numpy(codebook)}


def train_step(model: VQVAE, optimizer: torch.optim.Optimizer, x, beta, decay, eps, variant: str):
    """One SGD step on recon + codebook + β·commit (then the EMA codebook update in ema_codebook); returns
    ({term: loss}, codes [B], quantized [B, K], {term: its canonical gradients}), all before the step."""
    losses, z_e, codes = vq_losses(model, x, variant)
    quantized = model.codebook[codes]  # [B, K], a copy: the step below writes the codebook in place
    params = list(model.parameters())
    terms = {
        name: _canonical(model, grads_or_zeros(value, params, retain_graph=True)) for name, value in losses.items()
    }
    total = losses["recon"] + losses.get("codebook", 0.0) + beta * losses["commit"]
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    optimizer.step()
    if variant == "ema_codebook":
        ema_update(model, z_e, codes, decay, eps)
    return losses, codes, quantized, terms


@scenario_run("straight_through")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss/<term> [], codes [B], quantized [B, K], grads/<term>/<param>, params/<param> after one
    SGD step (ema_codebook: codebook from the EMA, ema/count [C], ema/sum [C, K]), st/{round,sign}/{value,grad,second}."""
    model = build_model(fx)
    optimizer = torch.optim.SGD(model.parameters(), lr=fx.scalar("lr"))
    hyper = (fx.scalar("beta"), fx.scalar("decay"), fx.scalar("ema_eps"))
    losses, codes, quantized, terms = train_step(model, optimizer, field(fx, "x"), *hyper, variant)
    out = {f"loss/{name}": value for name, value in losses.items()}
    out.update(codes=codes.to(torch.int32), quantized=quantized)
    for name, grads in terms.items():
        out.update({f"grads/{name}/{k}": g for k, g in grads.items()})
    if variant == "ema_codebook":
        out.update({"ema/count": model.ema_count, "ema/sum": model.ema_sum})
    out.update({f"params/{k}": v for k, v in _canonical(model, list(model.parameters())).items()})
    for rounding in ("round", "sign"):
        y, grad, second = second_order(field(fx, "u"), field(fx, "t"), rounding)
        out.update({f"st/{rounding}/value": numpy(y), f"st/{rounding}/grad": numpy(grad)})
        out[f"st/{rounding}/second"] = numpy(second)
    return out
