"""mixed_precision: bfloat16 autocast forward, float32 master weights, loss scaling, a skipped overflow.

Gradient flow: loss × scale -> bf16 graph -> float32 .grad, unscaled by 1/scale
before anyone reads it; a non-finite gradient never reaches the parameters
(GradScaler.step skips optimizer.step, the scale backs off).
Port note: CPU autocast runs F.linear in bfloat16 (operands cast, float32 accumulation,
bias added, one rounding) and leaves tanh in its input dtype; float64 tensors are never
cast (so a float64 run has no bfloat16 at all). torch.amp.GradScaler("cpu") exists
since torch 2.3; its growth / backoff rule is aten's _amp_update_scale_.
Shapes: B samples, D inputs, H features, O outputs.
Reference: PyTorch docs, "Automatic Mixed Precision" (torch.amp, CPU op list); Micikevicius et al. 2018, arXiv:1710.03740.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_scalar, check_variant
from ._common import field, numpy, scenario_run, scenario_step
from ._layout import grads_of, load_params, params_of

__all__ = [
    "Regressor",
    "build_model",
    "autocast",
    "linear",
    "mse",
    "LossScale",
    "make_scaler",
    "make_optimizer",
    "train_step",
    "NO_STEP_CALLS",
    "make_step",
    "run",
]


class Regressor(nn.Module):
    """pred [B, O] = head(tanh(encoder(x [B, D]))); under autocast both Linear layers run in bf16."""

    def __init__(self, d: int, h: int, o: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.encoder = nn.Linear(d, h, dtype=dtype)
        self.head = nn.Linear(h, o, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.encoder(x)))


def build_model(fx) -> Regressor:
    """A Regressor whose master weights are the fixture's canonical parameters (fixture dtype)."""
    params = fx.under("params")
    d, h, o = fx.dims["D"], fx.dims["H"], fx.dims["O"]
    return load_params(Regressor(d, h, o, getattr(torch, fx.dtype)), params)


def autocast(enabled: bool = True) -> torch.autocast:
    """torch.autocast("cpu", dtype=torch.bfloat16): F.linear casts float32 operands to bf16; float64 stays."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled)


def linear(layer: nn.Linear, x: torch.Tensor, enabled: bool = True) -> torch.Tensor:
    """A Linear layer as torch's autocast runs it: bf16 operands, float32 sums, one rounding to bf16 [B, out].

    enabled False or float64 operands: the plain x @ weight.T + bias in their dtype.
    """
    with autocast(enabled):
        return layer(x)


def mse(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mean((pred - y)²) in y's dtype; pred [B, O] (any float dtype), y [B, O]. Raises ValueError on a shape mismatch."""
    check_same_shape("mse", pred=pred.shape, y=y.shape)
    return ((pred.to(y.dtype) - y) ** 2).mean()


class LossScale:
    """A fixed loss scale with torch.amp.GradScaler's interface (variant "static").

    unscale_ multiplies every .grad by 1/scale and records whether all are finite;
    step skips optimizer.step on a non-finite gradient; update keeps the scale.
    """

    def __init__(self, scale: float) -> None:
        self._scale, self._found_inf = float(scale), False

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self._scale

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        torch._foreach_mul_(grads, 1.0 / self._scale)  # .grad tensors carry no graph: nothing to record
        self._found_inf = not all(bool(torch.isfinite(g).all()) for g in grads)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if not self._found_inf:
            optimizer.step()

    def update(self) -> None:
        self._found_inf = False

    def get_scale(self) -> float:
        return self._scale


def make_scaler(fx, variant: str) -> torch.amp.GradScaler | LossScale:
    """torch.amp.GradScaler("cpu") from the fixture's hyper-parameters, or a LossScale for "static"."""
    check_variant("mixed_precision", variant)
    if variant == "static":
        return LossScale(fx.scalar("static_scale"))
    return torch.amp.GradScaler(
        "cpu",
        init_scale=fx.scalar("init_scale"),
        growth_factor=fx.scalar("growth_factor"),
        backoff_factor=fx.scalar("backoff_factor"),
        growth_interval=int(fx["growth_interval"]),
    )


