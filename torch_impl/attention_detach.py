"""attention_detach: single-head scaled dot-product attention, weights detached or not.

Gradient flow: loss -> context = A V -> Wv, x; A = softmax(Q Kᵀ / √K) -> Wq, Wk.
With A.detach() the only path to Wq and Wk is cut: their .grad stays None (zeros
here); dWv is unchanged.
Port note: torch.softmax has no `where=`; an empty (fully masked) row is NaN unless
guarded, so both ports write the same double torch.where / jnp.where and define an
empty row as zero weights (pitfall P12).
Shapes: N tokens, E model width, K head width.
Reference: Vaswani et al. 2017, arXiv:1706.03762.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_variant
from ._common import StepCall, field, numpy, scenario_run, scenario_step, step_of
from ._layout import grads_of, load_params

__all__ = ["Attention", "build_model", "masked_softmax", "mse_loss", "loss_and_grads", "step_calls", "make_step", "run"]


class Attention(nn.Module):
    """Single head: context [N, K] = masked_softmax(q(x) k(x)ᵀ / √K) v(x), x [N, E]; no biases."""

    def __init__(self, e: int, k: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.q = nn.Linear(e, k, bias=False, dtype=dtype)
        self.k = nn.Linear(e, k, bias=False, dtype=dtype)
        self.v = nn.Linear(e, k, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(context [N, K], weights [N, N]); mask [N, N] bool, True = may attend."""
        check_variant("attention_detach", variant)
        q, k, v = self.q(x), self.k(x), self.v(x)  # [N, K] each
        weights = masked_softmax(q @ k.T / math.sqrt(q.shape[-1]), mask)  # [N, N]
        if variant == "weights_stopped":
            weights = weights.detach()  # GRAD-FLOW: constant weights: no gradient reaches Q and K
        return weights @ v, weights


def build_model(fx) -> Attention:
    """An Attention head loaded with the fixture's canonical kernels."""
    params = fx.under("params")
    return load_params(Attention(fx.dims["E"], fx.dims["K"], getattr(torch, fx.dtype)), params)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Row softmax of scores [N, N] over the allowed entries; a fully masked row gives zeros (P12).

    Masked entries are −inf (weight exactly 0). An empty row's scores are replaced by 0
    before the softmax, so neither its value nor its gradient is NaN.
    """
    live = mask.any(dim=-1, keepdim=True)  # [N, 1]
    scores = torch.where(mask, scores, -math.inf)
    scores = torch.where(live, scores, 0.0)  # GRAD-FLOW: empty rows get finite scores: no NaN in the gradient
    return torch.where(live, torch.softmax(scores, dim=-1), 0.0)  # GRAD-FLOW: an empty row attends to nothing


def mse_loss(context: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """mean((context - target)²) over [N, K]. Raises ValueError on a shape mismatch."""
    check_same_shape("mse_loss", context=context.shape, target=target.shape)
    return ((context - target) ** 2).mean()


def loss_and_grads(model: Attention, x: torch.Tensor, mask: torch.Tensor, target: torch.Tensor, variant: str):
    """(loss [], context [N, K], weights [N, N], canonical kernel gradients, d loss / dx [N, E]) of one backward.

    x must require grad. Resets .grad first: backward accumulates, each call starts from no gradient.
    """
    model.zero_grad(set_to_none=True)
    x.grad = None
    context, weights = model(x, mask, variant)
    loss = mse_loss(context, target)
    loss.backward()
    return loss, context, weights, grads_of(model), x.grad


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one loss_and_grads of a head built from the fixture (no update; the loss first)."""
    model = build_model(fx)
    x, mask, target = field(fx, "x", requires_grad=True), field(fx, "mask"), field(fx, "target")
    return [StepCall(loss_and_grads, (model,), (x, mask, target), {"variant": variant})]


@scenario_step("attention_detach")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """Backward of the attention head's squared error into the kernels and x (no update); returns the loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("attention_detach")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss [], context [N, K], weights [N, N], grads/{q,k,v}/kernel [E, K], grads/x [N, E]."""
    model = build_model(fx)
    x = field(fx, "x", requires_grad=True)
    loss, context, weights, g_model, g_x = loss_and_grads(model, x, field(fx, "mask"), field(fx, "target"), variant)
    out = {"loss": numpy(loss), "context": numpy(context), "weights": numpy(weights), "grads/x": numpy(g_x)}
    out.update({f"grads/{k}": g for k, g in g_model.items()})
    return out
