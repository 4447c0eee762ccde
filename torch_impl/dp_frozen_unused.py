"""dp_frozen_unused: a frozen backbone and a detached probe under DistributedDataParallel, AdamW steps.

Gradient flow: loss -> head flows; backbone frozen (requires_grad_(False) before DDP: outside
the reducer's buckets); probe loss added detached (reported, never trained: its parameters
require grad but never get one). DDP must be told with find_unused_parameters=True, or its
reducer waits for the probe: undeclared, step 1's all-reduce never runs (the ranks step on their
own gradients) and step 2's forward raises "Expected to have finished reduction in the prior
iteration"; static_graph=True syncs step 1 only and raises at step 3 (both caught and counted here).
Port note: JAX has no reducer, so its port trains without complaint; what must be mirrored is
that AdamW skips a .grad of None: the NNX wrt filter keeps the backbone and the probe out of the
optimizer, and every frozen leaf stays bit-identical on every rank (`rank_gap`, gathered).
Shapes: B = W·b samples (b per rank), D inputs, H features, O outputs; W = 2 ranks.
Reference: Li et al. 2020, arXiv:2006.15704 §3.2.3 (unused parameters); torch DDP docs (static_graph).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..shared.core.checks import check_same_shape, check_variant
from ._common import scenario_run
from ._distributed import data_mesh, on_ranks, rank_gap, shard
from ._layout import grads_of, load_params, params_of

__all__ = ["Model", "build_model", "make_optimizer", "data_parallel", "total_loss", "train", "run_rank", "run"]

UNFINISHED = "Expected to have finished reduction in the prior iteration"  # DDP's message


class Model(nn.Module):
    """pred [b, O] = head(f), probe [b] = probe(f), f = tanh(backbone(x [b, D]))."""

    def __init__(self, d: int, h: int, o: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.backbone = nn.Linear(d, h, dtype=dtype)
        self.head = nn.Linear(h, o, dtype=dtype)
        self.probe = nn.Linear(h, 1, dtype=dtype)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = torch.tanh(self.backbone(x))
        return self.head(features), self.probe(features)[:, 0]


def build_model(fx) -> Model:
    """A Model loaded with the fixture's canonical parameters (the same on every rank)."""
    params = fx.under("params")
    return load_params(Model(fx.dims["D"], fx.dims["H"], fx.dims["O"], getattr(torch, fx.dtype)), params)


def make_optimizer(model: Model, fx) -> torch.optim.AdamW:
    """Freeze the backbone, then AdamW over what still requires grad (head and probe; AdamW skips a None .grad)."""
    model.backbone.requires_grad_(False)  # GRAD-FLOW: the frozen backbone gets no gradient
    trainable = [p for p in model.parameters() if p.requires_grad]  # GRAD-FLOW: no gradient: no moments, no decay
    betas = (fx.scalar("b1"), fx.scalar("b2"))
    return torch.optim.AdamW(
        trainable, lr=fx.scalar("lr"), betas=betas, eps=fx.scalar("eps"), weight_decay=fx.scalar("weight_decay")
    )


def data_parallel(model: Model, variant: str) -> DistributedDataParallel:
    """DDP over the "data" mesh, told about the unused probe (or not: `unused_not_declared`)."""
    check_variant("dp_frozen_unused", variant)
    if variant == "find_unused_parameters":
        return DistributedDataParallel(model, device_mesh=data_mesh(), find_unused_parameters=True)
    if variant == "static_graph":
        return DistributedDataParallel(model, device_mesh=data_mesh(), static_graph=True)
    return DistributedDataParallel(model, device_mesh=data_mesh())


def total_loss(pred: torch.Tensor, probe: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """mean ½‖pred - y‖² plus the probe's mean ½(probe - t)², the latter detached. Raises ValueError on shapes."""
    check_same_shape("total_loss", pred=pred.shape, y=y.shape)
    check_same_shape("total_loss", probe=probe.shape, t=t.shape)
    probe_loss = 0.5 * ((probe - t) ** 2).mean()
    task = 0.5 * ((pred - y) ** 2).sum(dim=1).mean()
    return task + probe_loss.detach()  # GRAD-FLOW: the probe is reported in the loss, never trained


def train(ddp: DistributedDataParallel, optimizer, x, y, t, steps: int) -> tuple[torch.Tensor, dict, int]:
    """Up to `steps` AdamW steps; returns (step-1 loss, step-1 grads, steps done).

    Stops at DDP's "Expected to have finished reduction" error (both ranks raise it at the same
    forward, before any collective); any other error propagates.
    """
    loss0, grads0, done = None, None, 0
    for _ in range(steps):
        try:
            pred, probe = ddp(x)
        except RuntimeError as exc:
            if UNFINISHED not in str(exc):
                raise
            break
        loss = total_loss(pred, probe, y, t)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if loss0 is None:
            loss0, grads0 = loss.detach().clone(), grads_of(ddp.module)
        optimizer.step()
        done = int(optimizer.state[ddp.module.head.weight]["step"])  # AdamW's own step count
    return loss0, grads0, done


def run_rank(fx, variant: str) -> dict[str, np.ndarray]:
    """One rank's outputs: loss [] (step 1), grads/<param> (step 1), moved/<param>, rank_gap/<param>, steps_done []."""
    model = build_model(fx)
    optimizer = make_optimizer(model, fx)
    ddp = data_parallel(model, variant)
    before = params_of(model)
    loss0, grads0, done = train(ddp, optimizer, shard(fx, "x"), shard(fx, "y"), shard(fx, "t"), int(fx["steps"]))
    after = params_of(model)
    dist.all_reduce(loss0)  # the global mean loss of step 1
    out = {"loss": (loss0 / dist.get_world_size()).numpy()}
    out.update({f"grads/{k}": g for k, g in grads0.items()})
    out.update({f"moved/{k}": after[k] - before[k] for k in after})
    out.update({f"rank_gap/{k}": g for k, g in rank_gap(after).items()})
    out["steps_done"] = np.array(done)
    return out


@scenario_run("dp_frozen_unused")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs of rank 0 (W = 2 gloo processes): loss, grads/*, moved/*, rank_gap/* (over ranks), steps_done."""
    return on_ranks("dp_frozen_unused", fx, variant)
