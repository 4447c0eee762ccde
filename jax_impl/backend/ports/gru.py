"""Worked port 2, JAX side: the GRU sequence classifier in Flax NNX, correct and with one bug each.

The correct port: nnx.Embed, nnx.RNN over a GRU cell with torch's equations (`TorchGRUCell`:
ih / hh nnx.Linear with both biases, b_hn inside the reset gate), nnx.Linear head; optax.adamw
with the embedding table outside the optimizer (nnx.Optimizer(wrt=...)): torch's frozen table.
Gradient flow: loss -> head -> RNN -> stops at the table (outside the optimizer's wrt filter).
Port note: VARIANTS name each buggy port's pitfall. `nnx_gru_cell` uses nnx.GRUCell, which has
no b_hn (P08); `embed_trained` forgets to freeze the table (optax trains it: the gradient-flow
diff says so); `embed_stop_gradient` freezes it with stop_gradient only, so optax.adamw still
decays it (a zero gradient that moves: weight decay on a frozen leaf, frozen_backbone).
Shapes: B batch, T steps, V vocabulary, E embedding, H hidden, K classes.
Reference: Cho et al. 2014, arXiv:1406.1078; Flax docs, flax.nnx.RNN, flax.nnx.GRUCell, nnx.Optimizer(wrt).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

__all__ = ["VARIANTS", "TorchGRUCell", "Tagger", "build", "loss", "optimizer"]

VARIANTS = {
    "correct": None,
    "nnx_gru_cell": "P08",
    "embed_trained": "frozen_backbone",
    "embed_stop_gradient": "frozen_backbone",
}


class TorchGRUCell(nnx.RNNCellBase):
    """torch's GRU cell: carry h [B, H], x [B, E] -> (h', h'); gate blocks r | z | n in the 3H columns."""

    def __init__(self, in_features: int, hidden_features: int, *, rngs: nnx.Rngs) -> None:
        self.hidden_features = hidden_features
        self.ih = nnx.Linear(in_features, 3 * hidden_features, rngs=rngs)
        self.hh = nnx.Linear(hidden_features, 3 * hidden_features, rngs=rngs)

    def __call__(self, carry: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        xr, xz, xn = jnp.split(self.ih(x), 3, axis=-1)
        hr, hz, hn = jnp.split(self.hh(carry), 3, axis=-1)  # hn includes b_hn
        r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        h = (1 - z) * n + z * carry
        return h, h

    def initialize_carry(self, input_shape: tuple[int, ...], rngs=None) -> jax.Array:
        return jnp.zeros((*input_shape[:-1], self.hidden_features), self.hh.kernel.dtype)

    @property
    def num_feature_axes(self) -> int:
        return 1


class Tagger(nnx.Module):
    """tokens [B, T] int -> logits [B, K]."""

    def __init__(self, vocab: int, embed: int, hidden: int, classes: int, variant: str = "correct") -> None:
        rngs = nnx.Rngs(0)
        self.stop = variant == "embed_stop_gradient"
        self.embed = nnx.Embed(vocab, embed, rngs=rngs)
        cell = (
            nnx.GRUCell(embed, hidden, rngs=rngs)
            if variant == "nnx_gru_cell"
            else TorchGRUCell(embed, hidden, rngs=rngs)
        )
        self.rnn = nnx.RNN(cell, rngs=rngs)
        self.head = nnx.Linear(hidden, classes, rngs=rngs)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = self.embed(tokens)  # [B, T, E]
        if self.stop:
            x = jax.lax.stop_gradient(x)  # GRAD-FLOW: the bug: a stop is not a freeze, adamw still decays the table
        return self.head(self.rnn(x)[:, -1])  # [B, K]


def build(variant: str = "correct", *, vocab: int, embed: int, hidden: int, classes: int, **_) -> Tagger:
    """The NNX port named by `variant` (a key of VARIANTS), freshly initialised."""
    if variant not in VARIANTS:
        raise ValueError(f"gru: variant expected one of {list(VARIANTS)}, got {variant!r}")
    return Tagger(vocab, embed, hidden, classes, variant)


def loss(model: Tagger, batch: dict[str, jax.Array]) -> jax.Array:
    """Mean cross-entropy of the logits against the integer labels, a scalar."""
    logits = model(batch["tokens"]).astype(jnp.float32)  # as torch's kernel: its log-softmax in float32
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()


def optimizer(variant: str = "correct"):
    """(optax.adamw(lr 0.01, weight decay 0.1), the trainable leaves): everything but the table, as torch."""
    tx = optax.adamw(0.01, weight_decay=0.1)
    if variant in ("embed_trained", "embed_stop_gradient"):
        return tx  # the bug: every nnx.Param trains
    return tx, nnx.All(nnx.Param, nnx.Not(nnx.PathContains("embed")))  # GRAD-FLOW: the pretrained table is frozen
