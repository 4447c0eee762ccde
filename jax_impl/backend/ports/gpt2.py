"""Worked port 7, JAX side: transformers' GPT2LMHeadModel in Flax NNX, correct and with one bug each.

The correct port: nnx.Embed for tokens (wte) and positions (wpe), pre-norm blocks of
nnx.LayerNorm(epsilon=1e-5), causal attention from one packed nnx.Linear c_attn (its output
split q | k | v), an MLP with jax.nn.gelu's tanh approximation (HF's gelu_new), a final
LayerNorm, and the logits as wte.attend (the tied head); next-token cross-entropy; optax.adamw.
HF's Conv1D weights are [in, out] already: they come across as nnx.Linear kernels untransposed.
Gradient flow: no stop: everything trains; the tied table's gradient sums its two uses.
Port note: VARIANTS name each buggy port. `gelu_exact` uses the exact GELU (P04 the other way
round: GPT-2's is the tanh one); `causal_diagonal` masks the diagonal too (tril(k=-1): a token
does not see itself, the first sees nothing; no catalogue pitfall names it: "").
Shapes: B batch, T tokens, V vocabulary, D model width, H heads, d = D / H.
Reference: Radford et al. 2019 (GPT-2); Flax docs, flax.nnx.Embed.attend, jax.nn.gelu.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

__all__ = ["VARIANTS", "GPT2Attention", "GPT2MLP", "GPT2Block", "GPT2Model", "GPT2LMHeadModel", "build", "loss",
           "optimizer"]  # fmt: skip

VARIANTS = {"correct": None, "gelu_exact": "P04", "causal_diagonal": ""}


class GPT2Attention(nnx.Module):
    """Causal attention: x [B, T, D] -> c_proj(softmax(q k^T / sqrt(d), causal) v) [B, T, D]."""

    def __init__(self, dim: int, heads: int, variant: str, rngs: nnx.Rngs) -> None:
        self.heads, self.variant = heads, variant
        self.c_attn = nnx.Linear(dim, 3 * dim, rngs=rngs)  # q | k | v along the output
        self.c_proj = nnx.Linear(dim, dim, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, dim = x.shape
        q, k, v = (y.reshape(b, t, self.heads, -1).transpose(0, 2, 1, 3) for y in jnp.split(self.c_attn(x), 3, -1))
        logits = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(dim // self.heads).astype(x.dtype)  # [B, H, T, T]
        causal = jnp.tril(jnp.ones((t, t), bool), k=-1 if self.variant == "causal_diagonal" else 0)
        logits = jnp.where(causal, logits, jnp.finfo(logits.dtype).min)
        weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(
            v.dtype
        )  # the softmax in float32, as torch's kernel keeps it, cast back
        return self.c_proj((weights @ v).transpose(0, 2, 1, 3).reshape(b, t, dim))


class GPT2MLP(nnx.Module):
    """x [B, T, D] -> c_proj(gelu_tanh(c_fc(x))) [B, T, D]."""

    def __init__(self, dim: int, variant: str, rngs: nnx.Rngs) -> None:
        self.approximate = variant != "gelu_exact"
        self.c_fc, self.c_proj = nnx.Linear(dim, 4 * dim, rngs=rngs), nnx.Linear(4 * dim, dim, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.c_proj(jax.nn.gelu(self.c_fc(x), approximate=self.approximate))


class GPT2Block(nnx.Module):
    """Pre-norm block: x + attn(LN(x)), then + mlp(LN(x)); [B, T, D] -> [B, T, D]."""

    def __init__(self, dim: int, heads: int, variant: str, rngs: nnx.Rngs) -> None:
        self.ln_1 = nnx.LayerNorm(dim, epsilon=1e-5, rngs=rngs)
        self.attn = GPT2Attention(dim, heads, variant, rngs)
        self.ln_2 = nnx.LayerNorm(dim, epsilon=1e-5, rngs=rngs)
        self.mlp = GPT2MLP(dim, variant, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nnx.Module):
    """input_ids [B, T] int -> final hidden states [B, T, D]."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, positions: int, variant: str) -> None:
        rngs = nnx.Rngs(0)
        self.wte, self.wpe = nnx.Embed(vocab, dim, rngs=rngs), nnx.Embed(positions, dim, rngs=rngs)
        self.h = nnx.List([GPT2Block(dim, heads, variant, rngs) for _ in range(layers)])
        self.ln_f = nnx.LayerNorm(dim, epsilon=1e-5, rngs=rngs)

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        x = self.wte(input_ids) + self.wpe(jnp.arange(input_ids.shape[1]))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nnx.Module):
    """input_ids [B, T] int -> logits [B, T, V] through the tied token table."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, positions: int, variant: str) -> None:
        self.transformer = GPT2Model(vocab, dim, heads, layers, positions, variant)

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        return self.transformer.wte.attend(self.transformer(input_ids))


def build(
    variant: str = "correct", *, vocab: int, dim: int, heads: int, layers: int, positions: int, **_
) -> GPT2LMHeadModel:
    """The NNX port named by `variant` (a key of VARIANTS), freshly initialised."""
    if variant not in VARIANTS:
        raise ValueError(f"gpt2: variant expected one of {list(VARIANTS)}, got {variant!r}")
    return GPT2LMHeadModel(vocab, dim, heads, layers, positions, variant)


def loss(model: GPT2LMHeadModel, batch: dict[str, jax.Array]) -> jax.Array:
    """Mean next-token cross-entropy (logits at t against labels at t+1), a scalar."""
    logits = model(batch["input_ids"])[:, :-1].astype(jnp.float32)  # as torch's kernel: its log-softmax in float32
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"][:, 1:]).mean()


def optimizer(variant: str = "correct") -> optax.GradientTransformation:
    """optax.adamw(lr 1e-3, weight decay 0.01): torch.optim.AdamW's defaults otherwise."""
    return optax.adamw(1e-3, weight_decay=0.01)
