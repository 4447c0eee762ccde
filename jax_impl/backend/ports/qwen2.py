"""Worked port 8, JAX side: transformers' Qwen2ForCausalLM in Flax NNX, correct and with one bug each.

The correct port is Llama's (jax_impl/backend/ports/llama.py: its rotary table, its grouped-query attention with
the softmax in float32, its SwiGLU MLP, nnx.RMSNorm(epsilon=1e-6), the loss on float32 logits) with biases on
q / k / v; an untied lm_head; optax.adamw. Attribute names are HF's (model/layers/0/self_attn/q_proj).
Gradient flow: no stop: everything trains.
Port note: VARIANTS name each buggy port. `rmsnorm_eps` builds its norms with epsilon 1e-5 (P05);
`hidden_scaled` multiplies the final hidden states by 1.0001 before lm_head, a difference below float32's
rounding of the old float32-island bound ("" : no catalogue pitfall names it); `softmax_bfloat16` takes the
attention softmax in the logits' dtype (bfloat16 only).
Shapes: B batch, T tokens, V vocabulary, D model width.
Reference: Yang et al. 2024, arXiv:2407.10671 (Qwen2); Flax docs, flax.nnx.RMSNorm.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from . import llama

__all__ = ["VARIANTS", "Qwen2ForCausalLM", "build", "loss", "optimizer"]

VARIANTS = {"correct": None, "rmsnorm_eps": "P05", "hidden_scaled": "", "softmax_bfloat16": "precision"}


class Qwen2ForCausalLM(llama.LlamaForCausalLM):
    """input_ids [B, T] int -> logits [B, T, V]: Llama's port with biases on q / k / v."""

    def __init__(self, vocab: int, dim: int, heads: int, kv_heads: int, hidden: int, layers: int, variant: str) -> None:
        super().__init__(vocab, dim, heads, kv_heads, hidden, layers, variant)
        rngs = nnx.Rngs(2)
        for layer in self.model.layers:
            attn = layer.self_attn
            attn.q_proj = nnx.Linear(dim, heads * attn.head_dim, rngs=rngs)
            attn.k_proj = nnx.Linear(dim, kv_heads * attn.head_dim, rngs=rngs)
            attn.v_proj = nnx.Linear(dim, kv_heads * attn.head_dim, rngs=rngs)
            if variant == "rmsnorm_eps":
                layer.input_layernorm.epsilon = layer.post_attention_layernorm.epsilon = 1e-5
        if variant == "rmsnorm_eps":
            self.model.norm.epsilon = 1e-5

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        hidden = self.model(input_ids)
        return self.lm_head(hidden * 1.0001 if self.variant == "hidden_scaled" else hidden)


def build(
    variant: str = "correct", *, vocab: int, dim: int, heads: int, kv_heads: int, hidden: int, layers: int, **_
) -> Qwen2ForCausalLM:
    """The NNX port named by `variant` (a key of VARIANTS), freshly initialised."""
    if variant not in VARIANTS:
        raise ValueError(f"qwen2: variant expected one of {list(VARIANTS)}, got {variant!r}")
    return Qwen2ForCausalLM(vocab, dim, heads, kv_heads, hidden, layers, variant)


def loss(model: Qwen2ForCausalLM, batch: dict[str, jax.Array]) -> jax.Array:
    """Mean next-token cross-entropy on float32 logits (HF's loss upcasts them), a scalar."""
    logits = model(batch["input_ids"])[:, :-1].astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"][:, 1:]).mean()


def optimizer(variant: str = "correct") -> optax.GradientTransformation:
    """optax.adamw(lr 1e-3, weight decay 0.01): torch.optim.AdamW's defaults otherwise."""
    return optax.adamw(1e-3, weight_decay=0.01)
