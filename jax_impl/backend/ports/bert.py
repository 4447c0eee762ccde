"""Worked port 5, JAX side: transformers' BertForMaskedLM in Flax NNX, correct and with one bug each.

The correct port: word, position and token-type nnx.Embed summed, nnx.LayerNorm(epsilon=1e-12),
post-norm layers of softmax attention (padded keys masked) and an exact-GELU MLP, the MLM head
whose decoder is the word table (nnx.Embed.attend) plus a bias of its own; masked-token
cross-entropy; optax.adamw. Attribute names are HF's (bert/encoder/layer/0/attention/self/query).
Gradient flow: no stop: everything trains; the tied word table's gradient sums its two uses.
Port note: VARIANTS name each buggy port. `token_type_dropped` leaves out the token-type
embedding (a port written from a single-segment example; no catalogue pitfall names it:
""); `layernorm_eps` keeps nnx.LayerNorm's default epsilon 1e-6 (P05).
Shapes: B batch, T tokens, V vocabulary, D model width, H heads, d = D / H.
Reference: Devlin et al. 2019, arXiv:1810.04805; Flax docs, flax.nnx.Embed.attend.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

__all__ = [
    "VARIANTS",
    "BertEmbeddings",
    "BertSelfAttention",
    "BertLayer",
    "BertModel",
    "BertForMaskedLM",
    "build",
    "loss",
    "optimizer",
]

VARIANTS = {"correct": None, "token_type_dropped": "", "layernorm_eps": "P05"}


def _norm(dim: int, variant: str, rngs: nnx.Rngs) -> nnx.LayerNorm:
    return nnx.LayerNorm(dim, epsilon=1e-6 if variant == "layernorm_eps" else 1e-12, rngs=rngs)


class _Dense(nnx.Module):
    """HF's `dense` + LayerNorm(dense(x) + residual) (BertSelfOutput, BertOutput)."""

    def __init__(self, din: int, dim: int, variant: str, rngs: nnx.Rngs) -> None:
        self.dense = nnx.Linear(din, dim, rngs=rngs)
        self.LayerNorm = _norm(dim, variant, rngs)

    def __call__(self, x: jax.Array, residual: jax.Array) -> jax.Array:
        return self.LayerNorm(self.dense(x) + residual)


class BertEmbeddings(nnx.Module):
    """input_ids, token_type_ids [B, T] int -> LN(word + token type + position) [B, T, D]."""

    def __init__(self, vocab: int, dim: int, variant: str, rngs: nnx.Rngs) -> None:
        self.variant = variant
        self.word_embeddings = nnx.Embed(vocab, dim, rngs=rngs)
        self.position_embeddings = nnx.Embed(16, dim, rngs=rngs)
        self.token_type_embeddings = nnx.Embed(2, dim, rngs=rngs)
        self.LayerNorm = _norm(dim, variant, rngs)

    def __call__(self, input_ids: jax.Array, token_type_ids: jax.Array) -> jax.Array:
        x = self.word_embeddings(input_ids) + self.position_embeddings(jnp.arange(input_ids.shape[1]))
        if self.variant != "token_type_dropped":
            x = x + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x)


