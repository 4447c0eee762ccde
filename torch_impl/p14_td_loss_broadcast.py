"""p14_td_loss_broadcast (pitfall P14): mean squared TD error of Q [B, 1] against a target [B].

Gradient flow: loss -> q flows (the target is already a constant here).
Port note: torch `F.mse_loss(q, target)` with [B, 1] and [B] only warns
("Using a target size ... different to the input size") and broadcasts to [B, B];
the JAX twin `jnp.mean((q - target) ** 2)` is silent. The trap: mse 1.8125
instead of 0.4375 on the handed input. Port: squeeze q to [B] explicitly, and
let the loss check shapes (shared.losses.check_same_shape raises ValueError).
Shapes: B transitions.
Reference: Mnih et al. 2015, doi:10.1038/nature14236 (the TD loss); PITFALLS P14.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, grads_or_zeros, scenario_run

__all__ = ["td_loss", "naive_td_loss", "loss_and_grads", "run"]


def td_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared TD error of q [B] against target [B]; scalar.

    Raises:
      ValueError: q and target differ in shape (e.g. [B, 1] vs [B]).
    """
    target = target.detach()  # GRAD-FLOW: the TD target is a constant for the online net
    check_same_shape("td_loss", q=q.shape, target=target.shape)
    return F.mse_loss(q, target)


def naive_td_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The straightforward loss on q [B, 1] and target [B]: broadcasts to [B, B] (torch warns).

    Kept to show the bug; never raises. Source: PITFALLS P14.
    """
    target = target.detach()  # GRAD-FLOW: the TD target is a constant for the online net
    with warnings.catch_warnings():  # the warning is asserted in the tests; here it is the bug being shown
        warnings.simplefilter("ignore", UserWarning)
        return F.mse_loss(q, target)


def loss_and_grads(q: torch.Tensor, target: torch.Tensor, variant: str):
    """(loss [], (d loss / dq [B, 1], d loss / d target [B])) of td_loss ("ported") or naive_td_loss; both require grad."""
    check_variant("p14_td_loss_broadcast", variant)
    if variant == "ported":
        loss = td_loss(q.squeeze(-1), target)
    else:
        loss = naive_td_loss(q, target)
    return loss, tuple(grads_or_zeros(loss, [q, target]))  # the detached target reports None: explicit zeros


@scenario_run("p14_td_loss_broadcast")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/q [B, 1] (d loss / d Q(s, a)); grads/target [B] (zero: a constant)."""
    q, target = field(fx, "q", requires_grad=True), field(fx, "target", requires_grad=True)
    loss, (g_q, g_target) = loss_and_grads(q, target, variant)
    return {"loss": loss, "grads/q": g_q, "grads/target": g_target}
