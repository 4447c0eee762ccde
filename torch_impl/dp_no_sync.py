"""dp_no_sync: gradient accumulation over micro-batches with DistributedDataParallel.no_sync, one SGD step.

Gradient flow: each micro-batch's (loss / M).backward() accumulates into .grad; under
`ddp.no_sync()` (around forward and backward) DDP skips the all-reduce, so micro-batches
1..M-1 accumulate locally and the last one's backward all-reduces the sum: one all-reduce, the
gradient of syncing every micro-batch (`sync_every_micro_batch`). DDP decides at forward time:
`no_sync` around the backward alone still syncs. `step_on_first_micro_batch` is the off-by-one
loop (`i % M == 0`): it syncs and steps on micro-batch 0 and leaves the rest unsynchronised in .grad.
Port note: JAX has no no_sync: accumulate gradients of device-varying parameters (pcast) inside
shard_map and pmean once; or step optax.MultiSteps on synchronised micro-batches.
Shapes: B = W·M·b samples (M micro-batches of b per rank), D inputs, H hidden, O outputs; W = 2.
Reference: torch DistributedDataParallel.no_sync; Goyal et al. 2017, arXiv:1706.02677.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from ..shared.core.checks import check_same_shape, check_variant
from ._common import MLP, field, scenario_run
from ._distributed import data_mesh, gather_ranks, on_ranks, shard
from ._layout import grads_of, load_params, params_of

__all__ = [
    "build_model",
    "micro_batches",
    "micro_loss",
    "is_step",
    "accumulate",
    "full_batch_grads",
    "run_rank",
    "run",
]


def build_model(fx) -> MLP:
    """An MLP loaded with the fixture's canonical parameters (the same on every rank)."""
    params = fx.under("params")
    return load_params(MLP(fx.dims["D"], fx.dims["H"], fx.dims["O"], getattr(torch, fx.dtype)), params)


def micro_batches(fx, key: str) -> list[torch.Tensor]:
    """This rank's M micro-batches of a batch field: M tensors [b, ...]."""
    return list(shard(fx, key).chunk(int(fx["micro_batches"])))


def micro_loss(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mean ½‖pred - y‖² of one micro-batch. Raises ValueError unless pred and y are both [b, O]."""
    check_same_shape("micro_loss", pred=pred.shape, y=y.shape)
    return 0.5 * ((pred - y) ** 2).sum(dim=1).mean()


def is_step(i: int, m: int, variant: str) -> bool:
    """Whether micro-batch i (of M) ends the accumulation: the last, or the first in the off-by-one loop."""
    check_variant("dp_no_sync", variant)
    return i % m == 0 if variant == "step_on_first_micro_batch" else (i + 1) % m == 0


def accumulate(ddp: DistributedDataParallel, optimizer, xs, ys, variant: str) -> torch.Tensor:
    """One round over the micro-batches: accumulate (loss / M), sync and step where `is_step`; returns the mean loss."""
    m, losses = len(xs), []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        sync = variant == "sync_every_micro_batch" or is_step(i, m, variant)
        context = contextlib.nullcontext() if sync else ddp.no_sync()  # GRAD-FLOW: accumulate locally, no all-reduce
        with context:  # around the forward too: DDP decides at forward time whether backward syncs
            loss = micro_loss(ddp(x), y)
            (loss / m).backward()
        losses.append(loss.detach())
        if is_step(i, m, variant):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return torch.stack(losses).mean()


def full_batch_grads(fx) -> dict[str, np.ndarray]:
    """The single-device gradient of the mean loss over all B rows: what every round should step on."""
    model = build_model(fx)
    micro_loss(model(field(fx, "x")), field(fx, "y")).backward()
    return grads_of(model)


def run_rank(fx, variant: str) -> dict[str, np.ndarray]:
    """One rank's outputs: loss [], moved/<param>, pending/<param> (rank 0); the off-by-one loop adds gap/<param>."""
    model = build_model(fx)
    ddp = DistributedDataParallel(model, device_mesh=data_mesh())
    optimizer = torch.optim.SGD(model.parameters(), lr=fx.scalar("lr"))
    before = params_of(model)
    loss = accumulate(ddp, optimizer, micro_batches(fx, "x"), micro_batches(fx, "y"), variant)
    after, pending = params_of(model), grads_of(model)  # a .grad of None (stepped last): zeros
    out = {"loss": np.mean(gather_ranks(loss), axis=0)}
    out.update({f"moved/{k}": after[k] - before[k] for k in after})
    out.update({f"pending/{k}": pending[k] for k in pending})
    if variant == "step_on_first_micro_batch":  # the trap: not the step of one device on the full batch
        full, lr = full_batch_grads(fx), fx.scalar("lr")
        out.update({f"gap/{k}": (after[k] - before[k]) + lr * full[k] for k in after})
    return out


@scenario_run("dp_no_sync")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs of rank 0 (W = 2 gloo processes): loss [], moved/*, pending/*; gap/* (vs one full-batch step) in the trap."""
    return on_ranks("dp_no_sync", fx, variant)
