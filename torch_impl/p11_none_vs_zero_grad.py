"""p11_none_vs_zero_grad (pitfall P11): one SGD step when the loss ignores parameter y.

Gradient flow: loss = 0.5 * sum(x**2) -> x; y is not in the graph at all, so
autograd reports None for it (or raises without allow_unused=True) and
torch.optim.SGD skips it: no step, no weight decay.
Port note: torch `torch.autograd.grad(..., allow_unused=True)` gives None where
JAX `jax.grad` gives zeros; the port differentiates and updates only the leaves
the loss uses, and reports the others as explicit zeros. The trap: zeros handed
to an optimizer with weight decay still move the parameter.
Shapes: N elements per parameter.
Reference: PyTorch docs, torch.autograd.grad (allow_unused); PITFALLS P11.
"""

from __future__ import annotations

import numpy as np
import torch

from ..shared.core.checks import check_scalar
from ._common import field, numpy, scenario_run

__all__ = ["loss_fn", "gradients", "sgd_step", "run"]


def loss_fn(params: dict[str, torch.Tensor]) -> torch.Tensor:
    """0.5 * sum(x**2) over x [N]; params["y"] [N] is never used."""
    return 0.5 * (params["x"] ** 2).sum()


def gradients(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
    """d loss / d param for every param; None for a parameter outside the graph (y).

    Without allow_unused=True torch raises RuntimeError ("... appears to not have
    been used in the graph").
    """
    names = list(params)
    loss, inputs = loss_fn(params), [params[k] for k in names]
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)  # GRAD-FLOW: unused leaves get no gradient
    return dict(zip(names, grads, strict=True))


def sgd_step(params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor | None], lr: float, wd: float) -> None:
    """In place: torch.optim.SGD(lr, weight_decay=wd) step; a None gradient skips its parameter.

    Raises ValueError unless lr > 0 and wd >= 0 (numbers).
    """
    check_scalar("sgd_step", "lr", lr, 0.0, low_open=True)
    check_scalar("sgd_step", "wd", wd, 0.0)
    optimizer = torch.optim.SGD(list(params.values()), lr=lr, weight_decay=wd)
    for name, p in params.items():
        p.grad = grads[name]
    optimizer.step()


@scenario_run("p11_none_vs_zero_grad")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: grads/{x,y} [N] (None reported as explicit zeros); params/{x,y}, moved/{x,y} [N] after one step."""
    params = {k: field(fx, k, requires_grad=True) for k in ("x", "y")}
    grads = gradients(params)
    sgd_step(params, grads, fx.scalar("lr"), fx.scalar("weight_decay"))
    out = {}
    for k, p in params.items():
        g = (
            torch.zeros_like(p) if grads[k] is None else grads[k]
        )  # the explicit None -> zeros mapping, for the report only
        out.update({f"grads/{k}": numpy(g), f"params/{k}": numpy(p), f"moved/{k}": numpy(p) - fx[k]})
    return out
