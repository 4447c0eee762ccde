"""Port checker, torch half, the optimizer stage by stage: what torch's optimizer is, from its settings; the mirror
of jax_impl/backend/optimizer.py (which runs the port's optax chain part by part, and torch's written in optax).

What it does: where a check's first step parts while the gradients match, the optimizer is where the port
differs. `facts` builds the user's torch optimizer on the model's parameters and reads what it is: its class
and the settings of its parameter group (lr, betas, eps, weight_decay, momentum, nesterov, dampening, amsgrad,
maximize). A torch optimizer steps as a whole (its moments are state, its decay inside its step): `stages`
has none to give, and the JAX side writes torch's optimizer in optax from these settings.
Gradient flow: none; nothing is stepped.
Port note: several parameter groups with different settings are said as such ("groups"), not read.
Shapes: none.
Reference: PyTorch docs, torch.optim (SGD, Adam, AdamW), Optimizer.param_groups.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from torch import nn

__all__ = ["facts", "stages"]

_SETTINGS = (
    "lr",
    "betas",
    "eps",
    "weight_decay",
    "momentum",
    "nesterov",
    "dampening",
    "amsgrad",
    "maximize",
    "alpha",
    "centered",
)


def facts(model: nn.Module, optimizer: Callable) -> dict:
    """{"type": the optimizer's class name, "groups": how many parameter groups, and the first group's settings
    (those of _SETTINGS it has), floats and tuples} of `optimizer(model.parameters())` (built on `model`: pass a
    copy). Raises ValueError where the factory raises."""
    try:
        opt = optimizer(model.parameters())
    except Exception as exc:
        raise ValueError(f"torch_optimizer: building it raised {type(exc).__name__}: {exc}") from exc
    groups = [{k: v for k, v in g.items() if k in _SETTINGS} for g in opt.param_groups]
    out = {"type": type(opt).__name__, "groups": len({repr(sorted(g.items())) for g in groups})}
    for key, value in groups[0].items():
        out[key] = tuple(float(x) for x in value) if isinstance(value, tuple) else value
        if hasattr(value, "item"):  # a tensor learning rate
            out[key] = float(value.item())
    return out


def stages(optimizer, params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray], torch: Mapping) -> dict:
    """The twin of JAX's `stages`: a torch optimizer steps as a whole, so torch gives no stages of its own (the JAX
    side writes torch's optimizer in optax from `facts`). Returns {"port": [], "reference": None}."""
    return {"port": [], "reference": None}
