"""p12_masked_attention_row (pitfall P12): masked attention where one query sees no key.

Gradient flow: loss over the valid query rows -> out -> probs, v -> q, k. The
empty row must not leak NaN into any gradient.
Port note: JAX `jax.nn.softmax(s, where=mask)` returns zeros on a fully masked
row (finite gradients); torch's mirror is `softmax(s.masked_fill(~mask, -inf))`
followed by `.masked_fill(~mask, 0)`. The trap: the straight port of the -inf
mask (`jnp.where(mask, s, -jnp.inf)`) is NaN on that row, so the V gradient is
all NaN while the loss looks fine, exactly as in torch; a finite -1e9 mask would
give a uniform row instead, silently.
Shapes: T queries, S keys, K key width, V value width.
Reference: Vaswani et al. 2017, arXiv:1706.03762 (scaled dot-product attention).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, scenario_run

__all__ = ["masked_softmax", "attention", "masked_loss", "loss_and_grads", "run"]


def masked_softmax(scores: jax.Array, mask: jax.Array, variant: str) -> jax.Array:
    """Softmax over the last axis of scores [T, S] where mask [T, S] is True.

    "ported": a row with no True is zeros (finite gradients). "naive": that row is
    NaN (softmax of all -inf). Source: PITFALLS P12.
    """
    check_variant("p12_masked_attention_row", variant)
    check_same_shape("masked_softmax", scores=scores.shape, mask=mask.shape)  # a [S] mask would broadcast
    if variant == "ported":
        return jax.nn.softmax(scores, axis=-1, where=mask)  # GRAD-FLOW: an empty row is zeros, with zero gradient
    return jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, variant: str) -> jax.Array:
    """out [T, V] = masked_softmax(q [T, K] k [S, K]^T / sqrt(K)) @ v [S, V]."""
    check_variant("p12_masked_attention_row", variant)
    scores = q @ k.T / math.sqrt(q.shape[-1])
    return masked_softmax(scores, mask, variant) @ v


def masked_loss(out: jax.Array, w: jax.Array, mask: jax.Array) -> jax.Array:
    """sum(w * out) [] over the query rows that see at least one key (padded rows excluded).

    Raises ValueError if out and w differ in shape, or mask is not [T, S] with the
    T query rows of out [T, V].
    """
    check_same_shape("masked_loss", out=out.shape, w=w.shape)
    if out.ndim != 2 or mask.ndim != 2 or mask.shape[0] != out.shape[0]:
        raise ValueError(
            f"masked_loss: mask has shape {tuple(mask.shape)} but out has shape {tuple(out.shape)}; "
            "expected out [T, V] and mask [T, S] with the same T"
        )
    valid = mask.any(axis=-1, keepdims=True)
    return (jnp.where(valid, out, 0.0) * w).sum()  # GRAD-FLOW: padded query rows are excluded from the loss


@functools.partial(jax.jit, static_argnames="variant")
def loss_and_grads(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, w: jax.Array, variant: str):
    """(loss [], out [T, V], (d loss / dq [T, K], dk [S, K], dv [S, V])), jitted."""
    check_variant("p12_masked_attention_row", variant)

    def loss_fn(q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = attention(q, k, v, mask, variant)
        return masked_loss(out, w, mask), out

    (loss, out), grads = jax.value_and_grad(loss_fn, argnums=(0, 1, 2), has_aux=True)(q, k, v)
    return loss, out, grads


@scenario_run("p12_masked_attention_row")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; out [T, V]; grads/q [T, K], grads/k [S, K], grads/v [S, V] ("naive": out row and grads/v NaN)."""
    q, k, v = (field(fx, n) for n in ("q", "k", "v"))
    mask = field(fx, "mask")
    loss, out, (gq, gk, gv) = loss_and_grads(q, k, v, mask, field(fx, "w"), variant)
    return {"loss": loss, "out": out, "grads/q": gq, "grads/k": gk, "grads/v": gv}
