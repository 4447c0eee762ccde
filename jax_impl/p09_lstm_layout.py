"""p09_lstm_layout (pitfall P09): torch's LSTMCell parameters in an nnx.LSTMCell, unrolled over T steps.

Gradient flow: loss(h_T, c_T) -> every step's gates -> both biases and kernels
(b_ih and b_hh get the same gradient: they are added).
Port note: JAX `nnx.LSTMCell` has one kernel per gate (ii, if_, ig, io on the
input, hi, hf, hg, ho on the hidden state), one bias per gate (on the hidden
side) and carries (c, h); torch `nn.LSTMCell` packs i | f | g | o, has b_ih and
b_hh and returns (h, c). The port splits the blocks, sets bias = b_ih + b_hh and
swaps the carry. The trap: "naive" loads b_ih only and passes the carry in
torch's order; both run without error.
Shapes: T steps, B sequences, D inputs, H hidden units, G = 4H.
Reference: Hochreiter & Schmidhuber 1997; Flax docs, nnx.LSTMCell.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant, check_x64
from ._common import field, scenario_run

__all__ = ["Recurrent", "build_model", "lstm_loss", "state_and_grads", "run"]

GATES = ("i", "f", "g", "o")  # torch's block order in the 4H columns


class Recurrent(nnx.Module):
    """Unrolls self.cell = nnx.LSTMCell(D, H) over x [T, B, D] from (h0, c0) [B, H]; returns (h_T, c_T)."""

    def __init__(self, d: int, h: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.cell = nnx.LSTMCell(d, h, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array, h: jax.Array, c: jax.Array, variant: str) -> tuple[jax.Array, jax.Array]:
        check_variant("p09_lstm_layout", variant)
        carry = (c, h) if variant == "ported" else (h, c)  # Flax carries (c, h); "naive" keeps torch's order
        for x_t in x:
            carry, _ = self.cell(carry, x_t)
        if variant == "ported":
            c, h = carry
        else:
            h, c = carry
        return h, c


def _flax_params(params: dict[str, jax.Array], variant: str) -> dict:
    """Canonical (torch, [in, 4H]) LSTM parameters as the pure-dict state of Recurrent: the port itself.

    Gate block k of ih/kernel [D, 4H] goes to cell.i<k>.kernel [D, H], of hh/kernel
    to cell.h<k>.kernel [H, H]; the one bias per gate is b_ih + b_hh ("naive": b_ih).
    """
    bias = params["cell/ih/bias"]
    if variant == "ported":
        bias = bias + params["cell/hh/bias"]  # torch adds both biases to every gate pre-activation
    ih, hh, b = (jnp.split(a, 4, axis=-1) for a in (params["cell/ih/kernel"], params["cell/hh/kernel"], bias))
    cell = {}
    for k, gate in enumerate(GATES):
        cell["if_" if gate == "f" else f"i{gate}"] = {"kernel": ih[k]}
        cell[f"h{gate}"] = {"kernel": hh[k], "bias": b[k]}
    return {"cell": cell}


def build_model(fx, variant: str) -> Recurrent:
    """A Recurrent (abstract, no initialisation compute) for the fixture's D, H and dtype; `_flax_params` fills it.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_variant("p09_lstm_layout", variant)
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    d, h, dtype = fx.dims["D"], fx.dims["H"], jnp.dtype(fx.dtype)
    return nnx.eval_shape(lambda: Recurrent(d, h, dtype, nnx.Rngs(0)))


def lstm_loss(h: jax.Array, c: jax.Array) -> jax.Array:
    """0.5 * sum(h_T**2) + sum(c_T) over [B, H]: reaches both halves of the carry. ValueError if shapes differ."""
    check_same_shape("lstm_loss", h=h.shape, c=c.shape)
    return 0.5 * jnp.sum(h**2) + jnp.sum(c)


@functools.partial(jax.jit, static_argnames=("graphdef", "variant"))
def state_and_grads(graphdef: nnx.GraphDef, params: dict, x: jax.Array, h0: jax.Array, c0: jax.Array, variant: str):
    """(h_T, c_T [B, H], gradients of lstm_loss for every canonical parameter) after T steps, jitted."""
    check_variant("p09_lstm_layout", variant)

    def loss_fn(params: dict) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        h, c = nnx.merge(graphdef, _flax_params(params, variant))(x, h0, c0, variant)
        return lstm_loss(h, c), (h, c)

    (_, (h, c)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params
    )  # GRAD-FLOW: both biases and kernels are trained through every step
    return h, c, grads


@scenario_run("p09_lstm_layout")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: h, c [B, H] after T steps; grads/cell/{ih,hh}/{kernel,bias} (canonical layout)."""
    graphdef, _ = nnx.split(build_model(fx, variant))
    params = {k: jnp.asarray(v) for k, v in fx.under("params").items()}
    h, c, grads = state_and_grads(graphdef, params, field(fx, "x"), field(fx, "h0"), field(fx, "c0"), variant)
    return {"h": h, "c": c, **{f"grads/{k}": g for k, g in grads.items()}}
