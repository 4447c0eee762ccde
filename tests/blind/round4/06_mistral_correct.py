"""EXPECTED: correct
WHERE: module
Correct port: HF MistralForCausalLM (GQA 4 query / 2 kv heads, rope_theta 1e6), hand-written attention with rotary cos/sin tables built inline once per forward, padded batch.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import MistralConfig, MistralForCausalLM

torch.manual_seed(406)
rng = np.random.default_rng(406)
V, D, NH, NKV, F, L, B, T = 40, 32, 4, 2, 48, 2, 3, 8
DH = D // NH
THETA, EPS = 1000000.0, 1e-6

config = MistralConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
                       num_attention_heads=NH, num_key_value_heads=NKV, head_dim=DH, max_position_embeddings=64,
                       rms_norm_eps=EPS, rope_parameters={"rope_type": "default", "rope_theta": THETA},
                       sliding_window=None, attention_dropout=0.0, tie_word_embeddings=False,
                       bos_token_id=0, eos_token_id=0, pad_token_id=0)
torch_model = MistralForCausalLM(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if name.endswith("norm.weight"):
            p.uniform_(0.6, 1.4)
        elif "embed_tokens" in name:
            p.normal_(0.0, 0.5)
        else:
            p.normal_(0.0, 0.3)


class MistralAttention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(D, NH * DH, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(D, NKV * DH, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(D, NKV * DH, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(NH * DH, D, use_bias=False, rngs=rngs)

    def __call__(self, x, cos, sin, allowed):
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, NH, DH)
        k = self.k_proj(x).reshape(b, t, NKV, DH)
        v = self.v_proj(x).reshape(b, t, NKV, DH)
        half = DH // 2
        rot = lambda a: jnp.concatenate([-a[..., half:], a[..., :half]], axis=-1)  # noqa: E731
        q = q * cos + rot(q) * sin
        k = k * cos + rot(k) * sin
        k = jnp.repeat(k, NH // NKV, axis=2)
        v = jnp.repeat(v, NH // NKV, axis=2)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.asarray(DH, x.dtype))
        s = jnp.where(allowed, s, -1e30)
        p = jax.nn.softmax(s, axis=-1)
        return self.o_proj(jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, t, NH * DH))


class MistralMLP(nnx.Module):
    def __init__(self, rngs):
        self.gate_proj = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(F, D, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(nnx.silu(self.gate_proj(x)) * self.up_proj(x))


class MistralDecoderLayer(nnx.Module):
    def __init__(self, rngs):
        self.input_layernorm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)
        self.self_attn = MistralAttention(rngs)
        self.post_attention_layernorm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)
        self.mlp = MistralMLP(rngs)

    def __call__(self, x, cos, sin, allowed):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
        return x + self.mlp(self.post_attention_layernorm(x))


class MistralModel(nnx.Module):
    def __init__(self, rngs):
        self.embed_tokens = nnx.Embed(V, D, rngs=rngs)
        self.layers = nnx.List([MistralDecoderLayer(rngs) for _ in range(L)])
        self.norm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, ids, key_mask):
        t = ids.shape[1]
        x = self.embed_tokens(ids)
        # rotary tables, inline: angle[pos, i] = pos * THETA ** (-2i / DH), duplicated for the two halves
        inv_freq = THETA ** (-jnp.arange(0, DH, 2, dtype=x.dtype) / DH)
        ang = jnp.arange(t, dtype=x.dtype)[:, None] * inv_freq[None, :]
        ang = jnp.concatenate([ang, ang], axis=-1)[None, :, None, :]  # [1, T, 1, DH]
        cos, sin = jnp.cos(ang), jnp.sin(ang)
        allowed = jnp.tril(jnp.ones((t, t), dtype=bool))[None, None] & key_mask[:, None, None, :]
        for layer in self.layers:
            x = layer(x, cos, sin, allowed)
        return self.norm(x)


class MistralForCausalLM_(nnx.Module):
    def __init__(self, rngs):
        self.model = MistralModel(rngs)
        self.lm_head = nnx.Linear(D, V, use_bias=False, rngs=rngs)

    def __call__(self, ids, key_mask):
        return self.lm_head(self.model(ids, key_mask))


jax_model = MistralForCausalLM_(nnx.Rngs(0))

lengths = np.array([8, 7, 5])
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
