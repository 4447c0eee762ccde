"""p07_linear_layout: load a torch nn.Linear checkpoint into nnx.Linear; kernel = weight.T.

Gradient flow: loss = mean((x K + b − y)²) -> K, b, with K = Wᵀ [I, O] the Flax kernel.
Port note: nn.Linear.weight is [out, in], a Flax kernel [in, out]: transpose on load
and compare kernel gradients transposed. `naive` loads the weight as the kernel: for a
square layer the shapes agree, nothing raises, and the layer computes x W + b.
Shapes: B samples, I inputs, O outputs (I = O).
Reference: Flax docs, flax.nnx.Linear; PyTorch docs, torch.nn.Linear.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant, check_x64
from ._common import field, grads_of, load_params, scenario_run

__all__ = ["load_linear", "mse", "loss_and_grads", "run"]


def load_linear(fx, variant: str) -> nnx.Linear:
    """nnx.Linear(I, O) from the fixture's torch state dict: kernel = weight.T ("naive": weight as is).

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_variant("p07_linear_layout", variant)
    check_x64("load_linear", fx.dtype, jax.config.jax_enable_x64)
    weight = np.asarray(fx["state_dict/weight"])  # [O, I]
    o, i = weight.shape
    kernel = weight if variant == "naive" else weight.T  # [I, O]
    zeros = nnx.initializers.zeros_init()  # no random init: every weight comes from the checkpoint
    lin = nnx.Linear(i, o, param_dtype=jnp.dtype(fx.dtype), kernel_init=zeros, rngs=nnx.Rngs(0))
    return load_params(lin, {"kernel": kernel, "bias": fx["state_dict/bias"]})


def mse(pred: jax.Array, target: jax.Array) -> jax.Array:
    """Mean squared error of pred [B, O] against target [B, O]. Raises ValueError on a shape mismatch."""
    check_same_shape("mse", pred=pred.shape, target=target.shape)
    return jnp.mean((pred - target) ** 2)


@nnx.jit
def loss_and_grads(lin: nnx.Linear, x: jax.Array, y: jax.Array):
    """(loss [], pred [B, O], gradient State of kernel and bias), jitted."""

    def loss_fn(lin: nnx.Linear) -> tuple[jax.Array, jax.Array]:
        pred = lin(x)
        return mse(pred, y), pred

    (loss, pred), grads = nnx.value_and_grad(loss_fn, has_aux=True)(lin)  # GRAD-FLOW: d loss / d (kernel, bias)
    return loss, pred, grads


@scenario_run("p07_linear_layout")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; pred [B, O]; grads/kernel [I, O]; grads/bias [O]."""
    loss, pred, grads = loss_and_grads(load_linear(fx, variant), field(fx, "x"), field(fx, "y"))
    out = {"loss": loss, "pred": pred}
    out.update({f"grads/{k}": g for k, g in grads_of(grads).items()})
    return out