def make_optimizer(model: Regressor, fx, variant: str) -> torch.optim.Adam:
    """torch.optim.Adam over the master weights (every variant: GradScaler.step does the skipping).

    Raises ValueError unless lr > 0, b1, b2 in [0, 1) and eps > 0.
    """
    check_variant("mixed_precision", variant)
    check_scalar("make_optimizer", "lr", fx.scalar("lr"), 0.0, low_open=True)
    for name in ("b1", "b2"):
        check_scalar("make_optimizer", name, fx.scalar(name), 0.0, 1.0, high_open=True)
    check_scalar("make_optimizer", "eps", fx.scalar("eps"), 0.0, low_open=True)
    betas = (fx.scalar("b1"), fx.scalar("b2"))
    return torch.optim.Adam(model.parameters(), lr=fx.scalar("lr"), betas=betas, eps=fx.scalar("eps"))


def _adam_count(optimizer: torch.optim.Adam) -> int:
    state = optimizer.state[optimizer.param_groups[0]["params"][0]]
    return int(state["step"]) if "step" in state else 0


def _full_grads(model: Regressor, x: torch.Tensor, y: torch.Tensor) -> dict[str, np.ndarray]:
    """Gradients of the unscaled loss with autocast off (the fixture dtype throughout)."""
    model.zero_grad(set_to_none=True)
    mse(model(x), y).backward()
    return grads_of(model)


def train_step(model, optimizer, scaler, x, y, poison: float):
    """One scaled step. x [B, D], y [B, O]; poison: 1.0, or inf to inject an overflow.

    Returns (loss [] unscaled, unscaled canonical grads, skipped: bool).
    """
    optimizer.zero_grad(set_to_none=True)
    with autocast():
        pred = model(x)  # [B, O] bfloat16 under autocast (float32 master weights)
    loss = mse(pred, y) * poison
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)  # GRAD-FLOW: unscale the gradients before anything reads them
    grads, before = grads_of(model), _adam_count(optimizer)
    scaler.step(optimizer)  # GRAD-FLOW: a non-finite gradient never reaches the parameters
    scaler.update()
    return loss, grads, _adam_count(optimizer) == before


# no step_calls (the bench's tuned forms tune fixed calls): the JAX step is a pure jax.jit whose
# state (parameters, Adam state, loss scale) passes from one call to the next
NO_STEP_CALLS = "its step threads the parameters, the Adam state and the loss scale from call to call"


@scenario_step("mixed_precision")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """One loss-scaled bf16 train_step (Adam, scale update), no injected overflow; returns the unscaled loss."""
    x, y = field(fx, "x"), field(fx, "y")
    model = build_model(fx)
    optimizer, scaler = make_optimizer(model, fx, variant), make_scaler(fx, variant)

    def step() -> torch.Tensor:
        loss, _, _ = train_step(model, optimizer, scaler, x, y, 1.0)
        return loss.detach()

    return step


@scenario_run("mixed_precision")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/, grads_full/<param> of step 1 (autocast on / off); params/<param> after
    `steps`; scale [steps] int64 after each update; skipped [steps] bool; optimizer_steps [] int64."""
    x, y = field(fx, "x"), field(fx, "y")
    model = build_model(fx)
    grads_full = _full_grads(model, x, y)
    optimizer, scaler = make_optimizer(model, fx, variant), make_scaler(fx, variant)
    scales, skipped = [], []
    for step in range(1, int(fx["steps"]) + 1):
        poison = float("inf") if step == int(fx["overflow_at"]) else 1.0
        loss, grads, skip = train_step(model, optimizer, scaler, x, y, poison)
        if step == 1:
            loss0, grads0 = numpy(loss), grads
        scales.append(scaler.get_scale())
        skipped.append(skip)
    out = {"loss": loss0}
    out.update({f"grads/{k}": g for k, g in grads0.items()})
    out.update({f"grads_full/{k}": g for k, g in grads_full.items()})
    out.update({f"params/{k}": v for k, v in params_of(model).items()})
    out.update(scale=np.array(scales, dtype=np.int64), skipped=np.array(skipped))
    out["optimizer_steps"] = np.array(_adam_count(optimizer), dtype=np.int64)
    return out
