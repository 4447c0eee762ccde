"""Worked port 3, JAX side: the pre-norm transformer encoder in Flax NNX, correct and with one bug each.

The correct port: nnx.Embed + an nnx.Param position table, blocks of nnx.LayerNorm(epsilon=1e-5),
nnx.MultiHeadAttention with mask = ~pad (Flax: True = attend), jax.nn.gelu(approximate=False),
nnx.Linear; optax.adamw. Weights come across by the rule tables: in_proj_weight's q | k | v
rows become query / key / value kernels [D, heads, D/heads].
Gradient flow: no stop: everything trains; the padded keys get no attention weight.
Port note: VARIANTS name each buggy port's pitfall. `gelu_tanh` calls jax.nn.gelu with its
default tanh approximation (P04); `layernorm_eps` keeps nnx.LayerNorm's default epsilon 1e-6
(P05); `mask_polarity` passes torch's key_padding_mask as the Flax mask (True = attend: P12).
Every port passes `attention_fn=attention`: the default takes its softmax in float32 (P16).
Shapes: B batch, T tokens, V vocabulary, D model width, K classes.
Reference: Vaswani et al. 2017, arXiv:1706.03762; Flax docs, flax.nnx.MultiHeadAttention, jax.nn.gelu.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

__all__ = ["VARIANTS", "attention", "Block", "Encoder", "build", "loss", "optimizer"]

VARIANTS = {"correct": None, "gelu_tanh": "P04", "layernorm_eps": "P05", "mask_polarity": "P12"}


def attention(query: jax.Array, key: jax.Array, value: jax.Array, bias=None, mask=None, **_) -> jax.Array:
    """Softmax attention: q, k, v [B, T, heads, D/heads], mask [B, 1, 1, T] (True = attend); its softmax in float32
    and cast back to the inputs' dtype, as torch's scaled-dot-product kernel keeps it.

    nnx.MultiHeadAttention's default (jax.nn.dot_product_attention when there is no dropout)
    always takes its softmax in float32, so a float64 check would see float32 rounding (1e-8).
    """
    logits = jnp.einsum("bqhd,bkhd->bhqk", query, key) / jnp.sqrt(query.shape[-1]).astype(query.dtype)
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(
        value.dtype
    )  # the softmax in float32, as torch's kernel keeps it, cast back
    return jnp.einsum("bhqk,bkhd->bqhd", weights, value)


class Block(nnx.Module):
    """Pre-norm block: x [B, T, D], pad [B, T] bool (True = padding) -> [B, T, D]."""

    def __init__(self, dim: int, heads: int, variant: str, rngs: nnx.Rngs) -> None:
        eps = {"epsilon": 1e-5} if variant != "layernorm_eps" else {}
        self.variant = variant
        self.ln1 = nnx.LayerNorm(dim, **eps, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(heads, dim, decode=False, attention_fn=attention, rngs=rngs)
        self.ln2 = nnx.LayerNorm(dim, **eps, rngs=rngs)
        self.fc1 = nnx.Linear(dim, 4 * dim, rngs=rngs)
        self.fc2 = nnx.Linear(4 * dim, dim, rngs=rngs)

    def __call__(self, x: jax.Array, pad: jax.Array) -> jax.Array:
        attend = pad if self.variant == "mask_polarity" else ~pad  # Flax: True = attend
        h = self.ln1(x)
        x = x + self.attn(h, mask=attend[:, None, None, :])  # mask [B, 1, 1, T]
        exact = self.variant != "gelu_tanh"
        return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x)), approximate=not exact))


class Encoder(nnx.Module):
    """tokens [B, T] int, pad [B, T] bool -> logits [B, K]."""

    def __init__(self, vocab: int, dim: int, heads: int, blocks: int, classes: int, tokens: int, variant: str) -> None:
        rngs = nnx.Rngs(0)
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.pos = nnx.Param(jnp.zeros((tokens, dim)))
        self.blocks = nnx.List([Block(dim, heads, variant, rngs) for _ in range(blocks)])
        self.ln_f = nnx.LayerNorm(dim, epsilon=1e-5 if variant != "layernorm_eps" else 1e-6, rngs=rngs)
        self.head = nnx.Linear(dim, classes, rngs=rngs)

    def __call__(self, tokens: jax.Array, pad: jax.Array) -> jax.Array:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x, pad)
        keep = (~pad)[..., None].astype(x.dtype)  # [B, T, 1]
        return self.head((self.ln_f(x) * keep).sum(1) / keep.sum(1))  # [B, K]


def build(
    variant: str = "correct", *, vocab: int, dim: int, heads: int, blocks: int, classes: int, tokens: int, **_
) -> Encoder:
    """The NNX port named by `variant` (a key of VARIANTS), freshly initialised."""
    if variant not in VARIANTS:
        raise ValueError(f"transformer: variant expected one of {list(VARIANTS)}, got {variant!r}")
    return Encoder(vocab, dim, heads, blocks, classes, tokens, variant)


def loss(model: Encoder, batch: dict[str, jax.Array]) -> jax.Array:
    """Mean cross-entropy of the logits against the integer labels, a scalar."""
    logits = model(batch["tokens"], batch["pad"]).astype(jnp.float32)  # as torch's kernel: its log-softmax in float32
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()


def optimizer(variant: str = "correct") -> optax.GradientTransformation:
    """optax.adamw(lr 3e-3, weight decay 0.01): torch.optim.AdamW's defaults otherwise."""
    return optax.adamw(3e-3, weight_decay=0.01)
