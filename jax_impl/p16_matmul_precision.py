"""p16_matmul_precision (pitfall P16): a dense layer's output and gradients, pinned vs accelerator default.

Gradient flow: loss = sum(g * (x @ W)) -> x and W (both differentiated).
Port note: JAX's default float32 matmul may be one bfloat16 (TPU) or TF32 (GPU)
pass, where torch computes full float32 (allow_tf32 = False). The package pins
`jax_default_matmul_precision = "highest"` for every call, in jax_impl._common.numerics. The
trap: on CPU both are exact, so "naive" cannot show the default itself; it
EMULATES one bfloat16 pass (operands rounded to bfloat16, forward and backward,
accumulated in the fixture dtype) to measure what the pin protects against.
Shapes: B rows, I inputs, O outputs.
Reference: JAX docs, jax.default_matmul_precision; PyTorch docs, TF32 on Ampere.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run

__all__ = ["dense", "forward_and_grads", "run"]


def dense(x: jax.Array, kernel: jax.Array, variant: str) -> jax.Array:
    """y [B, O] = x [B, I] @ kernel [I, O]: pinned "highest" ("ported") or an emulated bfloat16 pass ("naive")."""
    check_variant("p16_matmul_precision", variant)
    if variant == "naive":  # emulation: what a TPU's default precision does to a float32 matmul
        bf16 = jnp.bfloat16
        return jnp.matmul(x.astype(bf16), kernel.astype(bf16), preferred_element_type=x.dtype)
    return x @ kernel


@functools.partial(jax.jit, static_argnames="variant")
def forward_and_grads(x: jax.Array, kernel: jax.Array, g: jax.Array, variant: str):
    """(y [B, O], (d sum(g * y) / dx [B, I], / d kernel [I, O])), jitted."""
    check_variant("p16_matmul_precision", variant)

    def loss_fn(x: jax.Array, kernel: jax.Array) -> tuple[jax.Array, jax.Array]:
        y = dense(x, kernel, variant)
        check_same_shape("weighted_sum", g=g.shape, y=y.shape)
        return jnp.sum(g * y), y

    (_, y), grads = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(
        x, kernel
    )  # GRAD-FLOW: differentiate x and the kernel
    return y, grads


@scenario_run("p16_matmul_precision")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: y [B, O]; grads/x [B, I] and grads/kernel [I, O] of sum(g * y)."""
    x = field(fx, "x")
    kernel = field(fx, "kernel")
    y, (gx, gk) = forward_and_grads(x, kernel, field(fx, "g"), variant)
    return {"y": y, "grads/x": gx, "grads/kernel": gk}
