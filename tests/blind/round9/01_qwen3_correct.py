"""EXPECTED: correct
WHERE: none
LINES: none
RELATION: none
HF Qwen3ForCausalLM (q/k RMSNorm on the head dim, 4 query / 2 kv heads, right padding) ported by hand; torch AdamW as optax.adamw; the port matches.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import Qwen3Config, Qwen3ForCausalLM

torch.manual_seed(913)
conf = Qwen3Config(
    vocab_size=48, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, max_position_embeddings=64, rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, attention_dropout=0.0,
    tie_word_embeddings=False, hidden_act="silu", pad_token_id=0, attn_implementation="sdpa",
)
torch_model = Qwen3ForCausalLM(conf).eval()
with torch.no_grad():
    for key, prm in torch_model.named_parameters():
        if "norm" in key:
            prm.uniform_(0.5, 1.6)
        else:
            prm.normal_(0.0, 0.5 if "embed" in key else 0.25)


def up(x):
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


class RMSNorm(nnx.Module):
    def __init__(self, size, eps):
        self.scale = nnx.Param(jnp.ones((size,), jnp.float32))
        self.eps = eps

    def __call__(self, x):
        h = up(x)
        var = jnp.mean(jnp.square(h), axis=-1, keepdims=True)
        h = h * jax.lax.rsqrt(var + self.eps)
        return self.scale[...] * h.astype(x.dtype)


def rotate_half(y):
    y1, y2 = jnp.split(y, 2, axis=-1)
    return jnp.concatenate((-y2, y1), axis=-1)


class Qwen3Attention(nnx.Module):
    def __init__(self, c, rngs):
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nnx.Linear(c.hidden_size, self.nh * self.hd, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(c.hidden_size, self.nkv * self.hd, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(c.hidden_size, self.nkv * self.hd, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(self.nh * self.hd, c.hidden_size, use_bias=False, rngs=rngs)
        self.q_norm = RMSNorm(self.hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.hd, c.rms_norm_eps)

    def __call__(self, x, cos, sin, keep):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.nh, self.hd)
        k = self.k_proj(x).reshape(B, T, self.nkv, self.hd)
        v = self.v_proj(x).reshape(B, T, self.nkv, self.hd)
        q, k = self.q_norm(q), self.k_norm(k)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.nh // self.nkv
        k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * self.hd ** -0.5
        scores = jnp.where(keep, scores, jnp.finfo(scores.dtype).min)
        probs = jax.nn.softmax(up(scores), axis=-1).astype(v.dtype)
        out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(B, T, self.nh * self.hd)
        return self.o_proj(out)


class Qwen3MLP(nnx.Module):
    def __init__(self, c, rngs):
        self.gate_proj = nnx.Linear(c.hidden_size, c.intermediate_size, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(c.hidden_size, c.intermediate_size, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(c.intermediate_size, c.hidden_size, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3DecoderLayer(nnx.Module):
    def __init__(self, c, rngs):
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Qwen3Attention(c, rngs)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = Qwen3MLP(c, rngs)

    def __call__(self, x, cos, sin, keep):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, keep)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Model(nnx.Module):
    def __init__(self, c, rngs):
        self.c = c
        self.embed_tokens = nnx.Embed(c.vocab_size, c.hidden_size, rngs=rngs)
        self.layers = nnx.List([Qwen3DecoderLayer(c, rngs) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def __call__(self, input_ids, attention_mask):
        x = self.embed_tokens(input_ids)
        T, hd = input_ids.shape[1], self.c.head_dim
        ft = jnp.promote_types(x.dtype, jnp.float32)
        inv_freq = 1.0 / (self.c.rope_parameters["rope_theta"] ** (jnp.arange(0, hd, 2, dtype=ft) / hd))
        ang = jnp.outer(jnp.arange(T, dtype=ft), inv_freq)
        ang = jnp.concatenate((ang, ang), axis=-1)[None, :, None, :]
        cos, sin = jnp.cos(ang).astype(x.dtype), jnp.sin(ang).astype(x.dtype)
        causal = jnp.tril(jnp.ones((T, T), dtype=bool))
        keep = causal[None, None] & attention_mask.astype(bool)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, cos, sin, keep)
        return self.norm(x)


class Qwen3ForCausalLMPort(nnx.Module):
    def __init__(self, c, rngs):
        self.model = Qwen3Model(c, rngs)
        self.lm_head = nnx.Linear(c.hidden_size, c.vocab_size, use_bias=False, rngs=rngs)

    def __call__(self, input_ids, attention_mask):
        return self.lm_head(self.model(input_ids, attention_mask))


jax_model = Qwen3ForCausalLMPort(conf, nnx.Rngs(3))

ids = np.random.default_rng(913).integers(3, 48, size=(2, 10))
batch = {"input_ids": ids.astype(np.int64),
         "attention_mask": np.array([[1] * 10, [1] * 8 + [0] * 2], dtype=np.int64)}


def torch_loss(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    labels = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels.flatten(), ignore_index=-100)


def jax_loss(model, batch):
    logits = up(model(batch["input_ids"], batch["attention_mask"]))
    valid = batch["attention_mask"][:, 1:].astype(logits.dtype)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], batch["input_ids"][:, 1:])
    return jnp.sum(nll * valid) / jnp.sum(valid)


def torch_optimizer(params):
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.05, eps=1e-4)


jax_optimizer = optax.adamw(3e-3, eps=1e-4, weight_decay=0.05)
