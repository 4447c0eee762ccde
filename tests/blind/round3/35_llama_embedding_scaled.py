"""EXPECTED: embedding_scaled
WHERE: model.embed_tokens
The port multiplies the token embeddings by sqrt(hidden_size) (Gemma style); Llama does not.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(35)
rng = np.random.default_rng(35)
VOCAB, HIDDEN, HEADS, KV_HEADS, FFN, LAYERS = 48, 32, 4, 2, 40, 2
HEAD_DIM = HIDDEN // HEADS
ROPE_THETA, RMS_EPS = 10000.0, 1e-5

config = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                     num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=64,
                     rms_norm_eps=RMS_EPS, rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
                     attention_dropout=0.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)
torch_model = LlamaForCausalLM(config).eval()  # lm_head.weight is model.embed_tokens.weight
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if name.endswith("norm.weight"):
            p.normal_(1.0, 0.25)
        elif "embed_tokens" in name:
            p.normal_(0.0, 0.1)
        else:
            p.normal_(0.0, 0.2)


def rotary_tables(seq_len, dtype):
    inv_freq = 1.0 / (ROPE_THETA ** (jnp.arange(0, HEAD_DIM, 2, dtype=dtype) / HEAD_DIM))
    angles = jnp.outer(jnp.arange(seq_len, dtype=dtype), inv_freq)  # [T, HEAD_DIM/2]
    angles = jnp.concatenate([angles, angles], axis=-1)  # halves layout, as HF
    return jnp.cos(angles), jnp.sin(angles)


def apply_rotary(x, cos, sin):  # x [B, T, H, HEAD_DIM]
    half = HEAD_DIM // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[None, :, None, :] + rotated * sin[None, :, None, :]


class LlamaAttention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(HIDDEN, HEADS * HEAD_DIM, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(HIDDEN, KV_HEADS * HEAD_DIM, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(HIDDEN, KV_HEADS * HEAD_DIM, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(HEADS * HEAD_DIM, HIDDEN, use_bias=False, rngs=rngs)

    def __call__(self, x, cos, sin):
        b, t, _ = x.shape
        q = apply_rotary(self.q_proj(x).reshape(b, t, HEADS, HEAD_DIM), cos, sin)
        k = apply_rotary(self.k_proj(x).reshape(b, t, KV_HEADS, HEAD_DIM), cos, sin)
        v = self.v_proj(x).reshape(b, t, KV_HEADS, HEAD_DIM)
        # grouped-query attention: jax groups query heads h -> kv head h // (HEADS // KV_HEADS), like repeat_kv
        out = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.reshape(b, t, HEADS * HEAD_DIM))


class LlamaMLP(nnx.Module):
    def __init__(self, rngs):
        self.gate_proj = nnx.Linear(HIDDEN, FFN, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(HIDDEN, FFN, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(FFN, HIDDEN, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(nnx.silu(self.gate_proj(x)) * self.up_proj(x))


class RMSNorm(nnx.Module):  # hand-written, leaf named like nnx.RMSNorm
    def __init__(self, dim, eps):
        self.scale = nnx.Param(jnp.ones((dim,)))
        self.eps = eps

    def __call__(self, x):
        var = jnp.mean(x * x, axis=-1, keepdims=True)
        return self.scale.value * (x * jax.lax.rsqrt(var + self.eps))


class LlamaDecoderLayer(nnx.Module):
    def __init__(self, rngs):
        self.input_layernorm = RMSNorm(HIDDEN, RMS_EPS)
        self.self_attn = LlamaAttention(rngs)
        self.post_attention_layernorm = RMSNorm(HIDDEN, RMS_EPS)
        self.mlp = LlamaMLP(rngs)

    def __call__(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBackbone(nnx.Module):
    def __init__(self, rngs):
        self.embed_tokens = nnx.Embed(VOCAB, HIDDEN, rngs=rngs)
        self.layers = nnx.List([LlamaDecoderLayer(rngs) for _ in range(LAYERS)])
        self.norm = RMSNorm(HIDDEN, RMS_EPS)

    def __call__(self, ids):
        x = self.embed_tokens(ids) * HIDDEN ** 0.5
        cos, sin = rotary_tables(ids.shape[1], x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class LlamaForCausalLMPort(nnx.Module):
    def __init__(self, rngs):
        self.model = LlamaBackbone(rngs)

    def __call__(self, ids):
        return self.model.embed_tokens.attend(self.model(ids))  # tie_word_embeddings=True


jax_model = LlamaForCausalLMPort(nnx.Rngs(2))

batch = {"input_ids": rng.integers(3, VOCAB, size=(2, 8)).astype(np.int64)}  # no padding, no attention_mask


def torch_loss(model, batch):
    ids = batch["input_ids"]
    logits = model(input_ids=ids).logits[:, :-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


def jax_loss(model, batch):
    ids = batch["input_ids"]
    logits = model(ids)[:, :-1]
    return optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, 1:]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.8, nesterov=True)


jax_optimizer = optax.sgd(0.1, momentum=0.8, nesterov=True)
