"""claims, aliasing: what stop_gradient returns, run in JAX.

What it teaches: where the JAX port of the aliasing claims differs from PyTorch: arrays are
immutable (item assignment raises, .at[].set returns a new array), the requires_grad flag
becomes a zero gradient, backward through a stopped value is a silent zero, and JAX has
neither a grad mode to compare with nor a .data bypass.
Gradient flow: z = stop_gradient(y) has y's values and a zero derivative; y's own path is
untouched.
Port note: torch_impl/backend/claims/aliasing.py: torch's detach() aliases storage and version
counter, so its in-place facts (C01, C21) and its grad mode (C20) have no JAX counterpart;
check_c20 says so ({"applies": False, "why": ...}).
Shapes: vectors of 2 or 3 entries, no letters needed.
Reference: JAX docs, "The Autodiff Cookbook" and jax.lax.stop_gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .evidence import error, evidence

__all__ = ["check_c01", "check_c02", "check_c04", "check_c20", "check_c21"]

stop = jax.lax.stop_gradient


@evidence
def check_c01() -> dict:
    """C01: JAX arrays are immutable: no write-through alias, item assignment raises.

    Returns: y after z = stop_gradient(y) and z.at[0].set(100), the new array, the
    item-assignment error.
    """
    y = jnp.array([1.0, 2.0, 3.0]) * 2
    z = stop(y)  # GRAD-FLOW: C01 a detached alias of y

    def assign() -> None:
        z[0] = 100.0

    written = z.at[0].set(100.0)
    return {"y_after_at_set": y.tolist(), "at_set_result": written.tolist(), "item_assignment": error(assign)}


@evidence
def check_c02() -> dict:
    """C02: no requires_grad flag in JAX: the flag becomes the gradient (0 through stop_gradient).

    Returns: d sum(stop_gradient(2x)) / dx and d sum(2x) / dx at x = [1, 2].
    """
    x = jnp.array([1.0, 2.0])
    g_z = jax.grad(lambda x: stop(x * 2).sum())(x)  # GRAD-FLOW: C02 z is cut from x
    g_y = jax.grad(lambda x: (x * 2).sum())(x)
    return {"z_grad": g_z.tolist(), "y_grad": g_y.tolist()}


@evidence
def check_c04() -> dict:
    """C04: no error in JAX: the gradient through a stopped value is silently 0.

    Returns: d sum(stop_gradient(2x)) / dx at x = [1, 2] and the error (None).
    """
    x = jnp.array([1.0, 2.0])
    fn = lambda x: stop(x * 2).sum()  # GRAD-FLOW: C04 nothing to differentiate
    return {"grad": jax.grad(fn)(x).tolist(), "error": error(lambda: jax.grad(fn)(x))}


@evidence
def check_c20() -> dict:
    """C20: nothing to compare in JAX: there is no no_grad mode.

    Returns: {"applies": False, "why": ...}.
    """
    why = (
        "JAX has no grad mode, no requires_grad flag and no in-place writes: stop_gradient is the "
        "only form, a value-level identity with a zero derivative; computing outside jax.grad records nothing"
    )
    return {"applies": False, "why": why}


@evidence
def check_c21() -> dict:
    """C21: no .data in JAX: "zeroing" the output makes a new array and the gradient stays sigmoid'(x).

    Returns: the gradient of sum(sigmoid(x)) at x = [1, 2, 3], the original output after
    out.at[:].set(0), and sigmoid'(x).
    """

    @jax.jit
    def run(x: jax.Array) -> tuple[jax.Array, ...]:
        out = jax.nn.sigmoid(x)
        zeroed = stop(out).at[:].set(0.0)  # GRAD-FLOW: C21 no alias: .at[].set returns a new array
        return jax.grad(lambda x: jax.nn.sigmoid(x).sum())(x), out, zeroed

    grad, out, zeroed = run(jnp.array([1.0, 2.0, 3.0]))
    s = 1 / (1 + np.exp(-np.array([1.0, 2.0, 3.0])))
    return {
        "grad": grad.tolist(),
        "out_after_zeroing": out.tolist(),
        "zeroed_copy": zeroed.tolist(),
        "right_grad": (s * (1 - s)).tolist(),
    }
