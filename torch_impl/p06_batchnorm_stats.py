"""p06_batchnorm_stats: BatchNorm1d running statistics, torch's convention.

Gradient flow: x -> BN_train(x) -> sum(c * out) flows through the batch mean and
(biased) variance; the running statistics are buffers, updated outside the graph:
running = (1 − m)·running + m·batch, with the unbiased batch variance for running_var.
Port note: nnx.BatchNorm's momentum is the weight of the *old* value (torch m = 0.1 is
nnx momentum = 0.9), and nnx stores the biased variance: scale it by N/(N − 1), or load
torch's running statistics. Copying momentum=0.1 gives mean [2.7, 1.8] for [0.3, 0.2].
Shapes: B batch rows, E eval rows, F features.
Reference: Ioffe & Szegedy 2015, arXiv:1502.03167; PyTorch docs, torch.nn.BatchNorm1d.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run
from ._layout import load_params

__all__ = ["make_batch_norm", "train_and_eval", "run"]


def make_batch_norm(fx, variant: str) -> nn.BatchNorm1d:
    """nn.BatchNorm1d(F, momentum=m) with the fixture's scale, bias and running statistics."""
    check_variant("p06_batchnorm_stats", variant)
    params = fx.under("params")
    bn = nn.BatchNorm1d(fx.dims["F"], momentum=fx.scalar("momentum"), dtype=getattr(torch, fx.dtype))
    load_params(bn, params)
    bn.running_mean.copy_(field(fx, "running_mean"))  # buffers: requires_grad False, nothing recorded
    bn.running_var.copy_(field(fx, "running_var"))
    return bn


def train_and_eval(bn: nn.BatchNorm1d, x: torch.Tensor, c: torch.Tensor, x_eval: torch.Tensor):
    """One training batch, then evaluation: (train_out [B, F], d sum(c * train_out) / dx [B, F], eval_out [E, F]).

    The training batch updates the running statistics in place; evaluation reads them. x requires grad.
    """
    train_out = bn.train()(x)  # GRAD-FLOW: running statistics are buffers, never parameters
    check_same_shape("weighted_sum", c=c.shape, out=train_out.shape)
    (c * train_out).sum().backward()  # GRAD-FLOW: through the batch statistics, not the running ones
    return train_out, x.grad, bn.eval()(x_eval)


@scenario_run("p06_batchnorm_stats")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: train_out, grads/x [B, F]; running_mean, running_var [F] after one batch; eval_out [E, F]."""
    bn = make_batch_norm(fx, variant)
    x = field(fx, "x", requires_grad=True)
    train_out, grad_x, eval_out = train_and_eval(bn, x, field(fx, "c"), field(fx, "x_eval"))
    return {
        "train_out": train_out,
        "grads/x": grad_x,
        "running_mean": bn.running_mean,
        "running_var": bn.running_var,
        "eval_out": eval_out,
    }
