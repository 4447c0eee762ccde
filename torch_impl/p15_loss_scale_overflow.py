"""p15_loss_scale_overflow (pitfall P15): mixed precision with torch.amp.GradScaler.

Gradient flow: (scale * loss) -> float16 model -> float32/64 master weights;
the gradient is unscaled before the step, and a step whose gradient is not
finite is skipped (no parameter change, no optimizer state change).
Port note: torch `GradScaler.step` checks for inf / nan and skips, `update()`
halves the scale on overflow and doubles it after 2000 good steps. JAX has no
scaler object: `optax.apply_if_finite(tx, n)` skips the step and the scale rule
is a few lines. The trap: a fixed loss scale with a plain optax optimizer
applies the NaN update.
Shapes: B samples, D features.
Reference: Micikevicius et al. 2018, arXiv:1710.03740 (mixed precision training).
"""

from __future__ import annotations

import numpy as np
import torch

from ..shared.core.checks import check_same_shape
from ._common import field, numpy, scenario_run

__all__ = ["fp16_loss", "make_scaler", "train_step", "run"]


def fp16_loss(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mean((x [B, D] @ w [D] - y [B])**2) computed in float16, returned in w's dtype.

    Raises ValueError if the prediction and y differ in shape.
    """
    pred = x.half() @ w.half()
    check_same_shape("fp16_loss", pred=pred.shape, y=y.shape)
    return ((pred - y.half()) ** 2).mean().to(w.dtype)


def make_scaler(fx) -> torch.amp.GradScaler:
    """torch.amp.GradScaler on CPU with the fixture's init_scale, growth / backoff factors and interval."""
    return torch.amp.GradScaler(
        "cpu",
        init_scale=fx.scalar("init_scale"),
        growth_factor=fx.scalar("growth_factor"),
        backoff_factor=fx.scalar("backoff_factor"),
        growth_interval=int(fx["growth_interval"]),
    )


def train_step(w, x, y, optimizer: torch.optim.Adam, scaler: torch.amp.GradScaler) -> None:
    """One scaled step: backward of scale * loss, unscale, step unless non-finite, update the scale."""
    optimizer.zero_grad()
    scaler.scale(fp16_loss(w, x, y)).backward()
    scaler.step(optimizer)  # GRAD-FLOW: a step with a non-finite gradient is skipped
    scaler.update()


@scenario_run("p15_loss_scale_overflow")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs per step s in {1, 2}: step<s>/moved [D], step<s>/scale [], step<s>/count [] int; params/w [D]."""
    w = field(fx, "w", requires_grad=True)
    x, y = field(fx, "x"), field(fx, "y")
    betas = (fx.scalar("b1"), fx.scalar("b2"))
    optimizer = torch.optim.Adam([w], lr=fx.scalar("lr"), betas=betas, eps=fx.scalar("eps"))
    scaler = make_scaler(fx)
    out = {}
    for step in (1, 2):
        before = numpy(w).copy()
        train_step(w, x, y, optimizer, scaler)
        count = int(optimizer.state[w]["step"]) if "step" in optimizer.state[w] else 0
        out[f"step{step}/moved"] = numpy(w) - before
        out[f"step{step}/scale"] = np.array(scaler.get_scale(), dtype=fx.dtype)
        out[f"step{step}/count"] = np.array(count, dtype=np.int64)
    out["params/w"] = numpy(w)
    return out
