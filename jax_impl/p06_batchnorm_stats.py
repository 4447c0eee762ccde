"""p06_batchnorm_stats: BatchNorm running statistics, ported with torch's convention.

Gradient flow: x -> BN_train(x) -> sum(c * out) flows through the batch mean and
(biased) variance; the running statistics are nnx.BatchStat (never differentiated by
nnx.grad), updated as running = (1 − m)·running + m·batch, unbiased batch variance (torch).
Port note: nnx.BatchNorm's momentum is the weight of the *old* value (torch m = 0.1 is
nnx momentum = 0.9) and it stores the biased batch variance, so the port is a small
module with torch's rule (`_TorchBatchNorm`), or torch's running statistics loaded for
inference. `naive` copies the number: nnx.BatchNorm(momentum=0.1) gives the running mean
[2.7, 1.8] for torch's [0.3, 0.2]; momentum=0.9 alone still gives var [1.15, 1.25].
Shapes: B batch rows, E eval rows, F features.
Reference: Ioffe & Szegedy 2015, arXiv:1502.03167; Flax docs, flax.nnx.BatchNorm.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant, check_x64
from ._common import field, load_params, scenario_run

__all__ = ["make_batch_norm", "train_and_eval", "run"]

EPS = 1e-5


class _TorchBatchNorm(nnx.Module):
    """BatchNorm over axis 0 of x [B, F] with torch's running-statistics rule (momentum m on the batch)."""

    def __init__(self, num_features: int, momentum: float, dtype: jnp.dtype) -> None:
        self.scale = nnx.Param(jnp.ones(num_features, dtype))
        self.bias = nnx.Param(jnp.zeros(num_features, dtype))
        self.mean = nnx.BatchStat(jnp.zeros(num_features, dtype))
        self.var = nnx.BatchStat(jnp.ones(num_features, dtype))
        self.momentum = momentum

    def __call__(self, x: jax.Array, use_running_average: bool) -> jax.Array:
        if use_running_average:
            mean, var = self.mean[...], self.var[...]
        else:
            m, n = self.momentum, x.shape[0]
            mean, var = x.mean(axis=0), x.var(axis=0)  # biased: what the batch is normalised with
            new = ((1 - m) * self.mean[...] + m * mean, (1 - m) * self.var[...] + m * var * n / (n - 1))
            # nnx.BatchStat, not nnx.Param: nnx.grad hands the update out as a plain value (no stop_gradient needed)
            self.mean[...], self.var[...] = new  # GRAD-FLOW: running statistics are buffers, never parameters
        return (x - mean) / jnp.sqrt(var + EPS) * self.scale[...] + self.bias[...]


def make_batch_norm(fx, variant: str) -> nnx.Module:
    """Torch-rule BatchNorm ("ported") or nnx.BatchNorm(momentum=m) ("naive"), with the fixture's state.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_variant("p06_batchnorm_stats", variant)
    check_x64("make_batch_norm", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under("params")
    f, m, dtype = fx.dims["F"], fx.scalar("momentum"), jnp.dtype(fx.dtype)
    if variant == "naive":
        bn = nnx.BatchNorm(f, momentum=m, epsilon=EPS, param_dtype=dtype, rngs=nnx.Rngs(0))
    else:
        bn = _TorchBatchNorm(f, m, dtype)
    load_params(bn, params)
    bn.mean.set_value(field(fx, "running_mean"))
    bn.var.set_value(field(fx, "running_var"))
    return bn


@nnx.jit
def train_and_eval(bn: nnx.Module, x: jax.Array, c: jax.Array, x_eval: jax.Array):
    """One training batch, then evaluation: (train_out [B, F], d sum(c * train_out) / dx [B, F], eval_out [E, F]).

    The training batch updates the running statistics in place; evaluation reads them. Jitted.
    """

    def loss_fn(bn: nnx.Module, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        train_out = bn(x, use_running_average=False)
        check_same_shape("weighted_sum", c=c.shape, out=train_out.shape)
        return jnp.sum(c * train_out), train_out

    grad_fn = nnx.grad(
        loss_fn, argnums=1, has_aux=True
    )  # GRAD-FLOW: through the batch statistics, not the running ones
    grad_x, train_out = grad_fn(bn, x)
    return train_out, grad_x, bn(x_eval, use_running_average=True)


@scenario_run("p06_batchnorm_stats")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: train_out, grads/x [B, F]; running_mean, running_var [F] after one batch; eval_out [E, F]."""
    bn = make_batch_norm(fx, variant)
    train_out, grad_x, eval_out = train_and_eval(bn, field(fx, "x"), field(fx, "c"), field(fx, "x_eval"))
    return {
        "train_out": train_out,
        "grads/x": grad_x,
        "running_mean": bn.mean[...],
        "running_var": bn.var[...],
        "eval_out": eval_out,
    }
