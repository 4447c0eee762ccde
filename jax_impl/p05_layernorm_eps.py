"""p05_layernorm_eps: LayerNorm ported with torch's epsilon (1e-5).

Gradient flow: x -> LN(x) -> sum(c * LN(x)); the gradient flows through the row mean
and variance, and eps sits under the square root: 1 / sqrt(var + eps).
Port note: `nnx.LayerNorm(D)` defaults to epsilon=1e-6, torch's `nn.LayerNorm(D)` to
1e-5: pass `epsilon=1e-5`. It matters when the feature variance is near eps (std ≈
0.01: outputs off by ~0.1, input gradients by ~23 %). The port also sets
`use_fast_variance=False` (two-pass variance, as torch computes it). Flax `scale` is
torch `weight`. `naive` is `nnx.LayerNorm(D)` with its defaults.
Shapes: B rows, D features.
Reference: Ba et al. 2016, arXiv:1607.06450; Flax docs, flax.nnx.LayerNorm.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant, check_x64
from ._common import field, flat, load_params, scenario_run

__all__ = ["make_layer_norm", "forward_and_grads", "run"]

TORCH_EPS = 1e-5


def make_layer_norm(fx, variant: str) -> nnx.LayerNorm:
    """nnx.LayerNorm(D) with torch's epsilon ("ported") or the nnx default 1e-6 ("naive"), fixture params.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_variant("p05_layernorm_eps", variant)
    check_x64("make_layer_norm", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under("params")
    kwargs = {} if variant == "naive" else {"epsilon": TORCH_EPS, "use_fast_variance": False}
    ln = nnx.LayerNorm(fx.dims["D"], param_dtype=jnp.dtype(fx.dtype), rngs=nnx.Rngs(0), **kwargs)
    return load_params(ln, params)


@nnx.jit
def forward_and_grads(ln: nnx.LayerNorm, x: jax.Array, c: jax.Array):
    """(y [B, D], gradient State of scale and bias, d loss / dx [B, D]) of loss = sum(c * y), jitted."""

    def loss_fn(ln: nnx.LayerNorm, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        y = ln(x)
        check_same_shape("weighted_sum", c=c.shape, y=y.shape)
        return jnp.sum(c * y), y

    grad_fn = nnx.grad(loss_fn, argnums=(0, 1), has_aux=True)  # GRAD-FLOW: through the row mean and 1 / sqrt(var + eps)
    (g_ln, g_x), y = grad_fn(ln, x)
    return y, g_ln, g_x


@scenario_run("p05_layernorm_eps")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: y [B, D]; grads/x [B, D]; grads/scale, grads/bias [D] of loss = sum(c * y)."""
    y, g_ln, g_x = forward_and_grads(make_layer_norm(fx, variant), field(fx, "x"), field(fx, "c"))
    out = {"y": y, "grads/x": g_x}
    out.update({f"grads/{k}": g for k, g in flat(g_ln).items()})
    return out
