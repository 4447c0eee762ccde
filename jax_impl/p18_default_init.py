"""p18_default_init (pitfall P18): nnx.Linear's initialisation, ported or left at its defaults, then SGD.

Gradient flow: loss -> l1, l2 by plain SGD; only the starting weights are the lesson.
Port note: nn.Linear(fan_in, fan_out) initialises its weight with kaiming_uniform_(a=√5) =
U(−1/√fan_in, 1/√fan_in) and its bias with U(−1/√fan_in, 1/√fan_in); nnx.Linear uses
lecun_normal (std 1/√fan_in, √3 times wider) and a zero bias. Copy the weights, or give
nnx.Linear kernel_init=variance_scaling(1/3, "fan_in", "uniform") and a uniform bias_init
(ported). naive keeps nnx.Linear's defaults and trains differently from step 0.
Shapes: B samples, D inputs, H hidden units, O outputs.
Reference: flax.nnx.Linear (default_kernel_init = lecun_normal()); jax.nn.initializers.variance_scaling.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant
from ._common import MLP, field, load_params, params_of, scenario_run

__all__ = ["init_params", "build_model", "train_step", "train", "run"]


def init_params(fx, variant: str) -> dict[str, np.ndarray]:
    """Every layer's initial kernel and bias (canonical layout) as maps of the fixture's noise.

    ported: torch's initialiser, variance_scaling(1/3, "fan_in", "uniform") = u·sqrt(3·(1/3)/fan_in),
    bias U(±1/√fan_in). naive: nnx.Linear's defaults, lecun_normal = z·sqrt(1/fan_in)/0.8796... with z
    the standard normal truncated to (−2, 2), and a zero bias.
    """
    check_variant("p18_default_init", variant)
    out = {}
    for name in ("l1", "l2"):
        fan_in = fx[f"uniform/{name}/kernel"].shape[0]
        if variant == "ported":
            out[f"{name}/kernel"] = math.sqrt(3.0 * (1.0 / 3.0) / fan_in) * fx[f"uniform/{name}/kernel"]
            out[f"{name}/bias"] = fx[f"uniform/{name}/bias"] / math.sqrt(fan_in)
        else:  # the straightforward port: nnx.Linear's own defaults
            std = math.sqrt(1.0 / fan_in) / fx.spec.constants["truncnorm_std"]
            out[f"{name}/kernel"] = std * fx[f"normal/{name}/kernel"]
            out[f"{name}/bias"] = np.zeros_like(fx[f"uniform/{name}/bias"])
    return out


def build_model(fx, variant: str) -> MLP:
    """An MLP starting from init_params."""
    check_variant("p18_default_init", variant)
    d, h, o = fx.dims["D"], fx.dims["H"], fx.dims["O"]
    model = nnx.eval_shape(lambda: MLP(d, h, o, jnp.dtype(fx.dtype), nnx.Rngs(0)))
    return load_params(model, init_params(fx, variant))


@nnx.jit
def train_step(model: MLP, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    """One full-batch SGD step on mean((pred − y)²); returns the loss before it. Jitted.

    Raises ValueError unless pred and y are both [B, O].
    """

    def loss_fn(m):
        pred = m(x)
        check_same_shape("train", pred=pred.shape, y=y.shape)
        return jnp.mean((pred - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(
        model
    )  # GRAD-FLOW: the same SGD on both sides: only the starting weights differ
    optimizer.update(model, grads)
    return loss


def train(model: MLP, x: jax.Array, y: jax.Array, lr: float, steps: int) -> jax.Array:
    """`steps` full-batch SGD steps on mean((pred − y)²); returns the loss before each step [steps].

    Raises ValueError unless pred and y are both [B, O].
    """
    optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)
    return jnp.stack([train_step(model, optimizer, x, y) for _ in range(steps)])


@scenario_run("p18_default_init")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: init/<param> (the starting weights); losses [steps]; params/<param> after `steps`."""
    model = build_model(fx, variant)
    out = {f"init/{k}": v for k, v in params_of(model).items()}
    out["losses"] = train(model, field(fx, "x"), field(fx, "y"), fx.scalar("lr"), int(fx["steps"]))
    out.update({f"params/{k}": v for k, v in params_of(model).items()})
    return out
