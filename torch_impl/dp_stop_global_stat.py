"""dp_stop_global_stat: DINO's center, a mean all-reduced over the ranks, used as a constant or differentiated.

Gradient flow: loss -> head and l1 flow directly; the center c = m·c0 + (1 - m)·(global mean
of h + probe) is a constant under `torch.no_grad()` around `dist.all_reduce` (stop_global_mean),
or differentiated through every rank's share with the autograd-aware functional all_reduce,
whose backward all-reduces the center's gradient (through_global_mean). `dist.all_reduce(s)` in
place on a tensor in the graph (inplace_all_reduce) is invisible to autograd: each rank's center
is differentiated through its own share only (torch warns at backward).
Port note: jax.lax.psum is differentiable, its transpose sums the cotangents: it ports the
functional all_reduce, not the in-place one; stop_gradient(psum(...)) ports the no_grad one.
Shapes: B = W·b samples (b per rank), D inputs, H features, O outputs; W = 2 ranks.
Reference: Caron et al. 2021 (DINO), arXiv:2104.14294, `update_center`; torch.distributed._functional_collectives.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run
from ._distributed import data_mesh, on_ranks, shard
from ._layout import grads_of, load_params

__all__ = ["Model", "build_model", "global_center", "shard_loss", "run_rank", "run"]


class Model(nn.Module):
    """features h [b, H] = tanh(l1(x [b, D])), pred [b, O] = head(h - c); probe [H]: zeros, in the center only."""

    def __init__(self, d: int, h: int, o: int, dtype: torch.dtype, momentum: float) -> None:
        super().__init__()
        self.momentum = momentum
        self.l1 = nn.Linear(d, h, dtype=dtype)
        self.head = nn.Linear(h, o, dtype=dtype)
        self.probe = nn.Parameter(torch.zeros(h, dtype=dtype))  # its gradient: what flows through the center

    def forward(self, x: torch.Tensor, center0: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.l1(x))
        c = global_center(h + self.probe, center0, self.momentum, variant)
        return self.head(h - c), c


def build_model(fx) -> Model:
    """A Model loaded with the fixture's canonical parameters (the probe starts at zero)."""
    params = fx.under("params")
    model = Model(fx.dims["D"], fx.dims["H"], fx.dims["O"], getattr(torch, fx.dtype), fx.spec.constants["momentum"])
    return load_params(model, params)


def global_center(h: torch.Tensor, center0: torch.Tensor, m: float, variant: str) -> torch.Tensor:
    """c [H] = m·c0 + (1 - m)·Σ_ranks Σ_b h / (b·W): DINO's update_center, constant or differentiated."""
    check_variant("dp_stop_global_stat", variant)
    n = h.shape[0] * dist.get_world_size()
    if variant == "stop_global_mean":
        with torch.no_grad():  # GRAD-FLOW: the center is a constant: no gradient through the all-reduce
            total = h.sum(dim=0)
            dist.all_reduce(total)
    elif variant == "through_global_mean":
        total = funcol.all_reduce(h.sum(dim=0), "sum", data_mesh())  # backward: all-reduce of the center's gradient
    else:
        total = h.sum(dim=0)
        dist.all_reduce(total)  # in place, unseen by autograd: the gradient flows through this rank's share only
    return m * center0 + (1 - m) * total / n


def shard_loss(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mean ½‖pred - y‖² over this rank's rows. Raises ValueError unless pred and y are both [b, O]."""
    check_same_shape("shard_loss", pred=pred.shape, y=y.shape)
    return 0.5 * ((pred - y) ** 2).sum(dim=1).mean()


def run_rank(fx, variant: str) -> dict[str, np.ndarray]:
    """One rank's outputs: loss [], center [H], grads/<param> after DDP's all-reduce, grads/probe [H]."""
    model = build_model(fx)
    # under the stop the probe gets no gradient: DDP must know (dp_frozen_unused)
    ddp = DistributedDataParallel(model, device_mesh=data_mesh(), find_unused_parameters=True)
    pred, c = ddp(shard(fx, "x"), field(fx, "center"), variant)
    loss = shard_loss(pred, shard(fx, "y"))
    with warnings.catch_warnings():  # torch's warning about the in-place trap is the lesson; any other still counts
        warnings.filterwarnings("ignore", "c10d::allreduce_: an autograd kernel was not registered", UserWarning)
        loss.backward()
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    probe = model.probe.grad
    out = {"loss": (mean_loss / dist.get_world_size()).numpy(), "center": c.detach().numpy()}
    out.update({f"grads/{k}": g for k, g in grads_of(model).items()})
    out["grads/probe"] = (torch.zeros_like(model.probe) if probe is None else probe).numpy()  # None: no path
    return out


@scenario_run("dp_stop_global_stat")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs of rank 0 (W = 2 gloo processes): loss [], center [H], grads/<param>, grads/probe."""
    return on_ranks("dp_stop_global_stat", fx, variant)
