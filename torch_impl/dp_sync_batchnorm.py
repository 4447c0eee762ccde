"""dp_sync_batchnorm: BatchNorm statistics all-reduced over the ranks (sync BatchNorm) against per-rank BatchNorm.

Gradient flow: in training mode BatchNorm's batch mean and variance are functions of the
batch, differentiated; synchronised, they are sums all-reduced over "data" with an autograd-aware
all-reduce, whose backward all-reduces their gradient: every rank's features get the gradient of
the global statistics. The running statistics are buffers, updated under no_grad.
Port note: torch 2.13's nn.SyncBatchNorm (the GPU idiom: `convert_sync_batchnorm(model)`) refuses
CPU tensors (its batch_norm_stats kernels are CUDA-only), so on gloo the statistics are reduced
here with torch.distributed._functional_collectives.all_reduce, the reduction SyncBatchNorm
performs. JAX: `nnx.BatchNorm(axis_name="data")` inside shard_map pmeans them; its momentum is 1 - m.
Shapes: B = W·b samples (b >= 2 per rank), D inputs, H features, O outputs; W = 2 ranks.
Reference: Ioffe & Szegedy 2015, arXiv:1502.03167; torch.nn.SyncBatchNorm.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run
from ._distributed import data_mesh, on_ranks, rank_gap, shard
from ._layout import grads_of, load_params

__all__ = ["SyncBatchNorm1d", "Model", "build_model", "shard_loss", "full_batch_grads", "run_rank", "run"]


class SyncBatchNorm1d(nn.BatchNorm1d):
    """nn.BatchNorm1d [n, H] whose training statistics are the all-reduced ones of every rank's batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        mesh = data_mesh()
        n = funcol.all_reduce(torch.tensor(float(x.shape[0]), dtype=x.dtype), "sum", mesh)
        mean = funcol.all_reduce(x.sum(dim=0), "sum", mesh) / n  # GRAD-FLOW: statistics all-reduced, gradient too
        var = funcol.all_reduce(((x - mean) ** 2).sum(dim=0), "sum", mesh) / n
        with torch.no_grad():  # GRAD-FLOW: running statistics are buffers, never parameters
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * n / (n - 1), self.momentum)  # torch keeps the unbiased variance
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class Model(nn.Module):
    """pred [b, O] = l2(tanh(bn(l1(x [b, D])))); bn synchronised or per rank."""

    def __init__(self, d: int, h: int, o: int, dtype: torch.dtype, sync: bool, eps: float, momentum: float) -> None:
        super().__init__()
        self.l1 = nn.Linear(d, h, bias=False, dtype=dtype)
        norm = SyncBatchNorm1d if sync else nn.BatchNorm1d
        self.bn = norm(h, eps=eps, momentum=momentum, dtype=dtype)
        self.l2 = nn.Linear(h, o, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.bn(self.l1(x))))


def build_model(fx, variant: str) -> Model:
    """The Model of a variant, loaded with the fixture's canonical parameters, in training mode."""
    check_variant("dp_sync_batchnorm", variant)
    params = fx.under("params")
    c = fx.spec.constants
    model = Model(
        fx.dims["D"],
        fx.dims["H"],
        fx.dims["O"],
        getattr(torch, fx.dtype),
        variant == "sync_batchnorm",
        c["eps"],
        c["momentum"],
    )
    return load_params(model, params).train()


def shard_loss(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mean ½‖pred - y‖² over this rank's rows. Raises ValueError unless pred and y are both [b, O]."""
    check_same_shape("shard_loss", pred=pred.shape, y=y.shape)
    return 0.5 * ((pred - y) ** 2).sum(dim=1).mean()


def full_batch_grads(fx) -> dict[str, np.ndarray]:
    """The single-device gradient: plain BatchNorm over all B rows."""
    model = build_model(fx, "local_batchnorm")
    shard_loss(model(field(fx, "x")), field(fx, "y")).backward()
    return grads_of(model)


def run_rank(fx, variant: str) -> dict[str, np.ndarray]:
    """One rank's outputs: loss [], grads/<param>, running/mean [H], rank_gap/running/mean [H]; gap/<param> (per device)."""
    model = build_model(fx, variant)
    ddp = DistributedDataParallel(model, device_mesh=data_mesh())
    loss = shard_loss(ddp(shard(fx, "x")), shard(fx, "y"))
    loss.backward()
    grads = grads_of(model)
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    running = model.bn.running_mean
    out = {"loss": (mean_loss / dist.get_world_size()).numpy()}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    if variant == "local_batchnorm":  # the trap: not the single-device gradient
        full = full_batch_grads(fx)
        out.update({f"gap/{k}": grads[k] - full[k] for k in grads})
    out["running/mean"] = running.numpy().copy()  # a buffer outside any graph: .numpy() refuses one that requires grad
    out["rank_gap/running/mean"] = rank_gap({"mean": running})["mean"]
    return out


@scenario_run("dp_sync_batchnorm")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs of rank 0 (W = 2 gloo processes): loss, grads/*, running/mean, its rank gap; gap/* (vs one device) when per device."""
    return on_ranks("dp_sync_batchnorm", fx, variant)
