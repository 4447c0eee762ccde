"""EXPECTED: stop_gradient
WHERE: model.layers.0.input_layernorm
LINES: 45-45
RELATION: none
HF MistralForCausalLM (sliding window 4, 1 kv head, 12 tokens, right padding) ported by hand: the port's RMSNorm wraps the mean of squares in jax.lax.stop_gradient (forward unchanged) where HF backpropagates through it.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import MistralConfig, MistralForCausalLM

torch.manual_seed(729)
WINDOW = 4
conf = MistralConfig(
    vocab_size=64, hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=1, head_dim=8, max_position_embeddings=64, rms_norm_eps=1e-5,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, sliding_window=WINDOW,
    attention_dropout=0.0, tie_word_embeddings=False, hidden_act="silu",
    bos_token_id=1, eos_token_id=2, pad_token_id=0, attn_implementation="sdpa",
)
torch_model = MistralForCausalLM(conf).eval()
with torch.no_grad():
    for key, prm in torch_model.named_parameters():
        if "norm" in key:
            prm.uniform_(0.6, 1.5)
        else:
            prm.normal_(0.0, 0.5 if "embed" in key else 0.22)


def hi(x):
    """float32 where HF upcasts (float64 stays float64)."""
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


class MistralRMSNorm(nnx.Module):
    def __init__(self, size, eps):
        self.scale = nnx.Param(jnp.ones((size,), jnp.float32))
        self.eps = eps

    def __call__(self, x):
        x32 = hi(x)
        x32 = x32 * jax.lax.rsqrt(jax.lax.stop_gradient(jnp.mean(x32 ** 2, axis=-1, keepdims=True)) + self.eps)
        return self.scale[...] * x32.astype(x.dtype)


class MistralAttention(nnx.Module):
    def __init__(self, c, rngs):
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nnx.Linear(c.hidden_size, self.nh * self.hd, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(c.hidden_size, self.nkv * self.hd, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(c.hidden_size, self.nkv * self.hd, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(self.nh * self.hd, c.hidden_size, use_bias=False, rngs=rngs)

    def __call__(self, x, cos, sin, keep):
        B, T, _ = x.shape
        heads = lambda y, n: y.reshape(B, T, n, self.hd).swapaxes(1, 2)  # noqa: E731
        q, k, v = heads(self.q_proj(x), self.nh), heads(self.k_proj(x), self.nkv), heads(self.v_proj(x), self.nkv)
        half = self.hd // 2
        rot = lambda y: jnp.concatenate((-y[..., half:], y[..., :half]), axis=-1)  # noqa: E731
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k = jnp.broadcast_to(k, (B, self.nh, T, self.hd))
        v = jnp.broadcast_to(v, (B, self.nh, T, self.hd))
        att = jnp.matmul(q, k.swapaxes(-1, -2)) * self.hd ** -0.5
        att = jnp.where(keep, att, jnp.finfo(att.dtype).min)
        att = jax.nn.softmax(hi(att), axis=-1).astype(v.dtype)
        y = jnp.matmul(att, v).swapaxes(1, 2).reshape(B, T, self.nh * self.hd)
        return self.o_proj(y)


class MistralMLP(nnx.Module):
    def __init__(self, c, rngs):
        self.gate_proj = nnx.Linear(c.hidden_size, c.intermediate_size, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(c.hidden_size, c.intermediate_size, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(c.intermediate_size, c.hidden_size, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(nnx.silu(self.gate_proj(x)) * self.up_proj(x))


class MistralDecoderLayer(nnx.Module):
    def __init__(self, c, rngs):
        self.input_layernorm = MistralRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = MistralAttention(c, rngs)
        self.post_attention_layernorm = MistralRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MistralMLP(c, rngs)

    def __call__(self, x, cos, sin, keep):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, keep)
        return x + self.mlp(self.post_attention_layernorm(x))


class MistralModel(nnx.Module):
    def __init__(self, c, rngs):
        self.c = c
        self.embed_tokens = nnx.Embed(c.vocab_size, c.hidden_size, rngs=rngs)
        self.layers = nnx.List([MistralDecoderLayer(c, rngs) for _ in range(c.num_hidden_layers)])
        self.norm = MistralRMSNorm(c.hidden_size, c.rms_norm_eps)

    def __call__(self, input_ids, attention_mask):
        x = self.embed_tokens(input_ids)
        T, hd = input_ids.shape[1], self.c.head_dim
        ft = jnp.promote_types(x.dtype, jnp.float32)
        inv = 1.0 / (self.c.rope_parameters["rope_theta"] ** (jnp.arange(0, hd, 2, dtype=ft) / hd))
        f = jnp.arange(T, dtype=ft)[:, None] * inv
        f = jnp.concatenate((f, f), axis=-1)
        cos, sin = jnp.cos(f).astype(x.dtype), jnp.sin(f).astype(x.dtype)
        qi, ki = jnp.arange(T)[:, None], jnp.arange(T)[None, :]
        band = (ki <= qi) & (qi - ki < self.c.sliding_window)
        keep = band[None, None] & attention_mask.astype(bool)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, cos, sin, keep)
        return self.norm(x)


class MistralForCausalLMPort(nnx.Module):
    def __init__(self, c, rngs):
        self.model = MistralModel(c, rngs)
        self.lm_head = nnx.Linear(c.hidden_size, c.vocab_size, use_bias=False, rngs=rngs)

    def __call__(self, input_ids, attention_mask):
        return self.lm_head(self.model(input_ids, attention_mask))


jax_model = MistralForCausalLMPort(conf, nnx.Rngs(7))

ids = np.random.default_rng(729).integers(3, 64, size=(2, 12))
batch = {"input_ids": ids.astype(np.int64),
         "attention_mask": np.array([[1] * 12, [1] * 10 + [0] * 2], dtype=np.int64)}


def torch_loss(model, batch):
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    out = out.to(torch.promote_types(out.dtype, torch.float32))
    labels = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
    return torch.nn.functional.cross_entropy(out[:, :-1].flatten(0, 1), labels.flatten(), ignore_index=-100)


def jax_loss(model, batch):
    out = hi(model(batch["input_ids"], batch["attention_mask"]))
    valid = batch["attention_mask"][:, 1:].astype(out.dtype)
    ce = optax.softmax_cross_entropy_with_integer_labels(out[:, :-1], batch["input_ids"][:, 1:])
    return jnp.sum(ce * valid) / jnp.sum(valid)


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=3e-3, weight_decay=0.02, eps=1e-6)


jax_optimizer = optax.chain(optax.add_decayed_weights(0.02), optax.adam(3e-3, eps=1e-6))
