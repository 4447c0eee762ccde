"""linear_regression: y_hat = x @ w + b with squared error; optionally x stopped.

Gradient flow: loss -> y_hat -> (w, b, x); with x stopped, x -/-> loss.
Port note: jax.grad with argnums=(0, 1, 2) returns fresh gradients for w, b and
x; torch accumulates into `.grad`. A stopped x gets an exact zero gradient.
Shapes: B samples, D features.
Reference: A3 §1.2 (C03); JAX docs, jax.grad.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_rank, check_same_shape, check_variant
from ._common import field, numpy, scenario_run, scenario_step

__all__ = ["predict", "mse_loss", "make_step", "run"]


def predict(w: jax.Array, b: jax.Array, x: jax.Array, variant: str) -> jax.Array:
    """y_hat [B] = x [B, D] @ w [D] + b []; x stopped in variant "x_stopped".

    Raises ValueError unless x is [B, D], w [D] and b a scalar.
    """
    check_variant("linear_regression", variant)
    check_rank("predict", "x", tuple(x.shape), "BD")  # a [D, 1] w or a [B] x would broadcast silently
    check_rank("predict", "w", tuple(w.shape), "D")
    check_rank("predict", "b", tuple(b.shape), "")
    check_same_shape("predict", x_features=tuple(x.shape[1:]), w=tuple(w.shape))
    if variant == "x_stopped":
        x = jax.lax.stop_gradient(x)  # GRAD-FLOW: the input is data, not something to learn
    return x @ w + b


def mse_loss(y_hat: jax.Array, y: jax.Array) -> jax.Array:
    """mean((y_hat - y)²), scalar. Raises ValueError if y_hat and y differ in shape."""
    check_same_shape("mse_loss", y_hat=y_hat.shape, y=y.shape)
    return jnp.mean((y_hat - y) ** 2)


def _loss(w, b, x, y, variant):
    return mse_loss(predict(w, b, x, variant), y)


_value_and_grads = jax.jit(jax.value_and_grad(_loss, argnums=(0, 1, 2)), static_argnames="variant")


@scenario_step("linear_regression")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """Gradients of the squared error for w, b and x (no update: run takes none); returns the loss."""
    w, b, x = (field(fx, k) for k in ("w", "b", "x"))
    y = field(fx, "y")

    def step() -> jax.Array:
        loss, grads = _value_and_grads(w, b, x, y, variant)

        return jax.block_until_ready((loss, grads))[0]

    return step


@scenario_run("linear_regression")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/w [D], grads/b [], grads/x [B, D]."""
    w, b, x = (field(fx, k) for k in ("w", "b", "x"))
    y = field(fx, "y")
    loss, (g_w, g_b, g_x) = _value_and_grads(w, b, x, y, variant)
    return {"loss": numpy(loss), "grads/w": numpy(g_w), "grads/b": numpy(g_b), "grads/x": numpy(g_x)}
