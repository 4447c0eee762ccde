"""grad_accumulation: accumulate n micro-batch gradients in .grad, then one optimizer step and zero_grad.

Gradient flow: backward() adds into .grad; (loss_k / n).backward() for k = 1..n leaves the mean
of the micro-batch gradients, the full-batch gradient when the micro-batches are equal.
not_divided: loss_k.backward() sums (n× too large); zero_grad_in_loop: only the last survives.
Port note: optax.MultiSteps(optax.sgd(lr), every_k_schedule=n) takes one update per micro-batch,
applies the mean every n-th and resets: torch's / n and zero_grad are built in. A torch loop
without / n ported to MultiSteps differs by the factor n (not_divided: the JAX side averages).
Shapes: N examples of the full batch, D input features, H hidden units.
Reference: PyTorch docs, "Autograd mechanics" (gradients accumulate); Ott et al. 2018,
arXiv:1806.00187 (large effective batches by accumulation).
"""

from __future__ import annotations

import numpy as np
import torch

from ..shared.core.checks import check_same_shape, check_variant
from ._common import MLP, field, numpy, scenario_run
from ._layout import grads_of, load_params, params_of

__all__ = ["build_model", "mse", "micro_batches", "accumulate_grads", "make_optimizer", "run"]


def build_model(fx) -> MLP:
    """An MLP loaded with the fixture's canonical parameters (dtype of the fixture)."""
    params = fx.under("params")
    return load_params(MLP(fx.dims["D"], fx.dims["H"], 1, getattr(torch, fx.dtype)), params)


def mse(model: MLP, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mean((pred − y)²) over a (micro-)batch x [M, D], y [M]. Raises ValueError unless pred and y are both [M]."""
    pred = model(x).squeeze(-1)  # [M]
    check_same_shape("mse", pred=pred.shape, y=y.shape)
    return torch.mean((pred - y) ** 2)


def micro_batches(x: torch.Tensor, y: torch.Tensor, n: int, variant: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The n micro-batches of x [N, D], y [N]: equal, or (mean_unequal) N − n + 1 examples then ones."""
    check_variant("grad_accumulation", variant)
    big = x.shape[0] - n + 1 if variant == "mean_unequal" else x.shape[0] // n
    sizes = [big] + [(x.shape[0] - big) // (n - 1)] * (n - 1)
    return list(zip(torch.split(x, sizes), torch.split(y, sizes), strict=True))


def accumulate_grads(
    model: MLP, optimizer: torch.optim.Optimizer, batches: list, variant: str
) -> dict[str, np.ndarray]:
    """One accumulation cycle: backward per micro-batch into .grad, one step, zero_grad; returns the applied gradient."""
    check_variant("grad_accumulation", variant)
    n = len(batches)
    for x, y in batches:
        if variant == "zero_grad_in_loop":
            optimizer.zero_grad(set_to_none=True)  # the trap: each micro-batch wipes the ones before it
        loss = mse(model, x, y)
        if variant == "not_divided":
            loss.backward()  # the trap: n micro-batches sum to n times the mean
        else:
            (loss / n).backward()  # GRAD-FLOW: .grad accumulates: each micro-batch adds its share
    grads = grads_of(model)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # GRAD-FLOW: the next cycle starts from no gradient
    return grads


def make_optimizer(model: MLP, fx, variant: str) -> torch.optim.SGD:
    """SGD(lr) over every parameter: backward accumulates into .grad, so one step per cycle applies the sum."""
    check_variant("grad_accumulation", variant)
    return torch.optim.SGD(model.parameters(), lr=fx.scalar("lr"))


@scenario_run("grad_accumulation")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss [] (full batch, before); grads/<param> of the first cycle; full_grads/<param> (one backward
    over the full batch); gap/<param> = grads − full_grads; params/<param> after `steps` cycles."""
    model = build_model(fx)
    x, y = field(fx, "x"), field(fx, "y")
    loss = mse(model, x, y)
    loss.backward()  # the reference: the full-batch gradient
    full = grads_of(model)
    model.zero_grad(set_to_none=True)
    optimizer = make_optimizer(model, fx, variant)
    batches = micro_batches(x, y, fx.spec.constants["micro_batches"], variant)
    for step in range(int(fx["steps"])):
        grads = accumulate_grads(model, optimizer, batches, variant)
        if step == 0:
            first = grads
    out = {"loss": numpy(loss)}
    out.update({f"grads/{k}": g for k, g in first.items()})
    out.update({f"full_grads/{k}": g for k, g in full.items()})
    out.update({f"gap/{k}": first[k] - full[k] for k in full})
    out.update({f"params/{k}": v for k, v in params_of(model).items()})
    return out
