"""EXPECTED: attention_bias_on_output
WHERE: model.layers.0.self_attn.o_proj
LINES: 61-61
HF Qwen2ForCausalLM ported by hand (Adam): the port's o_proj carries a bias of its own (zero-initialised, then trained) where Qwen2's o_proj has none (only q/k/v have biases).
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import Qwen2Config, Qwen2ForCausalLM

SEED = 630
torch.manual_seed(SEED)
np_rng = np.random.default_rng(SEED)

V, D, H, KVH, FF, NL = 56, 48, 6, 2, 64, 2
HD, G = D // H, H // KVH
THETA, EPS = 1000000.0, 1e-6

torch_model = Qwen2ForCausalLM(Qwen2Config(
    vocab_size=V, hidden_size=D, intermediate_size=FF, num_hidden_layers=NL, num_attention_heads=H,
    num_key_value_heads=KVH, max_position_embeddings=128, rms_norm_eps=EPS,
    rope_parameters={"rope_type": "default", "rope_theta": THETA}, use_sliding_window=False,
    attention_dropout=0.0, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0,
    attn_implementation="sdpa")).eval()
with torch.no_grad():
    for n, p in torch_model.named_parameters():
        if n.endswith("layernorm.weight") or n == "model.norm.weight":
            p.copy_(torch.empty_like(p).uniform_(0.7, 1.3))
        elif n.endswith(".bias"):
            p.normal_(0.0, 0.3)
        elif "embed_tokens" in n:
            p.normal_(0.0, 0.7)
        else:
            p.normal_(0.0, 0.2)


def f32_up(a):
    return a.astype(jnp.promote_types(a.dtype, jnp.float32))


class Qwen2RMSNorm(nnx.Module):
    def __init__(self, n, eps=EPS):
        self.scale = nnx.Param(jnp.ones(n, jnp.float32))
        self.eps = eps

    def __call__(self, x):
        y = f32_up(x)
        y = y / jnp.sqrt(jnp.mean(jnp.square(y), -1, keepdims=True) + self.eps)
        return self.scale.value * y.astype(x.dtype)


class Qwen2Attention(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        lin = lambda i, o, b: nnx.Linear(i, o, use_bias=b, rngs=rngs)  # noqa: E731
        self.q_proj, self.k_proj, self.v_proj = lin(D, H * HD, True), lin(D, KVH * HD, True), lin(D, KVH * HD, True)
        self.o_proj = lin(H * HD, D, True)

    def __call__(self, x, cos, sin, allowed):
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, KVH, G, HD)
        k = self.k_proj(x).reshape(b, t, KVH, HD)
        v = self.v_proj(x).reshape(b, t, KVH, HD)

        def rope(a, c, s):
            a1, a2 = a[..., : HD // 2], a[..., HD // 2:]
            return a * c + jnp.concatenate([-a2, a1], -1) * s

        q = rope(q, cos[:, :, None, None], sin[:, :, None, None])
        k = rope(k, cos[:, :, None], sin[:, :, None])
        logits = jnp.einsum("bqkgd,bskd->bkgqs", q, k) / math.sqrt(HD)
        logits = jnp.where(allowed[:, None, None], logits, jnp.finfo(jnp.float32).min)
        w = jax.nn.softmax(f32_up(logits), axis=-1).astype(v.dtype)
        o = jnp.einsum("bkgqs,bskd->bqkgd", w, v).reshape(b, t, H * HD)
        return self.o_proj(o)


class Qwen2MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.gate_proj = nnx.Linear(D, FF, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(D, FF, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(FF, D, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(nnx.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen2DecoderLayer(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.input_layernorm = Qwen2RMSNorm(D)
        self.self_attn = Qwen2Attention(rngs)
        self.post_attention_layernorm = Qwen2RMSNorm(D)
        self.mlp = Qwen2MLP(rngs)

    def __call__(self, h, cos, sin, allowed):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, allowed)
        return h + self.mlp(self.post_attention_layernorm(h))


class Qwen2Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.embed_tokens = nnx.Embed(V, D, rngs=rngs)
        self.layers = nnx.List([Qwen2DecoderLayer(rngs) for _ in range(NL)])
        self.norm = Qwen2RMSNorm(D)

    def __call__(self, input_ids, attention_mask):
        h = self.embed_tokens(input_ids)
        t = input_ids.shape[1]
        ftype = jnp.promote_types(h.dtype, jnp.float32)
        inv_freq = 1.0 / (THETA ** (jnp.arange(0, HD, 2, dtype=ftype) / HD))
        freqs = jnp.outer(jnp.arange(t, dtype=ftype), inv_freq)
        emb = jnp.concatenate([freqs, freqs], -1)[None]
        cos, sin = jnp.cos(emb).astype(h.dtype), jnp.sin(emb).astype(h.dtype)
        causal = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]
        allowed = causal[None] & (attention_mask[:, None, :] > 0)
        for layer in self.layers:
            h = layer(h, cos, sin, allowed)
        return self.norm(h)


class Qwen2ForCausalLMFlax(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.model = Qwen2Model(rngs)
        self.lm_head = nnx.Linear(D, V, use_bias=False, rngs=rngs)

    def __call__(self, input_ids, attention_mask):
        hidden = self.model(input_ids, attention_mask)
        return self.lm_head(hidden)


jax_model = Qwen2ForCausalLMFlax(nnx.Rngs(SEED))

T = 12
batch = dict(
    input_ids=np_rng.integers(1, V, size=(2, T)).astype(np.int64),
    attention_mask=np.stack([np.ones(T), (np.arange(T) < 9)]).astype(np.int64),
)


def torch_loss(model, batch):
    ids, am = batch["input_ids"], batch["attention_mask"]
    logits = model(input_ids=ids, attention_mask=am).logits
    logits = logits[:, :-1].to(torch.promote_types(logits.dtype, torch.float32))
    logp = torch.log_softmax(logits, dim=-1)
    tok = -logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    keep = am[:, 1:].to(tok.dtype)
    return (tok * keep).sum() / keep.sum()


def jax_loss(model, batch):
    ids, am = batch["input_ids"], batch["attention_mask"]
    logits = f32_up(model(ids, am)[:, :-1])
    logp = jax.nn.log_softmax(logits, axis=-1)
    tok = -jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1)[..., 0]
    keep = am[:, 1:].astype(tok.dtype)
    return (tok * keep).sum() / keep.sum()


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=2e-3)


jax_optimizer = optax.adam(2e-3)
