"""Worked port 4, JAX side: transformers' LlamaForCausalLM in Flax NNX, correct and with one bug each.

The correct port: nnx.Embed, decoder layers of nnx.RMSNorm(epsilon=1e-6), attention with
q / k / v / o nnx.Linear(use_bias=False), rotary positions by rotate_half, each key / value head
repeated for its group of query heads (jnp.repeat), a causal softmax in the inputs' dtype, a
SwiGLU MLP down(silu(gate(x)) * up(x)); an untied lm_head; next-token cross-entropy; optax.adamw.
Attribute names are HF's (model/layers/0/self_attn/q_proj), so the weights come across by path.
Gradient flow: no stop: everything trains.
Port note: VARIANTS name each buggy port; none is a catalogue pitfall (""), the checker must
report DIFFERS. `rotary_interleaved` rotates pairs (2i, 2i+1) (GPT-J's convention, not HF
Llama's halves); `gqa_tiled` tiles the key / value heads (head h reads kv head h % kv_heads,
not h // groups); `swiglu_swapped` gates with up_proj and multiplies by gate_proj.
Shapes: B batch, T tokens, H query heads, G key / value heads, d head width, V vocabulary.
Reference: Touvron et al. 2023, arXiv:2302.13971; Su et al. 2021, arXiv:2104.09864 (RoPE);
Ainslie et al. 2023, arXiv:2305.13245 (GQA); Flax docs, flax.nnx.RMSNorm.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

__all__ = [
    "VARIANTS",
    "rotary",
    "LlamaAttention",
    "LlamaMLP",
    "BareRMSNorm",
    "LlamaDecoderLayer",
    "LlamaModel",
    "LlamaForCausalLM",
    "build",
    "loss",
    "optimizer",
]

VARIANTS = {
    "correct": None,
    "rotary_interleaved": "",
    "gqa_tiled": "",
    "swiglu_swapped": "",
    # bfloat16 only: the float64 and float32 passes match; the bfloat16 pass names the float32 HF keeps
    "softmax_bfloat16": "precision",
    "rmsnorm_bfloat16": "precision",
    "log_softmax_bfloat16": "precision",
}
THETA = 10000.0  # LlamaConfig's rope_theta


def rotary(x: jax.Array, interleaved: bool = False) -> jax.Array:
    """Rotary positions on x [B, heads, T, d] (positions 0..T-1), in x's dtype.

    HF Llama rotates halves: dimension i pairs with i + d/2 (rotate_half); `interleaved` pairs
    2i with 2i+1 instead (a bug here). Frequencies theta^(-2i/d), i < d/2.
    """
    t, d = x.shape[-2], x.shape[-1]
    # HF's table is float32 whatever the model's dtype (cast to x's after): in bfloat16 a table in bfloat16 drifts
    inv_freq = 1.0 / THETA ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d)  # [d/2]
    freqs = jnp.arange(t, dtype=jnp.float32)[:, None] * inv_freq  # [T, d/2]
    if interleaved:
        emb = jnp.repeat(freqs, 2, axis=-1)  # [T, d]: f0 f0 f1 f1 ...
        x1, x2 = x[..., 0::2], x[..., 1::2]
        turned = jnp.stack((-x2, x1), axis=-1).reshape(x.shape)
    else:
        emb = jnp.concatenate((freqs, freqs), axis=-1)  # [T, d]: f0 f1 ... f0 f1 ...
        turned = jnp.concatenate((-x[..., d // 2 :], x[..., : d // 2]), axis=-1)
    return x * jnp.cos(emb).astype(x.dtype) + turned * jnp.sin(emb).astype(x.dtype)


class LlamaAttention(nnx.Module):
    """Causal grouped-query attention with rotary positions: x [B, T, D] -> [B, T, D]."""

    def __init__(self, dim: int, heads: int, kv_heads: int, variant: str, rngs: nnx.Rngs) -> None:
        self.heads, self.kv_heads, self.head_dim, self.variant = heads, kv_heads, dim // heads, variant
        self.q_proj = nnx.Linear(dim, heads * self.head_dim, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(dim, kv_heads * self.head_dim, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(dim, kv_heads * self.head_dim, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(heads * self.head_dim, dim, use_bias=False, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, _ = x.shape

        def split(y: jax.Array) -> jax.Array:  # [B, T, n*d] -> [B, n, T, d]
            return y.reshape(b, t, -1, self.head_dim).transpose(0, 2, 1, 3)

        interleaved = self.variant == "rotary_interleaved"
        q = rotary(split(self.q_proj(x)), interleaved)
        k = rotary(split(self.k_proj(x)), interleaved)
        v = split(self.v_proj(x))
        groups = self.heads // self.kv_heads
        if self.variant == "gqa_tiled":
            k, v = jnp.tile(k, (1, groups, 1, 1)), jnp.tile(v, (1, groups, 1, 1))
        else:  # HF's repeat_kv: kv head g serves query heads g*groups .. (g+1)*groups-1
            k, v = jnp.repeat(k, groups, axis=1), jnp.repeat(v, groups, axis=1)
        logits = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(self.head_dim).astype(x.dtype)  # [B, H, T, T]
        causal = jnp.tril(jnp.ones((t, t), bool))
        logits = jnp.where(causal, logits, jnp.finfo(logits.dtype).min)
        # HF's attention takes the softmax in float32 and casts back (bfloat16 rounds its exponentials)
        wide = logits if self.variant == "softmax_bfloat16" else logits.astype(jnp.float32)
        out = jax.nn.softmax(wide, axis=-1).astype(v.dtype) @ v  # [B, H, T, d]
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(b, t, -1))


class LlamaMLP(nnx.Module):
    """SwiGLU: x [B, T, D] -> down(silu(gate(x)) * up(x)) [B, T, D]."""

    def __init__(self, dim: int, hidden: int, variant: str, rngs: nnx.Rngs) -> None:
        self.variant = variant
        self.gate_proj = nnx.Linear(dim, hidden, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(dim, hidden, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(hidden, dim, use_bias=False, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        gate, up = self.gate_proj(x), self.up_proj(x)
        if self.variant == "swiglu_swapped":
            gate, up = up, gate
        return self.down_proj(jax.nn.silu(gate) * up)


class BareRMSNorm(nnx.Module):
    """RMSNorm computed in its input's dtype: in bfloat16 its statistics and rsqrt too (the rmsnorm_bfloat16 bug;
    HF computes them in float32)."""

    def __init__(self, dim: int, epsilon: float) -> None:
        self.scale, self.epsilon = nnx.Param(jnp.ones(dim)), epsilon

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.scale[...] * (x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.epsilon))


def _norm(dim: int, variant: str, rngs: nnx.Rngs) -> nnx.Module:
    return BareRMSNorm(dim, 1e-6) if variant == "rmsnorm_bfloat16" else nnx.RMSNorm(dim, epsilon=1e-6, rngs=rngs)


class LlamaDecoderLayer(nnx.Module):
    """Pre-norm layer: x + attn(RMSNorm(x)), then + mlp(RMSNorm(x)); [B, T, D] -> [B, T, D]."""

    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int, variant: str, rngs: nnx.Rngs) -> None:
        self.self_attn = LlamaAttention(dim, heads, kv_heads, variant, rngs)
        self.mlp = LlamaMLP(dim, hidden, variant, rngs)
        self.input_layernorm = _norm(dim, variant, rngs)
        self.post_attention_layernorm = _norm(dim, variant, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nnx.Module):
    """input_ids [B, T] int -> final hidden states [B, T, D]."""

    def __init__(self, vocab: int, dim: int, heads: int, kv_heads: int, hidden: int, layers: int, variant: str) -> None:
        rngs = nnx.Rngs(0)
        self.embed_tokens = nnx.Embed(vocab, dim, rngs=rngs)
        self.layers = nnx.List([LlamaDecoderLayer(dim, heads, kv_heads, hidden, variant, rngs) for _ in range(layers)])
        self.norm = _norm(dim, variant, rngs)

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class LlamaForCausalLM(nnx.Module):
    """input_ids [B, T] int -> logits [B, T, V]."""

    def __init__(self, vocab: int, dim: int, heads: int, kv_heads: int, hidden: int, layers: int, variant: str) -> None:
        self.model = LlamaModel(vocab, dim, heads, kv_heads, hidden, layers, variant)
        self.lm_head = nnx.Linear(dim, vocab, use_bias=False, rngs=nnx.Rngs(1))
        self.variant = variant

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        return self.lm_head(self.model(input_ids))


def build(
    variant: str = "correct", *, vocab: int, dim: int, heads: int, kv_heads: int, hidden: int, layers: int, **_
) -> LlamaForCausalLM:
    """The NNX port named by `variant` (a key of VARIANTS), freshly initialised."""
    if variant not in VARIANTS:
        raise ValueError(f"llama: variant expected one of {list(VARIANTS)}, got {variant!r}")
    return LlamaForCausalLM(vocab, dim, heads, kv_heads, hidden, layers, variant)


def loss(model: LlamaForCausalLM, batch: dict[str, jax.Array]) -> jax.Array:
    """Mean next-token cross-entropy (logits at t against labels at t+1), as HF's labels= loss; a scalar (the
    log_softmax_bfloat16 variant keeps the logits' dtype: in bfloat16, its log-softmax too)."""
    logits = model(batch["input_ids"])[:, :-1]
    if model.variant != "log_softmax_bfloat16":
        logits = logits.astype(jnp.float32)  # HF's loss upcasts the logits
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"][:, 1:]).mean()


def optimizer(variant: str = "correct") -> optax.GradientTransformation:
    """optax.adamw(lr 1e-3, weight decay 0.01): torch.optim.AdamW's defaults otherwise."""
    return optax.adamw(1e-3, weight_decay=0.01)
