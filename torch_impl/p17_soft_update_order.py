"""p17_soft_update_order (pitfall P17): Polyak (soft) update of a target network.

Gradient flow: none; the update is a parameter write under torch.no_grad(), not
part of any graph (the target network is only ever a constant for the loss).
Port note: torch `target_p.lerp_(online_p, tau)` reads as "move target towards
online by tau". The JAX idiom is `optax.incremental_update(online, target, tau)`:
the online network goes first. The trap: the swapped call returns
tau * target + (1 - tau) * online, a near-hard copy, with no error.
Shapes: I inputs, O outputs.
Reference: Lillicrap et al. 2016, arXiv:1509.02971 (soft target updates).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_scalar
from ._common import scenario_run
from ._layout import load_params, params_of

__all__ = ["build_layer", "soft_update", "run"]


def build_layer(fx, net: str) -> nn.Linear:
    """nn.Linear(I, O) loaded with the fixture's `<net>/kernel` [I, O] and `<net>/bias` [O].

    Raises ValueError unless net is "online" or "target".
    """
    if net not in ("online", "target"):
        raise ValueError(f"build_layer: net expected one of ['online', 'target'], got {net!r}")
    params = fx.under(net)
    i, o = fx.dims["I"], fx.dims["O"]
    return load_params(nn.Linear(i, o, dtype=getattr(torch, fx.dtype)), params)


def soft_update(online: nn.Module, target: nn.Module, tau: float) -> None:
    """In place: target <- tau * online + (1 - tau) * target, leaf by leaf. Source: PITFALLS P17.

    Raises ValueError unless tau is a number in [0, 1].
    """
    check_scalar("soft_update", "tau", tau, 0.0, 1.0)
    with torch.no_grad():  # GRAD-FLOW: a Polyak update is a write, not a gradient step
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            t.lerp_(o, tau)


@scenario_run("p17_soft_update_order")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: target/kernel [I, O], target/bias [O] after one soft update (torch: both variants)."""
    online, target = build_layer(fx, "online"), build_layer(fx, "target")
    soft_update(online, target, fx.scalar("tau"))
    return {f"target/{k}": v for k, v in params_of(target).items()}
