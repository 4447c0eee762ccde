"""EXPECTED: hidden_scaled
WHERE: gpt_neox
LINES: 87-87
RELATION: factor 5.65685425
HF GPTNeoXForCausalLM (parallel residual, partial rotary, fused per-head qkv) ported by hand: the port multiplies the token embeddings by sqrt(hidden_size) (a Gemma/T5 habit) where GPT-NeoX uses them unscaled.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

torch.manual_seed(511)
rng = np.random.default_rng(511)
V, D, NH, F, L, B, T = 40, 32, 2, 64, 2, 3, 7
DH = D // NH
ROT = int(DH * 0.25)  # rotary dims per head: 4 of 16
THETA, EPS = 10000.0, 1e-5

config = GPTNeoXConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=NH,
                       intermediate_size=F, rotary_pct=0.25, rotary_emb_base=THETA, layer_norm_eps=EPS,
                       use_parallel_residual=True, hidden_act="gelu", attention_dropout=0.0, hidden_dropout=0.0,
                       max_position_embeddings=64, tie_word_embeddings=False)
torch_model = GPTNeoXForCausalLM(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "layernorm" in name or "layer_norm" in name:
            (p.uniform_(0.6, 1.4) if name.endswith("weight") else p.uniform_(-0.3, 0.3))
        elif name.endswith("bias"):
            p.normal_(0.0, 0.3)
        else:
            p.normal_(0.0, 0.3)


def rotate_half(a):
    h = a.shape[-1] // 2
    return jnp.concatenate([-a[..., h:], a[..., :h]], axis=-1)


class NeoXAttention(nnx.Module):
    def __init__(self, rngs):
        self.query_key_value = nnx.Linear(D, 3 * D, rngs=rngs)
        self.dense = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x, cos, sin, allowed):
        b, t, _ = x.shape
        qkv = self.query_key_value(x).reshape(b, t, NH, 3 * DH)  # per head: q | k | v
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q = jnp.concatenate([q[..., :ROT] * cos + rotate_half(q[..., :ROT]) * sin, q[..., ROT:]], axis=-1)
        k = jnp.concatenate([k[..., :ROT] * cos + rotate_half(k[..., :ROT]) * sin, k[..., ROT:]], axis=-1)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * DH ** -0.5
        s = jnp.where(allowed, s, -1e30)
        p = jax.nn.softmax(s, axis=-1)
        return self.dense(jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, t, D))


class NeoXMLP(nnx.Module):
    def __init__(self, rngs):
        self.dense_h_to_4h = nnx.Linear(D, F, rngs=rngs)
        self.dense_4h_to_h = nnx.Linear(F, D, rngs=rngs)

    def __call__(self, x):
        return self.dense_4h_to_h(jax.nn.gelu(self.dense_h_to_4h(x), approximate=False))


class NeoXLayer(nnx.Module):
    def __init__(self, rngs):
        self.input_layernorm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)
        self.post_attention_layernorm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)
        self.attention = NeoXAttention(rngs)
        self.mlp = NeoXMLP(rngs)

    def __call__(self, x, cos, sin, allowed):  # parallel residual: both branches read x
        return x + self.attention(self.input_layernorm(x), cos, sin, allowed) + self.mlp(self.post_attention_layernorm(x))


class NeoXModel(nnx.Module):
    def __init__(self, rngs):
        self.embed_in = nnx.Embed(V, D, rngs=rngs)
        self.layers = nnx.List([NeoXLayer(rngs) for _ in range(L)])
        self.final_layer_norm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, ids, key_mask):
        t = ids.shape[1]
        x = self.embed_in(ids) * D ** 0.5
        inv_freq = THETA ** (-jnp.arange(0, ROT, 2, dtype=x.dtype) / ROT)
        ang = jnp.arange(t, dtype=x.dtype)[:, None] * inv_freq[None, :]
        ang = jnp.concatenate([ang, ang], axis=-1)[None, :, None, :]  # [1, T, 1, ROT]
        cos, sin = jnp.cos(ang), jnp.sin(ang)
        allowed = jnp.tril(jnp.ones((t, t), dtype=bool))[None, None] & key_mask[:, None, None, :]
        for layer in self.layers:
            x = layer(x, cos, sin, allowed)
        return self.final_layer_norm(x)


class NeoXForCausalLM(nnx.Module):
    def __init__(self, rngs):
        self.gpt_neox = NeoXModel(rngs)
        self.lm_head = nnx.Linear(D, V, use_bias=False, rngs=rngs)

    def __call__(self, ids, key_mask):
        return self.lm_head(self.gpt_neox(ids, key_mask))


jax_model = NeoXForCausalLM(nnx.Rngs(0))

lengths = np.array([7, 7, 5])
batch = {
    "input_ids": rng.integers(0, V, size=(B, T)).astype(np.int64),
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
    # SGD, not Adam: the key bias on the non-rotary dims cancels in the softmax (true gradient 0), and Adam
    # would blow its rounding noise up to a full step
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


jax_optimizer = optax.sgd(0.1, momentum=0.9)