class BertSelfAttention(nnx.Module):
    """x [B, T, D], keep [B, T] bool (True = a real token) -> attention over the real keys [B, T, D]."""

    def __init__(self, dim: int, heads: int, rngs: nnx.Rngs) -> None:
        self.heads = heads
        self.query, self.key, self.value = (nnx.Linear(dim, dim, rngs=rngs) for _ in range(3))

    def __call__(self, x: jax.Array, keep: jax.Array) -> jax.Array:
        b, t, dim = x.shape
        q, k, v = (f(x).reshape(b, t, self.heads, -1).transpose(0, 2, 1, 3) for f in (self.query, self.key, self.value))
        logits = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(dim // self.heads).astype(x.dtype)  # [B, H, T, T]
        logits = jnp.where(keep[:, None, None, :], logits, jnp.finfo(logits.dtype).min)
        weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(
            v.dtype
        )  # the softmax in float32, as torch's kernel keeps it, cast back
        return (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, dim)


class _Attention(nnx.Module):
    def __init__(self, dim: int, heads: int, variant: str, rngs: nnx.Rngs) -> None:
        self.self = BertSelfAttention(dim, heads, rngs)
        self.output = _Dense(dim, dim, variant, rngs)

    def __call__(self, x: jax.Array, keep: jax.Array) -> jax.Array:
        return self.output(self.self(x, keep), x)


class _Intermediate(nnx.Module):
    def __init__(self, dim: int, hidden: int, rngs: nnx.Rngs) -> None:
        self.dense = nnx.Linear(dim, hidden, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return jax.nn.gelu(self.dense(x), approximate=False)


class BertLayer(nnx.Module):
    """Post-norm layer: x [B, T, D], keep [B, T] -> LN(a + W2 GELU(W1 a)), a = LN(x + attention(x))."""

    def __init__(self, dim: int, heads: int, hidden: int, variant: str, rngs: nnx.Rngs) -> None:
        self.attention = _Attention(dim, heads, variant, rngs)
        self.intermediate = _Intermediate(dim, hidden, rngs)
        self.output = _Dense(hidden, dim, variant, rngs)

    def __call__(self, x: jax.Array, keep: jax.Array) -> jax.Array:
        a = self.attention(x, keep)
        return self.output(self.intermediate(a), a)


class _Encoder(nnx.Module):
    def __init__(self, dim: int, heads: int, hidden: int, layers: int, variant: str, rngs: nnx.Rngs) -> None:
        self.layer = nnx.List([BertLayer(dim, heads, hidden, variant, rngs) for _ in range(layers)])

    def __call__(self, x: jax.Array, keep: jax.Array) -> jax.Array:
        for layer in self.layer:
            x = layer(x, keep)
        return x


class BertModel(nnx.Module):
    """input_ids, token_type_ids, attention_mask [B, T] int -> hidden states [B, T, D] (no pooler)."""

    def __init__(self, vocab: int, dim: int, heads: int, hidden: int, layers: int, variant: str, rngs) -> None:
        self.embeddings = BertEmbeddings(vocab, dim, variant, rngs)
        self.encoder = _Encoder(dim, heads, hidden, layers, variant, rngs)

    def __call__(self, input_ids: jax.Array, token_type_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
        return self.encoder(self.embeddings(input_ids, token_type_ids), attention_mask == 1)


class _Transform(nnx.Module):
    def __init__(self, dim: int, variant: str, rngs: nnx.Rngs) -> None:
        self.dense = nnx.Linear(dim, dim, rngs=rngs)
        self.LayerNorm = _norm(dim, variant, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.LayerNorm(jax.nn.gelu(self.dense(x), approximate=False))


class _Predictions(nnx.Module):
    """HF's cls.predictions: transform, then the word table's transpose (the tied decoder) plus `bias`."""

    def __init__(self, vocab: int, dim: int, variant: str, rngs: nnx.Rngs) -> None:
        self.transform = _Transform(dim, variant, rngs)
        self.bias = nnx.Param(jnp.zeros(vocab))

    def __call__(self, x: jax.Array, table: nnx.Embed) -> jax.Array:
        return table.attend(self.transform(x)) + self.bias


class _Cls(nnx.Module):
    def __init__(self, vocab: int, dim: int, variant: str, rngs: nnx.Rngs) -> None:
        self.predictions = _Predictions(vocab, dim, variant, rngs)


class BertForMaskedLM(nnx.Module):
    """input_ids, token_type_ids, attention_mask [B, T] int -> logits [B, T, V]."""

    def __init__(self, vocab: int, dim: int, heads: int, hidden: int, layers: int, variant: str) -> None:
        rngs = nnx.Rngs(0)
        self.bert = BertModel(vocab, dim, heads, hidden, layers, variant, rngs)
        self.cls = _Cls(vocab, dim, variant, rngs)

    def __call__(self, input_ids: jax.Array, token_type_ids: jax.Array, attention_mask: jax.Array) -> jax.Array:
        hidden = self.bert(input_ids, token_type_ids, attention_mask)
        return self.cls.predictions(hidden, self.bert.embeddings.word_embeddings)


def build(
    variant: str = "correct", *, vocab: int, dim: int, heads: int, hidden: int, layers: int, **_
) -> BertForMaskedLM:
    """The NNX port named by `variant` (a key of VARIANTS), freshly initialised."""
    if variant not in VARIANTS:
        raise ValueError(f"bert: variant expected one of {list(VARIANTS)}, got {variant!r}")
    return BertForMaskedLM(vocab, dim, heads, hidden, layers, variant)


def loss(model: BertForMaskedLM, batch: dict[str, jax.Array]) -> jax.Array:
    """Mean cross-entropy of the logits at the labelled positions (labels -100 ignored), a scalar."""
    logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    labels = batch["labels"]
    each = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), jnp.maximum(labels, 0))
    return jnp.sum(jnp.where(labels != -100, each, 0)) / jnp.sum(labels != -100)


def optimizer(variant: str = "correct") -> optax.GradientTransformation:
    """optax.adamw(lr 1e-3, weight decay 0.01): torch.optim.AdamW's defaults otherwise."""
    return optax.adamw(1e-3, weight_decay=0.01)
