"""claims, recurrence: truncation through time and gradient clipping, run in JAX.

What it teaches: the JAX port of truncated backpropagation through time, a jax.lax.scan whose
step stops the hidden state where a chunk starts: which inputs the last output reaches (C10),
the residuals a loss summed over all steps keeps either way (C11), and
optax.clip_by_global_norm against stopping every step (C18).
Gradient flow: h_t = tanh(h_{t-1} w + x_t u); stop_gradient(h) at a chunk boundary stops the
gradient from reaching earlier steps; the forward values are unchanged.
Port note: torch_impl/backend/claims/recurrence.py detaches in a Python loop and frees the graph of a
chunk by calling backward per chunk; under jax.grad of one scan there is no per-chunk
backward to show, so its memory check is the residuals of the summed loss.
Shapes: T time steps, D inputs, H hidden units (toy "rnn": T 40, D 3, H 4; toy "explode": T 20, D 2, H 3).
Reference: Williams & Peng 1990 (truncated BPTT, doi:10.1162/neco.1990.2.4.490); Pascanu et al. 2013,
arXiv:1211.5063 (exploding gradients, clipping); optax.clip_by_global_norm.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ....shared.core.toys import toy
from .evidence import array, evidence, grad_state, saved

__all__ = ["check_c10", "check_c11", "check_c18"]

stop = jax.lax.stop_gradient


def _cuts(every: int | None, steps: int) -> jax.Array:
    """cut [T] bool: True where the hidden state is stopped before step t (every k steps, t > 0)."""
    return np.array([bool(every) and t > 0 and t % every == 0 for t in range(steps)])


def _rnn_loss(w: jax.Array, u: jax.Array, x: jax.Array, cut: jax.Array, all_steps: bool) -> jax.Array:
    def step(h: jax.Array, inp: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        x_t, cut_t = inp
        h = jnp.where(cut_t, stop(h), h)  # GRAD-FLOW: C10 truncate backprop through time
        h = jnp.tanh(h @ w + x_t @ u)
        return h, h.sum()

    h, sums = jax.lax.scan(step, jnp.zeros(4), (x, cut))
    return sums.sum() if all_steps else h.sum()


_rnn_grad = jax.jit(jax.grad(_rnn_loss, argnums=2), static_argnums=4)


def _reached(g: jax.Array) -> list[int]:
    g = np.asarray(g)
    return [t for t in range(g.shape[0]) if np.any(g[t] != 0)]


@evidence
def check_c10() -> dict:
    """C10: stop_gradient on the hidden state every k steps: which inputs x_t the last output reaches.

    Returns: {"none" | "every_10" | "every_1": [steps with a nonzero gradient]}, T = 40.
    """
    d = toy("rnn")
    w, u, x = array(d["w"]), array(d["u"]), array(d["x"])
    return {
        name: _reached(_rnn_grad(w, u, x, _cuts(every, 40), False))
        for name, every in (("none", None), ("every_10", 10), ("every_1", 1))
    }


@evidence
def check_c11() -> dict:
    """C11: with a loss summed over all steps, stopping every 10 steps saves no residuals.

    Returns: residual count / bytes without and with stop_gradient every 10 steps, and whether
    x_0 still gets a gradient.
    """
    d = toy("rnn")
    w, u, x = array(d["w"]), array(d["u"]), array(d["x"])
    out = {}
    for name, every in (("none", None), ("every_10", 10)):
        cut = _cuts(every, 40)
        out[f"residuals_{name}"] = saved(lambda w, u, x, cut=cut: _rnn_loss(w, u, x, cut, True), w, u, x)
        out[f"x0_grad_nonzero_{name}"] = grad_state(_rnn_grad(w, u, x, cut, True)[0]) == "nonzero"
    return out


def _explode_loss(p: dict, x: jax.Array, cut: jax.Array) -> jax.Array:
    def step(h: jax.Array, inp: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, None]:
        x_t, cut_t = inp
        h = jnp.where(cut_t, stop(h), h)  # GRAD-FLOW: C18 truncation, not clipping
        return h @ p["w"] + x_t @ p["u"], None

    h, _ = jax.lax.scan(step, jnp.zeros(3), (x, cut))
    return h.sum()


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _global(grads) -> np.ndarray:
    """All leaves of a gradient pytree as one flat numpy vector (post-processing stays out of JAX)."""
    return np.concatenate([np.asarray(g).reshape(-1) for g in jax.tree.leaves(grads)])


@evidence
def check_c18() -> dict:
    """C18: optax.clip_by_global_norm keeps the direction; stop_gradient every step does not.

    Returns: the full gradient norm, the clipped norm and its cosine with the full gradient,
    the stop-every-step gradient norm and its cosine.
    """
    d = toy("explode")
    p, x = {"w": array(d["w"]), "u": array(d["u"])}, array(d["x"])
    clip = optax.clip_by_global_norm(1.0)

    @jax.jit
    def grads(p: dict) -> tuple[dict, ...]:
        full = jax.grad(_explode_loss)(p, x, _cuts(None, 20))
        clipped, _ = clip.update(full, clip.init(full))
        return full, clipped, jax.grad(_explode_loss)(p, x, _cuts(1, 20))

    full_v, clipped_v, trunc_v = (_global(g) for g in grads(p))
    return {
        "full_norm": float(np.linalg.norm(full_v)),
        "clipped_norm": float(np.linalg.norm(clipped_v)),
        "clipped_cosine": _cos(clipped_v, full_v),
        "detach_every_step_norm": float(np.linalg.norm(trunc_v)),
        "detach_every_step_cosine": _cos(trunc_v, full_v),
    }
