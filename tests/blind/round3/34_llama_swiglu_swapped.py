"""EXPECTED: swiglu_swapped
WHERE: model.layers.0.mlp
The port applies SiLU to up_proj and multiplies by gate_proj (gate and up swapped).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(34)
rng = np.random.default_rng(34)
V, D, NH, NKV, F, L, B, T = 40, 16, 4, 2, 24, 1, 3, 7
DH = D // NH
THETA, EPS = 500000.0, 1e-5

config = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
                     num_attention_heads=NH, num_key_value_heads=NKV, max_position_embeddings=32,
                     rms_norm_eps=EPS, rope_parameters={"rope_type": "default", "rope_theta": THETA},
                     attention_dropout=0.0, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)
torch_model = LlamaForCausalLM(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if name.endswith("norm.weight"):
            p.uniform_(0.6, 1.4)
        elif "embed_tokens" in name:
            p.normal_(0.0, 0.02)
        else:
            p.normal_(0.0, 0.3)


def rotate_half(x):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)


def rope(x, positions):  # x [B, T, H, DH]; HF's rotate-half layout
    inv_freq = 1.0 / (THETA ** (jnp.arange(0, DH, 2, dtype=x.dtype) / DH))
    freqs = positions[:, None].astype(x.dtype) * inv_freq[None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    cos, sin = jnp.cos(emb)[None, :, None, :], jnp.sin(emb)[None, :, None, :]
    return x * cos + rotate_half(x) * sin


class Attention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(D, NH * DH, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(D, NKV * DH, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(D, NKV * DH, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(NH * DH, D, use_bias=False, rngs=rngs)

    def __call__(self, x, key_mask):
        b, t, _ = x.shape
        pos = jnp.arange(t)
        q = rope(self.q_proj(x).reshape(b, t, NH, DH), pos)
        k = rope(self.k_proj(x).reshape(b, t, NKV, DH), pos)
        v = self.v_proj(x).reshape(b, t, NKV, DH)
        k = jnp.repeat(k, NH // NKV, axis=2)  # query head h reads kv head h // (NH // NKV)
        v = jnp.repeat(v, NH // NKV, axis=2)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * DH ** -0.5
        allowed = jnp.tril(jnp.ones((t, t), dtype=bool))[None, None] & key_mask[:, None, None, :]
        s = jnp.where(allowed, s, -jnp.inf)
        ctx = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(b, t, NH * DH)
        return self.o_proj(ctx)


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.gate_proj = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(F, D, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(jax.nn.silu(self.up_proj(x)) * self.gate_proj(x))


class DecoderLayer(nnx.Module):
    def __init__(self, rngs):
        self.input_layernorm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)
        self.self_attn = Attention(rngs)
        self.post_attention_layernorm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)
        self.mlp = MLP(rngs)

    def __call__(self, x, key_mask):
        x = x + self.self_attn(self.input_layernorm(x), key_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nnx.Module):
    def __init__(self, rngs):
        self.embed_tokens = nnx.Embed(V, D, rngs=rngs)
        self.layers = nnx.List([DecoderLayer(rngs) for _ in range(L)])
        self.norm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, ids, key_mask):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, key_mask)
        return self.norm(x)


class LlamaLM(nnx.Module):
    def __init__(self, rngs):
        self.model = LlamaModel(rngs)
        self.lm_head = nnx.Linear(D, V, use_bias=False, rngs=rngs)

    def __call__(self, ids, key_mask):
        return self.lm_head(self.model(ids, key_mask))


jax_model = LlamaLM(nnx.Rngs(0))

lengths = np.array([7, 6, 4])
batch = {
    "input_ids": rng.integers(1, V, size=(B, T)).astype(np.int64),
    "attention_mask": (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64),  # right padding
}


def torch_loss(model, batch):
    ids, mask = batch["input_ids"], batch["attention_mask"]
    logits = model(input_ids=ids, attention_mask=mask).logits
    logp = torch.log_softmax(logits[:, :-1], -1)
    nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]
    w = mask[:, 1:].to(logits.dtype)
    return (nll * w).sum() / w.sum() + 0.01 * (logits ** 2).mean()


def jax_loss(model, batch):
    ids, mask = batch["input_ids"], batch["attention_mask"]
    logits = model(ids, mask.astype(bool))
    logp = jax.nn.log_softmax(logits[:, :-1], -1)
    nll = -jnp.take_along_axis(logp, ids[:, 1:, None], -1)[..., 0]
    w = mask[:, 1:].astype(logits.dtype)
    return (nll * w).sum() / w.sum() + 0.01 * jnp.mean(logits ** 2)


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=5e-3)


jax_optimizer = optax.adam(5e-3)
