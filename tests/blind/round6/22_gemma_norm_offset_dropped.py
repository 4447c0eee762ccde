"""EXPECTED: norm_offset_dropped
WHERE: model.layers.0.input_layernorm
LINES: 45-45
HF GemmaForCausalLM (tied lm_head, AdamW) ported by hand: the port's RMSNorm multiplies the normalised input by the norm's weight where Gemma multiplies by 1 + weight.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import GemmaConfig, GemmaForCausalLM

torch.manual_seed(922)
gcfg = GemmaConfig(
    vocab_size=50, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=1, head_dim=16, hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
    max_position_embeddings=64, rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    attention_bias=False, attention_dropout=0.0, tie_word_embeddings=True,
    pad_token_id=0, bos_token_id=2, eos_token_id=1, attn_implementation="sdpa",
)
torch_model = GemmaForCausalLM(gcfg).eval()
with torch.no_grad():
    for n, w in torch_model.named_parameters():
        if "norm" in n:
            w.uniform_(-0.5, 0.5)  # Gemma norms start at 0 (the scale is 1 + weight)
        elif "embed_tokens" in n:
            w.normal_(0.0, 0.12)
        else:
            w.normal_(0.0, 0.15)


def as_f32(x):
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


class GemmaRMSNorm(nnx.Module):
    def __init__(self, dim, eps=1e-6):
        self.scale = nnx.Param(jnp.zeros((dim,), jnp.float32))
        self.eps = eps

    def __call__(self, x):
        h = as_f32(x)
        h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + self.eps)
        h = h * as_f32(self.scale[...])
        return h.astype(x.dtype)


class GemmaAttention(nnx.Module):
    def __init__(self, c: GemmaConfig, rngs: nnx.Rngs):
        self.n, self.kv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        mk = lambda i, o: nnx.Linear(i, o, use_bias=False, rngs=rngs)  # noqa: E731
        self.q_proj = mk(c.hidden_size, self.n * self.hd)
        self.k_proj = mk(c.hidden_size, self.kv * self.hd)
        self.v_proj = mk(c.hidden_size, self.kv * self.hd)
        self.o_proj = mk(self.n * self.hd, c.hidden_size)

    def __call__(self, x, rope, mask):
        cos, sin = rope
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, self.n, self.hd)
        k = self.k_proj(x).reshape(b, t, self.kv, self.hd)
        v = self.v_proj(x).reshape(b, t, self.kv, self.hd)

        def apply(a):
            a1, a2 = jnp.split(a, 2, axis=-1)
            return a * cos + jnp.concatenate([-a2, a1], axis=-1) * sin

        q, k = apply(q), apply(k)
        k = jnp.repeat(k, self.n // self.kv, axis=2)
        v = jnp.repeat(v, self.n // self.kv, axis=2)
        s = jnp.einsum("bqnd,bknd->bnqk", q * self.hd ** -0.5, k)
        s = jnp.where(mask, s, jnp.finfo(s.dtype).min)
        p = jax.nn.softmax(as_f32(s), axis=-1).astype(v.dtype)
        y = jnp.einsum("bnqk,bknd->bqnd", p, v)
        return self.o_proj(y.reshape(b, t, self.n * self.hd))


class GemmaMLP(nnx.Module):
    def __init__(self, c: GemmaConfig, rngs: nnx.Rngs):
        self.gate_proj = nnx.Linear(c.hidden_size, c.intermediate_size, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(c.hidden_size, c.intermediate_size, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(c.intermediate_size, c.hidden_size, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(jax.nn.gelu(self.gate_proj(x), approximate=True) * self.up_proj(x))


class GemmaDecoderLayer(nnx.Module):
    def __init__(self, c: GemmaConfig, rngs: nnx.Rngs):
        self.input_layernorm = GemmaRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = GemmaAttention(c, rngs)
        self.post_attention_layernorm = GemmaRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = GemmaMLP(c, rngs)

    def __call__(self, x, rope, mask):
        x = x + self.self_attn(self.input_layernorm(x), rope, mask)
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


class GemmaModel(nnx.Module):
    def __init__(self, c: GemmaConfig, rngs: nnx.Rngs):
        self.hidden, self.hd, self.theta = c.hidden_size, c.head_dim, c.rope_parameters["rope_theta"]
        self.embed_tokens = nnx.Embed(c.vocab_size, c.hidden_size, rngs=rngs)
        self.layers = nnx.List([GemmaDecoderLayer(c, rngs) for _ in range(c.num_hidden_layers)])
        self.norm = GemmaRMSNorm(c.hidden_size, c.rms_norm_eps)

    def __call__(self, input_ids, attention_mask):
        x = self.embed_tokens(input_ids)
        x = x * jnp.asarray(self.hidden ** 0.5, dtype=x.dtype)  # HF: embed_scale.to(weight.dtype)
        t = input_ids.shape[1]
        ft = jnp.promote_types(x.dtype, jnp.float32)
        inv = 1.0 / (self.theta ** (jnp.arange(0, self.hd, 2, dtype=ft) / self.hd))
        fr = jnp.arange(t, dtype=ft)[:, None] * inv[None, :]
        emb = jnp.concatenate([fr, fr], axis=-1)[None, :, None, :]
        rope = (jnp.cos(emb).astype(x.dtype), jnp.sin(emb).astype(x.dtype))
        mask = (jnp.arange(t)[None, :] <= jnp.arange(t)[:, None])[None, None]
        mask = mask & (attention_mask[:, None, None, :] == 1)
        for layer in self.layers:
            x = layer(x, rope, mask)
        return self.norm(x)


class GemmaForCausalLMPort(nnx.Module):
    def __init__(self, c: GemmaConfig, rngs: nnx.Rngs):
        self.model = GemmaModel(c, rngs)  # tied head: no lm_head of its own

    def __call__(self, input_ids, attention_mask):
        return self.model.embed_tokens.attend(self.model(input_ids, attention_mask))


jax_model = GemmaForCausalLMPort(gcfg, nnx.Rngs(22))

r = np.random.default_rng(922)
batch = {"input_ids": r.integers(3, 50, size=(2, 10)).astype(np.int64),
         "attention_mask": np.array([[1] * 10, [1] * 8 + [0] * 2], dtype=np.int64)}


def torch_loss(model, batch):
    ids, am = batch["input_ids"], batch["attention_mask"]
    logits = model(input_ids=ids, attention_mask=am).logits
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    tgt = ids[:, 1:].masked_fill(am[:, 1:] == 0, -100)
    return torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), tgt, ignore_index=-100)


def jax_loss(model, batch):
    ids, am = batch["input_ids"], batch["attention_mask"]
    logits = as_f32(model(ids, am))[:, :-1]
    lp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(lp, ids[:, 1:, None], axis=-1)[..., 0]
    m = am[:, 1:].astype(nll.dtype)
    return jnp.sum(nll * m) / jnp.sum(m)


def torch_optimizer(params):
    return torch.optim.AdamW(params, lr=2e-3, weight_decay=0.1)


jax_optimizer = optax.adamw(2e-3, weight_decay=0.1)
