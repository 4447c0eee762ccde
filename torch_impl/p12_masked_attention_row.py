"""p12_masked_attention_row (pitfall P12): masked attention where one query sees no key.

Gradient flow: loss over the valid query rows -> out -> probs, v -> q, k. The
empty row must not leak NaN into any gradient.
Port note: torch `softmax(s.masked_fill(~mask, -inf), -1)` is NaN on a fully
masked row; `.masked_fill(~mask, 0)` afterwards defines the empty row as zeros,
which is what JAX `jax.nn.softmax(s, where=mask)` returns. The trap: without it
the loss (padded rows excluded) is finite but the V gradient is all NaN, in both
frameworks; a finite -1e9 mask would give a uniform row instead, silently.
Shapes: T queries, S keys, K key width, V value width.
Reference: Vaswani et al. 2017, arXiv:1706.03762 (scaled dot-product attention).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run

__all__ = ["masked_softmax", "attention", "masked_loss", "loss_and_grads", "run"]


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, variant: str) -> torch.Tensor:
    """Softmax over the last axis of scores [T, S] where mask [T, S] is True.

    "ported": a row with no True is zeros (finite gradients). "naive": that row is
    NaN (softmax of all -inf). Source: PITFALLS P12.
    """
    check_variant("p12_masked_attention_row", variant)
    check_same_shape("masked_softmax", scores=scores.shape, mask=mask.shape)  # a [S] mask would broadcast
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    if variant == "ported":
        probs = probs.masked_fill(~mask, 0.0)  # GRAD-FLOW: an empty row is zeros, with zero gradient
    return probs


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, variant: str) -> torch.Tensor:
    """out [T, V] = masked_softmax(q [T, K] k [S, K]^T / sqrt(K)) @ v [S, V]."""
    check_variant("p12_masked_attention_row", variant)
    scores = q @ k.T / math.sqrt(q.shape[-1])
    return masked_softmax(scores, mask, variant) @ v


def masked_loss(out: torch.Tensor, w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum(w * out) [] over the query rows that see at least one key (padded rows excluded).

    Raises ValueError if out and w differ in shape, or mask is not [T, S] with the
    T query rows of out [T, V].
    """
    check_same_shape("masked_loss", out=out.shape, w=w.shape)
    if out.ndim != 2 or mask.ndim != 2 or mask.shape[0] != out.shape[0]:
        raise ValueError(
            f"masked_loss: mask has shape {tuple(mask.shape)} but out has shape {tuple(out.shape)}; "
            "expected out [T, V] and mask [T, S] with the same T"
        )
    valid = mask.any(dim=-1, keepdim=True)
    return (torch.where(valid, out, 0.0) * w).sum()  # GRAD-FLOW: padded query rows are excluded from the loss


def loss_and_grads(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, w: torch.Tensor, variant: str
):
    """(loss [], out [T, V], (d loss / dq [T, K], dk [S, K], dv [S, V])); q, k, v require grad."""
    check_variant("p12_masked_attention_row", variant)
    out = attention(q, k, v, mask, variant)
    loss = masked_loss(out, w, mask)
    return loss, out, torch.autograd.grad(loss, [q, k, v])


@scenario_run("p12_masked_attention_row")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; out [T, V]; grads/q [T, K], grads/k [S, K], grads/v [S, V] ("naive": out row and grads/v NaN)."""
    q, k, v = (field(fx, n, requires_grad=True) for n in ("q", "k", "v"))
    mask = field(fx, "mask")
    loss, out, (gq, gk, gv) = loss_and_grads(q, k, v, mask, field(fx, "w"), variant)
    return {"loss": loss, "out": out, "grads/q": gq, "grads/k": gk, "grads/v": gv}
