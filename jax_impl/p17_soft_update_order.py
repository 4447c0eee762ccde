"""p17_soft_update_order (pitfall P17): Polyak (soft) update of a target network.

Gradient flow: none; the update works on plain parameter States outside any
jax.grad (the target network is only ever a constant for the loss).
Port note: the JAX idiom is `optax.incremental_update(online, target, tau)`,
tau * first + (1 - tau) * second: the online network goes first, mirroring torch
`target_p.lerp_(online_p, tau)`. The trap: "naive" swaps the arguments and gets
tau * target + (1 - tau) * online, a near-hard copy, with no error.
Shapes: I inputs, O outputs.
Reference: Lillicrap et al. 2016, arXiv:1509.02971 (soft target updates).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_scalar, check_variant, check_x64
from ._common import load_params, params_of, scenario_run

__all__ = ["build_layer", "soft_update", "run"]


def build_layer(fx, net: str) -> nnx.Linear:
    """nnx.Linear(I, O) loaded with the fixture's `<net>/kernel` [I, O] and `<net>/bias` [O].

    Raises ValueError unless net is "online" or "target", or for a float64 fixture outside jax.enable_x64
    (JAX would build float32 arrays).
    """
    if net not in ("online", "target"):
        raise ValueError(f"build_layer: net expected one of ['online', 'target'], got {net!r}")
    check_x64("build_layer", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under(net)
    i, o, dtype = fx.dims["I"], fx.dims["O"], jnp.dtype(fx.dtype)
    layer = nnx.eval_shape(
        lambda: nnx.Linear(i, o, param_dtype=dtype, rngs=nnx.Rngs(0))
    )  # no init compute: loaded next
    return load_params(layer, params)


def soft_update(online: nnx.Module, target: nnx.Module, tau: float, variant: str = "ported") -> None:
    """In place: target <- tau * online + (1 - tau) * target ("naive": arguments swapped). Source: PITFALLS P17.

    Raises ValueError unless tau is a number in [0, 1], or for an unknown variant.
    """
    check_variant("p17_soft_update_order", variant)
    check_scalar("soft_update", "tau", tau, 0.0, 1.0)
    new, old = nnx.state(online, nnx.Param), nnx.state(target, nnx.Param)
    if variant == "naive":
        new, old = old, new  # the straightforward port: "update the target" reads as target first
    new_target = optax.incremental_update(new, old, tau)  # GRAD-FLOW: a Polyak update is a write, not a gradient step
    nnx.update(target, new_target)


@scenario_run("p17_soft_update_order")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: target/kernel [I, O], target/bias [O] after one soft update."""
    online, target = build_layer(fx, "online"), build_layer(fx, "target")
    soft_update(online, target, fx.scalar("tau"), variant)
    return {f"target/{k}": v for k, v in params_of(target).items()}
