"""EXPECTED: rotary_layout
WHERE: model.layers.0.self_attn
The port applies RoPE to interleaved pairs (2i, 2i+1), with each angle repeated per pair, where HF Qwen2 rotates the two halves of each head (i, i + head_dim/2).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import Qwen2Config, Qwen2ForCausalLM

torch.manual_seed(506)
rng = np.random.default_rng(506)
V, D, NH, NKV, F, L, B, T = 48, 32, 4, 2, 40, 2, 2, 8
DH = D // NH
THETA, EPS = 10000.0, 1e-6

config = Qwen2Config(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
                     num_attention_heads=NH, num_key_value_heads=NKV, max_position_embeddings=64,
                     rms_norm_eps=EPS, rope_parameters={"rope_type": "default", "rope_theta": THETA},
                     use_sliding_window=False, attention_dropout=0.0, tie_word_embeddings=False,
                     bos_token_id=0, eos_token_id=0, pad_token_id=0)
torch_model = Qwen2ForCausalLM(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if name.endswith("norm.weight"):
            p.uniform_(0.6, 1.4)
        elif "embed_tokens" in name:
            p.normal_(0.0, 0.5)
        elif name.endswith("bias"):
            p.normal_(0.0, 0.4)
        else:
            p.normal_(0.0, 0.3)


class Qwen2Attention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(D, NH * DH, use_bias=True, rngs=rngs)
        self.k_proj = nnx.Linear(D, NKV * DH, use_bias=True, rngs=rngs)
        self.v_proj = nnx.Linear(D, NKV * DH, use_bias=True, rngs=rngs)
        self.o_proj = nnx.Linear(NH * DH, D, use_bias=False, rngs=rngs)

    def __call__(self, x, cos, sin, allowed):
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, NH, DH)
        k = self.k_proj(x).reshape(b, t, NKV, DH)
        v = self.v_proj(x).reshape(b, t, NKV, DH)
        rot = lambda a: jnp.stack([-a[..., 1::2], a[..., 0::2]], axis=-1).reshape(a.shape)  # noqa: E731
        q = q * cos + rot(q) * sin
        k = k * cos + rot(k) * sin
        k = jnp.repeat(k, NH // NKV, axis=2)
        v = jnp.repeat(v, NH // NKV, axis=2)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.asarray(DH, x.dtype))
        s = jnp.where(allowed, s, -1e30)
        p = jax.nn.softmax(s, axis=-1)
        return self.o_proj(jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, t, NH * DH))


class Qwen2MLP(nnx.Module):
    def __init__(self, rngs):
        self.gate_proj = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(F, D, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(nnx.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen2DecoderLayer(nnx.Module):
    def __init__(self, rngs):
        self.input_layernorm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)
        self.self_attn = Qwen2Attention(rngs)
        self.post_attention_layernorm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)
        self.mlp = Qwen2MLP(rngs)

    def __call__(self, x, cos, sin, allowed):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2Model(nnx.Module):
    def __init__(self, rngs):
        self.embed_tokens = nnx.Embed(V, D, rngs=rngs)
        self.layers = nnx.List([Qwen2DecoderLayer(rngs) for _ in range(L)])
        self.norm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, ids, key_mask):
        t = ids.shape[1]
        x = self.embed_tokens(ids)
        inv_freq = THETA ** (-jnp.arange(0, DH, 2, dtype=x.dtype) / DH)
        ang = jnp.arange(t, dtype=x.dtype)[:, None] * inv_freq[None, :]
        ang = jnp.repeat(ang, 2, axis=-1)[None, :, None, :]  # [1, T, 1, DH], pairs (2i, 2i+1)
        cos, sin = jnp.cos(ang), jnp.sin(ang)
        allowed = jnp.tril(jnp.ones((t, t), dtype=bool))[None, None] & key_mask[:, None, None, :]
        for layer in self.layers:
            x = layer(x, cos, sin, allowed)
        return self.norm(x)


class Qwen2ForCausalLMPort(nnx.Module):
    def __init__(self, rngs):
        self.model = Qwen2Model(rngs)
        self.lm_head = nnx.Linear(D, V, use_bias=False, rngs=rngs)

    def __call__(self, ids, key_mask):
        return self.lm_head(self.model(ids, key_mask))


jax_model = Qwen2ForCausalLMPort(nnx.Rngs(0))

lengths = np.array([8, 6])
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
    return (nll * w).sum() / w.sum()


def jax_loss(model, batch):
    ids, mask = batch["input_ids"], batch["attention_mask"]
    logits = model(ids, mask.astype(bool))
    logp = jax.nn.log_softmax(logits[:, :-1], -1)
    nll = -jnp.take_along_axis(logp, ids[:, 1:, None], -1)[..., 0]
    w = mask[:, 1:].astype(logits.dtype)
    return (nll * w).sum() / w.sum()


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=5e-3)


jax_optimizer = optax.adam(5e-3)
