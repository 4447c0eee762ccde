"""dp_allreduce_mean: DistributedDataParallel averages the shards' gradients; equal shards give the full batch.

Gradient flow: each rank differentiates its shard's loss; DDP's backward all-reduces the
gradients and divides by W. Equal shards: the mean of shard means is the full-batch mean. A
masked loss must divide by the global count (`dist.all_reduce` of the local count) and multiply
by W, or DDP trains on the mean of per-shard means (`masked_mean_of_means`).
Port note: in JAX's shard_map the average is written into the loss (pmean / psum) and jax.grad
sums the devices' cotangents of the replicated parameters; `pmean_after_grad` is the naive port
that averages after the grad as DDP does, and gets W times this gradient.
Shapes: B = W·b samples (b per rank), D inputs, H hidden, O outputs; W = 2 ranks.
Reference: Li et al. 2020, "PyTorch Distributed", arXiv:2006.15704; torch.nn.parallel.DistributedDataParallel.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..shared.core.checks import check_same_shape, check_variant
from ._common import MLP, field, scenario_run
from ._distributed import data_mesh, on_ranks, shard
from ._layout import grads_of, load_params

__all__ = ["build_model", "example_losses", "shard_loss", "full_batch_grads", "run_rank", "run"]


def build_model(fx) -> MLP:
    """An MLP loaded with the fixture's canonical parameters (the same on every rank)."""
    params = fx.under("params")
    return load_params(MLP(fx.dims["D"], fx.dims["H"], fx.dims["O"], getattr(torch, fx.dtype)), params)


def example_losses(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """e [b] = ½‖pred - y‖² per example. Raises ValueError unless pred and y are both [b, O]."""
    check_same_shape("example_losses", pred=pred.shape, y=y.shape)
    return 0.5 * ((pred - y) ** 2).sum(dim=1)


def shard_loss(pred: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, variant: str) -> torch.Tensor:
    """The loss this rank differentiates; DDP then averages its gradient over the W ranks.

    equal_shards / pmean_after_grad: mean of e. masked_global_mean: W·Σ m e / N with N the global
    count (all-reduced; a count carries no gradient). masked_mean_of_means: Σ m e / Σ m of the shard.
    """
    check_variant("dp_allreduce_mean", variant)
    e = example_losses(pred, y)
    if variant == "masked_global_mean":
        count = mask.sum().to(e.dtype)
        dist.all_reduce(count)  # N: the valid examples of every rank
        return dist.get_world_size() * (e * mask).sum() / count
    if variant == "masked_mean_of_means":
        return (e * mask).sum() / mask.sum()
    return e.mean()


def full_batch_grads(fx, variant: str) -> dict[str, np.ndarray]:
    """The single-device gradient of the full batch's objective (the mean, or the global masked mean)."""
    model = build_model(fx)
    x, y, mask = field(fx, "x"), field(fx, "y"), field(fx, "mask")
    e = example_losses(model(x), y)
    loss = (e * mask).sum() / mask.sum() if variant.startswith("masked") else e.mean()
    loss.backward()
    return grads_of(model)


def run_rank(fx, variant: str) -> dict[str, np.ndarray]:
    """One rank's outputs: loss [] (the averaged objective), grads/<param> after the all-reduce, gap/<param> (mean of means)."""
    model = build_model(fx)
    ddp = DistributedDataParallel(model, device_mesh=data_mesh())  # GRAD-FLOW: backward averages the ranks' gradients
    x, y, mask = shard(fx, "x"), shard(fx, "y"), shard(fx, "mask")
    loss = shard_loss(ddp(x), y, mask, variant)
    loss.backward()
    grads = grads_of(model)
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)  # the objective DDP's average gradient belongs to
    out = {"loss": (mean_loss / dist.get_world_size()).numpy()}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    if variant == "masked_mean_of_means":  # the trap: the gap to the global masked mean's gradient
        full = full_batch_grads(fx, variant)
        out.update({f"gap/{k}": grads[k] - full[k] for k in grads})
    return out


@scenario_run("dp_allreduce_mean")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs of rank 0 (run on W = 2 gloo processes): loss [], grads/<param>, gap/<param> (mean of means: vs the global masked mean)."""
    return on_ranks("dp_allreduce_mean", fx, variant)
