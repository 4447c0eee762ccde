"""attention_detach: single-head scaled dot-product attention, weights stopped or not.

Gradient flow: loss -> context = A V -> Wv, x; A = softmax(Q Kᵀ / √K) -> Wq, Wk.
With stop_gradient(A) the only path to Wq and Wk is cut: their gradients are
exact zeros; dWv is unchanged.
Port note: jax.nn.softmax(s, where=mask) would give zeros for an empty row, but
torch.softmax has no such argument; both ports write the same double jnp.where /
torch.where and define an empty (fully masked) row as zero weights (pitfall P12).
Shapes: N tokens, E model width, K head width.
Reference: Vaswani et al. 2017, arXiv:1706.03762.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant, check_x64
from ._common import StepCall, field, grads_of, load_params, numpy, params_of, scenario_run, scenario_step, step_of

__all__ = ["Attention", "build_model", "masked_softmax", "mse_loss", "loss_and_grads", "step_calls", "make_step", "run"]


class Attention(nnx.Module):
    """Single head: context [N, K] = masked_softmax(q(x) k(x)ᵀ / √K) v(x), x [N, E]; no biases."""

    def __init__(self, e: int, k: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.q = nnx.Linear(e, k, use_bias=False, param_dtype=dtype, rngs=rngs)
        self.k = nnx.Linear(e, k, use_bias=False, param_dtype=dtype, rngs=rngs)
        self.v = nnx.Linear(e, k, use_bias=False, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array, variant: str) -> tuple[jax.Array, jax.Array]:
        """(context [N, K], weights [N, N]); mask [N, N] bool, True = may attend."""
        check_variant("attention_detach", variant)
        q, k, v = self.q(x), self.k(x), self.v(x)  # [N, K] each
        weights = masked_softmax(q @ k.T / math.sqrt(q.shape[-1]), mask)  # [N, N]
        if variant == "weights_stopped":
            weights = jax.lax.stop_gradient(weights)  # GRAD-FLOW: constant weights: no gradient reaches Q and K
        return weights @ v, weights


def build_model(fx) -> Attention:
    """An Attention head loaded with the fixture's canonical kernels.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under("params")
    return load_params(
        nnx.eval_shape(lambda: Attention(fx.dims["E"], fx.dims["K"], jnp.dtype(fx.dtype), nnx.Rngs(0))), params
    )


def masked_softmax(scores: jax.Array, mask: jax.Array) -> jax.Array:
    """Row softmax of scores [N, N] over the allowed entries; a fully masked row gives zeros (P12).

    Masked entries are −inf (weight exactly 0). An empty row's scores are replaced by 0
    before the softmax, so neither its value nor its gradient is NaN.
    """
    live = mask.any(axis=-1, keepdims=True)  # [N, 1]
    scores = jnp.where(mask, scores, -jnp.inf)
    scores = jnp.where(live, scores, 0.0)  # GRAD-FLOW: empty rows get finite scores: no NaN in the gradient
    return jnp.where(live, jax.nn.softmax(scores, axis=-1), 0.0)  # GRAD-FLOW: an empty row attends to nothing


def mse_loss(context: jax.Array, target: jax.Array) -> jax.Array:
    """mean((context - target)²) over [N, K]. Raises ValueError on a shape mismatch."""
    check_same_shape("mse_loss", context=context.shape, target=target.shape)
    return jnp.mean((context - target) ** 2)


@nnx.jit(static_argnames="variant")
def loss_and_grads(model: Attention, x: jax.Array, mask: jax.Array, target: jax.Array, variant: str):
    """(loss [], context [N, K], weights [N, N], kernel gradient State, d loss / dx [N, E]) of one value_and_grad."""

    def loss_fn(model: Attention, x: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        context, weights = model(x, mask, variant)
        return mse_loss(context, target), (context, weights)

    (loss, (context, weights)), (g_model, g_x) = nnx.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(model, x)
    return loss, context, weights, g_model, g_x


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one loss_and_grads of a head built from the fixture (no update; the loss first)."""
    model = build_model(fx)
    x, mask, target = field(fx, "x"), field(fx, "mask"), field(fx, "target")
    return [StepCall(loss_and_grads, (model,), (x, mask, target), {"variant": variant})]


@scenario_step("attention_detach")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """Backward of the attention head's squared error into the kernels and x (no update); returns the loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("attention_detach")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss [], context [N, K], weights [N, N], grads/{q,k,v}/kernel [E, K], grads/x [N, E]."""
    model = build_model(fx)
    x = field(fx, "x")
    loss, context, weights, g_model, g_x = loss_and_grads(model, x, field(fx, "mask"), field(fx, "target"), variant)
    out = {"loss": numpy(loss), "context": numpy(context), "weights": numpy(weights), "grads/x": numpy(g_x)}
    out.update({f"grads/{k}": g for k, g in grads_of(g_model, params_of(model)).items()})
    return out
