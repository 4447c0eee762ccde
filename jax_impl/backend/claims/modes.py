"""claims, modes: computing without a gradient, run in JAX.

What it teaches: where the JAX port of the grad-mode claims differs from PyTorch: there is no
inference mode to show (C09); bfloat16 compute is an explicit cast with float32 parameters and
gradients, and a stopped loss gives zero gradients with no error (C15); jnp.std has ddof=0
(C19).
Gradient flow: outside jax.grad nothing is recorded; stop_gradient of the loss makes every
gradient exactly zero.
Port note: torch_impl/backend/claims/modes.py: torch's inference tensors and no_grad mode have no JAX
counterpart (check_c09 says so: {"applies": False, "why": ...}); torch.autocast is an explicit
.astype(jnp.bfloat16) here; torch's .std() is jnp.std(..., ddof=1).
Shapes: B samples, D inputs, H hidden units (toy "mlp": B 8, D 4, H 6).
Reference: JAX docs, jax.lax.stop_gradient and jax.numpy.std; Micikevicius et al. 2018,
arXiv:1710.03740 (mixed precision training).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ....shared.core.toys import toy
from .evidence import array, evidence, grad_state

__all__ = ["check_c09", "check_c15", "check_c19"]

stop = jax.lax.stop_gradient


@evidence
def check_c09() -> dict:
    """C09: nothing to show in JAX: no inference mode, no inference tensors.

    Returns: {"applies": False, "why": ...}.
    """
    why = (
        "JAX has no grad mode and no inference tensors: a forward pass outside jax.grad records nothing, "
        "and its result can be fed into a differentiated function later; speed: `detach-parity bench`"
    )
    return {"applies": False, "why": why}


@evidence
def check_c15() -> dict:
    """C15: bfloat16 compute with float32 parameters needs no stop; stopping the loss zeroes every gradient.

    Returns: the compute dtype, the gradient dtype and state, and the gradient state with the
    loss stopped (no error in JAX).
    """
    d = toy("mlp")
    x, w = jnp.asarray(d["x"], jnp.float32), jnp.asarray(d["w1"], jnp.float32)
    forward = lambda w: x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16)  # [B, H] bfloat16
    loss = lambda w: jnp.mean(forward(w).astype(jnp.float32) ** 2)
    stopped_loss = lambda w: stop(loss(w))  # GRAD-FLOW: C15 a detached loss has no graph
    out, g, g_stop = jax.jit(lambda w: (forward(w), jax.grad(loss)(w), jax.grad(stopped_loss)(w)))(w)
    out_dtype = str(out.dtype)
    return {
        "compute_dtype": out_dtype,
        "grad_dtype": str(g.dtype),
        "grad_state": grad_state(g),
        "stopped_loss_grad_state": grad_state(g_stop),
    }


@evidence
def check_c19() -> dict:
    """C19: jnp.std has ddof=0 (torch .std() has ddof=1): the ported statistic differs.

    Returns: jnp.std of stopped features, jnp.std(ddof=1), and B.
    """
    d = toy("mlp")
    feats = stop(jnp.tanh(array(d["x"]) @ array(d["w1"])))  # GRAD-FLOW: C19 statistics of fixed features
    return {
        "std": jnp.std(feats, axis=0).tolist(),
        "std_ddof1": jnp.std(feats, axis=0, ddof=1).tolist(),
        "n": feats.shape[0],
    }
