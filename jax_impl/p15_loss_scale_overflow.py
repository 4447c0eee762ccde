"""p15_loss_scale_overflow (pitfall P15): mixed precision with a dynamic loss scale in optax.

Gradient flow: (scale * loss) -> float16 model -> float32/64 master weights;
the gradient is unscaled before the step, and a step whose gradient is not
finite is skipped (no parameter change, no optimizer state change).
Port note: JAX has no GradScaler: `optax.apply_if_finite(tx, n)` skips the step
and keeps the inner state, and `LossScale.update` is torch's rule (halve on
overflow, double after `growth_interval` good steps). The trap: "naive" keeps a
fixed scale with plain optax.adam and applies the NaN update of step 1.
Shapes: B samples, D features.
Reference: Micikevicius et al. 2018, arXiv:1710.03740 (mixed precision training).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, numpy, scenario_run

__all__ = ["fp16_loss", "make_scaler", "train_step", "run"]

NEVER_GIVE_UP = 2**30  # apply_if_finite applies updates after this many consecutive failures; torch never does


def fp16_loss(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    """mean((x [B, D] @ w [D] - y [B])**2) computed in float16, returned in w's dtype.

    Raises ValueError if the prediction and y differ in shape.
    """
    pred = x.astype(jnp.float16) @ w.astype(jnp.float16)
    check_same_shape("fp16_loss", pred=pred.shape, y=y.shape)
    return jnp.mean((pred - y.astype(jnp.float16)) ** 2).astype(w.dtype)


class LossScale(NamedTuple):
    """Dynamic loss-scale state, torch.amp.GradScaler's rule (a Python-side value: a few scalars)."""

    scale: float
    good_steps: int
    growth_factor: float
    backoff_factor: float
    growth_interval: int

    def update(self, finite: bool) -> LossScale:
        """GradScaler.update: scale * backoff on overflow; grow on the growth_interval-th finite step in a row."""
        if not finite:
            return self._replace(scale=self.scale * self.backoff_factor, good_steps=0)
        if self.good_steps + 1 == self.growth_interval:
            return self._replace(scale=self.scale * self.growth_factor, good_steps=0)
        return self._replace(good_steps=self.good_steps + 1)


def make_scaler(fx) -> LossScale:
    """The initial LossScale from the fixture's init_scale, growth / backoff factors and interval.

    flax.training.dynamic_scale.DynamicScale is the Flax utility for this, but it casts
    gradients to float32 and grows one finite step later than torch; this mirrors torch.
    """
    return LossScale(
        scale=fx.scalar("init_scale"),
        good_steps=0,
        growth_factor=fx.scalar("growth_factor"),
        backoff_factor=fx.scalar("backoff_factor"),
        growth_interval=int(fx["growth_interval"]),
    )


@jax.jit
def _scaled_grad(w, x, y, scale):
    return jax.grad(lambda w: scale * fp16_loss(w, x, y))(w)


def train_step(w, opt_state, x, y, scaler: LossScale, tx: optax.GradientTransformation, variant: str):
    """One scaled step: grad of scale * loss, unscale, tx update; "ported" also updates the scale.

    Returns (w, opt_state, scaler). The step is skipped on a non-finite gradient only if tx is guarded.
    """
    check_variant("p15_loss_scale_overflow", variant)
    grads = _scaled_grad(w, x, y, jnp.asarray(scaler.scale, w.dtype)) / scaler.scale
    updates, opt_state = tx.update(grads, opt_state, w)
    if variant == "ported":
        scaler = scaler.update(bool(jnp.all(jnp.isfinite(grads))))
    return optax.apply_updates(w, updates), opt_state, scaler


def _count(opt_state, variant: str) -> int:
    adam_state = opt_state.inner_state[0] if variant == "ported" else opt_state[0]
    return int(adam_state.count)


@scenario_run("p15_loss_scale_overflow")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs per step s in {1, 2}: step<s>/moved [D], step<s>/scale [], step<s>/count [] int; params/w [D]."""
    w = field(fx, "w")
    x, y = field(fx, "x"), field(fx, "y")
    tx = optax.adam(fx.scalar("lr"), b1=fx.scalar("b1"), b2=fx.scalar("b2"), eps=fx.scalar("eps"))
    if variant == "ported":
        tx = optax.apply_if_finite(tx, NEVER_GIVE_UP)  # GRAD-FLOW: a step with a non-finite gradient is skipped
    opt_state, scaler, out = tx.init(w), make_scaler(fx), {}
    for step in (1, 2):
        before = numpy(w)
        w, opt_state, scaler = train_step(w, opt_state, x, y, scaler, tx, variant)
        out[f"step{step}/moved"] = numpy(w) - before
        out[f"step{step}/scale"] = np.array(scaler.scale, dtype=fx.dtype)
        out[f"step{step}/count"] = np.array(_count(opt_state, variant), dtype=np.int64)
    out["params/w"] = numpy(w)
    return out
