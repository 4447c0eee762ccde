"""gumbel_straight_through: the straight-through Gumbel-softmax with the noise given.

Gradient flow: loss -> decoder, and -> logits through y_soft only: y_hard − y_soft.detach() +
y_soft is one-hot forward and y_soft's gradient backward (hard); soft is y_soft itself;
hard_no_straight_through feeds the argmax one-hot, which has no path to the logits.
Port note: F.gumbel_softmax(logits, tau, hard=True) draws its own noise (−log of
Exp(1) samples); `gumbel_softmax` here is its body with the noise as an argument, equal to it
for the same noise (tests/test_gumbel_straight_through.py). JAX: jax.nn.softmax, jax.nn.one_hot
and jax.lax.stop_gradient in the same order; jax.random.gumbel for fresh noise.
Shapes: B samples, C categories, K decoder outputs.
Reference: Jang et al. 2017, arXiv:1611.01144; PyTorch torch/nn/functional.py gumbel_softmax.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_scalar, check_variant
from ._common import field, grads_or_zeros, scenario_run
from ._layout import load_params, params_of

__all__ = ["gumbel_softmax", "one_hot_sample", "sample_categories", "decoder_loss", "sample_and_grads", "run"]


def gumbel_softmax(logits: torch.Tensor, gumbels: torch.Tensor, tau: float, hard: bool) -> torch.Tensor:
    """F.gumbel_softmax(logits [B, C], tau, hard) with the Gumbel noise `gumbels` [B, C] given; [B, C].

    Raises ValueError if logits and gumbels differ in shape, or tau <= 0.
    """
    check_scalar("gumbel_softmax", "tau", tau, 0.0, low_open=True)
    check_same_shape("gumbel_softmax", logits=logits.shape, gumbels=gumbels.shape)
    y_soft = ((logits + gumbels) / tau).softmax(dim=-1)
    if not hard:
        return y_soft
    index = y_soft.argmax(dim=-1, keepdim=True)
    y_hard = torch.zeros_like(logits).scatter_(-1, index, 1.0)
    # GRAD-FLOW: straight-through: forward one-hot, backward the soft sample's gradient
    return y_hard - y_soft.detach() + y_soft


def one_hot_sample(logits: torch.Tensor, gumbels: torch.Tensor, tau: float) -> torch.Tensor:
    """The bug: one_hot(argmax softmax((logits + gumbels)/τ)) [B, C], a constant for autograd."""
    index = ((logits + gumbels) / tau).softmax(dim=-1).argmax(dim=-1)
    return nn.functional.one_hot(index, logits.shape[-1]).to(logits.dtype)


def sample_categories(logits: torch.Tensor, gumbels: torch.Tensor, tau: float, variant: str) -> torch.Tensor:
    """The variant's sample [B, C]: straight-through one-hot (hard), y_soft (soft) or the bare one-hot.

    Raises ValueError for an unknown variant.
    """
    check_variant("gumbel_straight_through", variant)
    if variant == "hard_no_straight_through":
        return one_hot_sample(logits, gumbels, tau)
    return gumbel_softmax(logits, gumbels, tau, hard=variant == "hard")


def decoder_loss(decoder: nn.Linear, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """0.5·mean((decoder(y [B, C]) − target [B, K])²). Raises ValueError on a shape mismatch."""
    decoded = decoder(y)
    check_same_shape("decoder_loss", decoded=decoded.shape, target=target.shape)
    return 0.5 * ((decoded - target) ** 2).mean()


def sample_and_grads(decoder: nn.Linear, logits, gumbels, tau, target, variant: str):
    """(sample y [B, C], soft sample [B, C], index [B] int32, loss [], d loss / d logits [B, C], canonical
    decoder gradients) of the decoder's loss on the sample; logits require grad."""
    y = sample_categories(logits, gumbels, tau, variant)
    loss = decoder_loss(decoder, y, target)
    g_logits, *g_decoder = grads_or_zeros(loss, [logits, decoder.weight, decoder.bias])
    soft = ((logits + gumbels) / tau).softmax(dim=-1)
    g_decoder = params_of(decoder, dict(zip(("weight", "bias"), g_decoder, strict=True)))
    return y, soft, soft.argmax(dim=-1).to(torch.int32), loss, g_logits, g_decoder


@scenario_run("gumbel_straight_through")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: sample, soft_sample [B, C]; index [B] int32; loss []; grads/logits [B, C], grads/decoder/<param>."""
    c, k = fx.dims["C"], fx.dims["K"]
    decoder = load_params(
        nn.Linear(c, k, dtype=getattr(torch, fx.dtype)),
        {"kernel": fx["params/decoder/kernel"], "bias": fx["params/decoder/bias"]},
    )
    logits, gumbels, tau = field(fx, "logits", requires_grad=True), field(fx, "gumbels"), fx.scalar("tau")
    y, soft, index, loss, g_logits, g_decoder = sample_and_grads(
        decoder, logits, gumbels, tau, field(fx, "target"), variant
    )
    out = {"sample": y, "soft_sample": soft, "index": index}
    out.update(loss=loss, **{"grads/logits": g_logits})
    out.update({f"grads/decoder/{name}": v for name, v in g_decoder.items()})
    return out
