"""p11_none_vs_zero_grad (pitfall P11): one SGD step when the loss ignores parameter y.

Gradient flow: loss = 0.5 * sum(x**2) -> x; jax.grad gives y an exact zero
gradient (never None, never an error), and optax's weight decay would still
move y. The port differentiates and updates only the leaves the loss uses.
Port note: JAX `jax.grad` gives zeros where torch `torch.autograd.grad(...,
allow_unused=True)` gives None and SGD skips the parameter; grads_of
reports the undifferentiated leaves as explicit zeros. The trap: "naive" hands
all zeros to optax.chain(add_decayed_weights, sgd), and y shrinks by lr * wd * y.
Shapes: N elements per parameter.
Reference: JAX docs, jax.grad; PITFALLS P11.
"""

from __future__ import annotations

import jax
import numpy as np
import optax

from ..shared.core.checks import check_scalar, check_variant
from ._common import field, grads_of, numpy, scenario_run

__all__ = ["loss_fn", "gradients", "sgd_step", "run"]

USED = ("x",)  # the leaves the loss reads: the port names them, torch finds them in the graph


def loss_fn(params: dict[str, jax.Array]) -> jax.Array:
    """0.5 * sum(x**2) over x [N]; params["y"] [N] is never used."""
    return 0.5 * (params["x"] ** 2).sum()


def gradients(params: dict[str, jax.Array], variant: str) -> dict[str, jax.Array]:
    """d loss / d param: only for USED leaves ("ported"); every leaf, zeros for y ("naive")."""
    check_variant("p11_none_vs_zero_grad", variant)
    if variant == "naive":
        return jax.grad(loss_fn)(params)
    used = {k: params[k] for k in USED}
    return jax.grad(lambda p: loss_fn({**params, **p}))(used)  # GRAD-FLOW: unused leaves get no gradient


def sgd_step(params: dict[str, jax.Array], grads: dict[str, jax.Array], lr: float, wd: float) -> dict[str, jax.Array]:
    """SGD with coupled weight decay over the leaves in `grads`; the other leaves are returned unchanged.

    Raises ValueError unless lr > 0 and wd >= 0 (numbers).
    """
    check_scalar("sgd_step", "lr", lr, 0.0, low_open=True)
    check_scalar("sgd_step", "wd", wd, 0.0)
    tx = optax.chain(optax.add_decayed_weights(wd), optax.sgd(lr))
    stepped = {k: params[k] for k in grads}
    updates, _ = tx.update(grads, tx.init(stepped), stepped)
    return {**params, **optax.apply_updates(stepped, updates)}


@scenario_run("p11_none_vs_zero_grad")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: grads/{x,y} [N] (missing reported as explicit zeros); params/{x,y}, moved/{x,y} [N] after one step."""
    params = {k: field(fx, k) for k in ("x", "y")}
    grads = gradients(params, variant)
    new = sgd_step(params, grads, fx.scalar("lr"), fx.scalar("weight_decay"))
    out = {}
    reported = grads_of(grads, {k: numpy(p) for k, p in params.items()})
    for k in params:
        out.update({f"grads/{k}": reported[k], f"params/{k}": numpy(new[k]), f"moved/{k}": numpy(new[k]) - fx[k]})
    return out
