"""p08_gru_bias: port torch's GRU cell, keeping the hidden-side bias b_hn inside the reset gate.

Gradient flow: loss = sum(c ⊙ h_1..T) -> x (every step) and h0 (through the recurrence).
The candidate is n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)): b_hn is scaled by r.
Port note: nnx.GRUCell's hidden-side Linear has no bias, so b_hn has no slot. Folding
bias_hh into the input bias (`naive`; right for LSTM and for the r, z gates) is wrong
for n whenever r ≠ 1. The port is `_TorchGRUCell`: nnx.GRUCell's equations with a
biased hidden Linear. Loading a torch checkpoint: kernels are weight.T, gates r | z | n.
Shapes: T steps, B sequences, I inputs, H hidden units, G = 3H gate rows (r, z, n).
Reference: Cho et al. 2014, arXiv:1406.1078; Flax docs, flax.nnx.GRUCell.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant, check_x64
from ._common import field, load_params, scenario_run

__all__ = ["make_cell", "unroll", "states_and_grads", "run"]

_ZEROS = nnx.initializers.zeros_init()  # no random init to compile: every weight is loaded


class _TorchGRUCell(nnx.Module):
    """torch.nn.GRUCell's equations: carry h [B, H], input x [B, I] -> (h', h')."""

    def __init__(self, in_features: int, hidden: int, dtype: jnp.dtype) -> None:
        kw = {"param_dtype": dtype, "kernel_init": _ZEROS, "rngs": nnx.Rngs(0)}  # weights come from the checkpoint
        self.dense_i = nnx.Linear(in_features, 3 * hidden, **kw)  # W_i·, b_i·
        self.dense_h = nnx.Linear(hidden, 3 * hidden, **kw)  # W_h·, b_h· (b_hn!)

    def __call__(self, h: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        i_r, i_z, i_n = jnp.split(self.dense_i(x), 3, axis=-1)
        h_r, h_z, h_n = jnp.split(self.dense_h(h), 3, axis=-1)
        r, z = jax.nn.sigmoid(i_r + h_r), jax.nn.sigmoid(i_z + h_z)
        n = jnp.tanh(i_n + r * h_n)  # b_hn sits inside the reset gate
        h = (1.0 - z) * n + z * h
        return h, h


def make_cell(fx, variant: str) -> nnx.Module:
    """The ported cell ("ported") or nnx.GRUCell with bias_ih + bias_hh folded in ("naive").

    Raises:
      ValueError: G != 3H, or a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_variant("p08_gru_bias", variant)
    check_x64("make_cell", fx.dtype, jax.config.jax_enable_x64)
    g, h, i, dtype = fx.dims["G"], fx.dims["H"], fx.dims["I"], jnp.dtype(fx.dtype)
    if g != 3 * h:
        raise ValueError(f"p08_gru_bias: state_dict rows G expected 3H = {3 * h}, got {g}")
    w_ih, w_hh = fx["state_dict/weight_ih"].T, fx["state_dict/weight_hh"].T  # [in, 3H], gates r | z | n
    b_ih, b_hh = fx["state_dict/bias_ih"], fx["state_dict/bias_hh"]
    if variant == "naive":
        zeros = {"kernel_init": _ZEROS, "recurrent_kernel_init": _ZEROS}  # weights come from the checkpoint
        cell = nnx.GRUCell(i, h, param_dtype=dtype, rngs=nnx.Rngs(0), **zeros)
        params = {"dense_i/kernel": w_ih, "dense_i/bias": b_ih + b_hh, "dense_h/kernel": w_hh}
    else:
        cell = _TorchGRUCell(i, h, dtype)
        params = {"dense_i/kernel": w_ih, "dense_i/bias": b_ih, "dense_h/kernel": w_hh, "dense_h/bias": b_hh}
    return load_params(cell, params)


def unroll(cell: nnx.Module, x: jax.Array, h: jax.Array) -> jax.Array:
    """Hidden states [T, B, H] from x [T, B, I] and h0 [B, H]."""
    hs = []
    for x_t in x:
        h, _ = cell(h, x_t)
        hs.append(h)
    return jnp.stack(hs)


@nnx.jit
def states_and_grads(cell: nnx.Module, x: jax.Array, h0: jax.Array, c: jax.Array):
    """(hidden states [T, B, H], d loss / dx [T, B, I], d loss / dh0 [B, H]) of loss = sum(c * h), jitted."""

    def loss_fn(x: jax.Array, h0: jax.Array) -> tuple[jax.Array, jax.Array]:
        hs = unroll(cell, x, h0)
        check_same_shape("weighted_sum", c=c.shape, h=hs.shape)
        return jnp.sum(c * hs), hs

    (gx, gh0), hs = jax.grad(loss_fn, argnums=(0, 1), has_aux=True)(x, h0)  # GRAD-FLOW: back through every step
    return hs, gx, gh0


@scenario_run("p08_gru_bias")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: h [T, B, H]; grads/x [T, B, I]; grads/h0 [B, H] of loss = sum(c * h)."""
    hs, gx, gh0 = states_and_grads(make_cell(fx, variant), field(fx, "x"), field(fx, "h0"), field(fx, "c"))
    return {"h": hs, "grads/x": gx, "grads/h0": gh0}
