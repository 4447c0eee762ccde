"""p14_td_loss_broadcast (pitfall P14): mean squared TD error of Q [B, 1] against a target [B].

Gradient flow: loss -> q flows (the target is already a constant here).
Port note: JAX `jnp.mean((q - target) ** 2)` with [B, 1] and [B] broadcasts to
[B, B] silently; the torch original `F.mse_loss(q, target)` at least warns. The
trap: mse 1.8125 instead of 0.4375 on the handed input. Port: squeeze q to [B]
explicitly, and let the loss check shapes (shared.losses.check_same_shape
raises ValueError).
Shapes: B transitions.
Reference: Mnih et al. 2015, doi:10.1038/nature14236 (the TD loss); PITFALLS P14.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run

__all__ = ["td_loss", "naive_td_loss", "loss_and_grads", "run"]


def td_loss(q: jax.Array, target: jax.Array) -> jax.Array:
    """Mean squared TD error of q [B] against target [B]; scalar.

    Raises:
      ValueError: q and target differ in shape (e.g. [B, 1] vs [B]).
    """
    target = jax.lax.stop_gradient(target)  # GRAD-FLOW: the TD target is a constant for the online net
    check_same_shape("td_loss", q=q.shape, target=target.shape)
    return jnp.mean((q - target) ** 2)


def naive_td_loss(q: jax.Array, target: jax.Array) -> jax.Array:
    """The straightforward loss on q [B, 1] and target [B]: broadcasts to [B, B], silently.

    Kept to show the bug; never raises. Source: PITFALLS P14.
    """
    target = jax.lax.stop_gradient(target)  # GRAD-FLOW: the TD target is a constant for the online net
    return jnp.mean((q - target) ** 2)


@functools.partial(jax.jit, static_argnames="variant")
def loss_and_grads(q: jax.Array, target: jax.Array, variant: str) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    """(loss [], (d loss / dq [B, 1], d loss / d target [B])) of td_loss ("ported") or naive_td_loss, jitted."""
    check_variant("p14_td_loss_broadcast", variant)

    def loss_fn(q: jax.Array, target: jax.Array) -> jax.Array:
        if variant == "ported":
            return td_loss(q.squeeze(-1), target)
        return naive_td_loss(q, target)

    return jax.value_and_grad(loss_fn, argnums=(0, 1))(q, target)


@scenario_run("p14_td_loss_broadcast")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/q [B, 1] (d loss / d Q(s, a)); grads/target [B] (zero: a constant)."""
    q, target = field(fx, "q"), field(fx, "target")
    loss, (g_q, g_target) = loss_and_grads(q, target, variant)
    return {"loss": loss, "grads/q": g_q, "grads/target": g_target}
