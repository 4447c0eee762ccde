"""p10_adam_weight_decay (pitfall P10): Adam with weight decay on a linear regression.

Gradient flow: loss -> w; `optax.add_decayed_weights(wd)` before `optax.adam`
adds wd * w to the gradient (coupled L2), mirroring torch Adam(weight_decay=wd).
Port note: torch `Adam(weight_decay=wd)` is `optax.chain(optax.add_decayed_weights(wd),
optax.adam(lr))`; torch `AdamW` is `optax.adamw` with weight_decay passed
explicitly (defaults: torch 1e-2, optax 1e-4). The trap: "naive" ports Adam(wd)
as optax.adamw (decoupled): about 3e-2 off after 3 steps with wd = 0.1.
Shapes: B samples, D features.
Reference: Loshchilov & Hutter 2019, arXiv:1711.05101.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, numpy, scenario_run

__all__ = ["make_optimizer", "mse_loss", "loss_and_grad", "run"]


def make_optimizer(fx, variant: str) -> optax.GradientTransformation:
    """Coupled Adam(wd) ("ported") or decoupled optax.adamw ("naive") with the fixture's hyper-parameters."""
    check_variant("p10_adam_weight_decay", variant)
    lr, b1, b2, eps, wd = (fx.scalar(k) for k in ("lr", "b1", "b2", "eps", "weight_decay"))
    if variant == "naive":
        return optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=wd)
    adam = optax.adam(lr, b1=b1, b2=b2, eps=eps)
    return optax.chain(optax.add_decayed_weights(wd), adam)  # GRAD-FLOW: coupled L2 (wd * w joins the gradient)


def mse_loss(pred: jax.Array, y: jax.Array) -> jax.Array:
    """0.5 * mean((pred - y)**2) over pred, y [B]. Raises ValueError if the shapes differ."""
    check_same_shape("mse_loss", pred=pred.shape, y=y.shape)
    return 0.5 * jnp.mean((pred - y) ** 2)


@jax.jit
def loss_and_grad(w: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(mse_loss(x @ w, y) [], its gradient in w [D], no decay term), jitted."""
    return jax.value_and_grad(lambda w: mse_loss(x @ w, y))(w)


@scenario_run("p10_adam_weight_decay")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss [] and grads/w [D] of step 1 (no decay term); params/w, moved/w [D] after `steps`."""
    w = field(fx, "w")
    x, y = field(fx, "x"), field(fx, "y")
    optimizer = make_optimizer(fx, variant)
    state = optimizer.init(w)
    for step in range(int(fx["steps"])):
        loss, grads = loss_and_grad(w, x, y)
        updates, state = optimizer.update(grads, state, w)
        if step == 0:
            loss0, grads0 = numpy(loss), numpy(grads)
        w = optax.apply_updates(w, updates)
    after = numpy(w)
    return {"loss": loss0, "grads/w": grads0, "params/w": after, "moved/w": after - fx["w"]}
