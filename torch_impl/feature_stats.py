"""feature_stats: per-feature mean and std of stopped features, logged inside a training step.

Gradient flow: loss -> head -> features -> encoder flows; features -/-> monitor
(`features.detach()`), so the training gradient is bit-for-bit the same with or
without monitoring. Detaching the features the head reads (`detach_features`,
C22's "detach features promptly") stops the encoder's training instead.
Port note: `Tensor.std` is unbiased (correction=1, divisor B - 1); jnp.std divides by
B (ddof=0). Port `x.std()` as `jnp.std(x, ddof=1)`; `naive_ddof0` is the port that
forgets it. One sample (B = 1): torch gives NaN (and a UserWarning), kept as is.
Shapes: B samples, D inputs, H features, O outputs.
Reference: PyTorch docs, torch.std (correction argument, default 1).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_variant
from ._common import StepCall, field, numpy, scenario_run, scenario_step, step_of
from ._layout import grads_of, load_params

__all__ = ["Regressor", "build_model", "feature_stats", "mse", "train_step", "step_calls", "make_step", "run"]

DDOF = {"ported": 1, "population": 0, "detach_features": 1}


class Regressor(nn.Module):
    """features [B, H] = tanh(encoder(x [B, D])); pred [B, O] = head(features)."""

    def __init__(self, d: int, h: int, o: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.encoder = nn.Linear(d, h, dtype=dtype)
        self.head = nn.Linear(h, o, dtype=dtype)

    def forward(self, x: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
        check_variant("feature_stats", variant)
        features = torch.tanh(self.encoder(x))
        head_input = features
        if variant == "detach_features":
            head_input = features.detach()  # GRAD-FLOW: the head reads fixed features (C22)
        return self.head(head_input), features


def build_model(fx) -> Regressor:
    """A Regressor loaded with the fixture's canonical parameters."""
    params = fx.under("params")
    d, h, o = fx.dims["D"], fx.dims["H"], fx.dims["O"]
    return load_params(Regressor(d, h, o, getattr(torch, fx.dtype)), params)


def feature_stats(features: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-feature mean [H] and std [H] over the batch of features [B, H], stopped.

    std divisor: B - 1 (torch's default correction=1), B in variant "population".
    B = 1 gives std NaN with correction=1 (0 / 0), as jnp.std(ddof=1).
    """
    check_variant("feature_stats", variant)
    h = features.detach()  # GRAD-FLOW: monitoring reads the features, never trains them
    if variant == "naive_ddof0":
        return h.mean(dim=0), h.std(dim=0)  # torch's default correction=1: the reference the naive port misses
    return h.mean(dim=0), h.std(dim=0, correction=DDOF[variant])


def mse(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mean((pred - y)²) over pred [B, O] and y [B, O]. Raises ValueError on a shape mismatch."""
    check_same_shape("mse", pred=pred.shape, y=y.shape)
    return ((pred - y) ** 2).mean()


def train_step(model: Regressor, x: torch.Tensor, y: torch.Tensor, variant: str, monitor: bool = True):
    """Loss and gradients of one step, with the feature statistics when `monitor`.

    Returns (loss [], canonical grads dict, (mean [H], std [H]) or None). Resets .grad first.
    """
    check_variant("feature_stats", variant)
    model.zero_grad(set_to_none=True)
    pred, features = model(x, variant)
    stats = feature_stats(features, variant) if monitor else None
    loss = mse(pred, y)
    loss.backward()
    return loss, grads_of(model), stats


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one monitored train_step of a model built from the fixture (the loss first)."""
    model = build_model(fx)
    x, y = field(fx, "x"), field(fx, "y")
    return [StepCall(train_step, (model,), (x, y), {"variant": variant})]


@scenario_step("feature_stats")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """One monitored train_step: gradients and the stopped feature statistics (no update); returns the loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("feature_stats")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/<param> (canonical); stats/mean, stats/std [H] of the stopped features."""
    model = build_model(fx)
    x, y = field(fx, "x"), field(fx, "y")
    loss, grads, (mean, std) = train_step(model, x, y, variant)
    out = {"loss": numpy(loss), "stats/mean": numpy(mean), "stats/std": numpy(std)}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    return out
