"""EXPECTED: sliding_window_off_by_one
WHERE: model.layers.0.self_attn
LINES: 75-75
RELATION: mask
HF Gemma2ForCausalLM (attention and final soft-capping, sliding/full layers, sandwich norms, tied head) ported by hand: the sliding layer's band keeps keys with j >= i - 6 (7 keys) where HF keeps j > i - 6 (6 keys).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import Gemma2Config, Gemma2ForCausalLM

torch.manual_seed(1023)
C = Gemma2Config(
    vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=64,
    rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    attention_bias=False, attention_dropout=0.0, query_pre_attn_scalar=16, sliding_window=6,
    layer_types=["sliding_attention", "full_attention"], final_logit_softcapping=3.0,
    attn_logit_softcapping=20.0, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    attn_implementation="eager",
)
torch_model = Gemma2ForCausalLM(C).eval()
with torch.no_grad():
    for nm, prm in torch_model.named_parameters():
        if "norm" in nm:
            prm.uniform_(-0.4, 0.6)
        elif "embed" in nm:
            prm.normal_(0.0, 0.5)
        else:
            prm.normal_(0.0, 0.3)


def upcast(a):
    return a.astype(jnp.promote_types(a.dtype, jnp.float32))


class Gemma2RMSNorm(nnx.Module):
    def __init__(self, dim, eps):
        self.scale = nnx.Param(jnp.zeros((dim,), jnp.float32))
        self.eps = eps

    def __call__(self, x):
        y = upcast(x)
        y = y * jax.lax.rsqrt(jnp.mean(y ** 2, axis=-1, keepdims=True) + self.eps)
        return (y * (1.0 + upcast(self.scale[...]))).astype(x.dtype)


class Gemma2Attention(nnx.Module):
    def __init__(self, c, layer_type, rngs):
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.scaling = c.query_pre_attn_scalar ** -0.5
        self.cap = c.attn_logit_softcapping
        self.window = c.sliding_window if layer_type == "sliding_attention" else None
        self.q_proj = nnx.Linear(c.hidden_size, self.nh * self.hd, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(c.hidden_size, self.nkv * self.hd, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(c.hidden_size, self.nkv * self.hd, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(self.nh * self.hd, c.hidden_size, use_bias=False, rngs=rngs)

    def __call__(self, x, cos, sin, key_ok):
        B, T, _ = x.shape
        q = self.q_proj(x).reshape(B, T, self.nh, self.hd).transpose(0, 2, 1, 3)
        k = self.k_proj(x).reshape(B, T, self.nkv, self.hd).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(B, T, self.nkv, self.hd).transpose(0, 2, 1, 3)
        h = self.hd // 2
        q = q * cos + jnp.concatenate([-q[..., h:], q[..., :h]], -1) * sin
        k = k * cos + jnp.concatenate([-k[..., h:], k[..., :h]], -1) * sin
        k, v = jnp.repeat(k, self.nh // self.nkv, 1), jnp.repeat(v, self.nh // self.nkv, 1)
        s = jnp.tanh(jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * self.scaling / self.cap) * self.cap
        i, j = jnp.arange(T)[:, None], jnp.arange(T)[None, :]
        ok = j <= i
        if self.window is not None:
            ok = ok & (j >= i - self.window)
        ok = ok[None, None] & key_ok[:, None, None, :]
        s = jnp.where(ok, s, jnp.finfo(s.dtype).min)
        p = jax.nn.softmax(upcast(s), axis=-1).astype(v.dtype)
        o = jnp.matmul(p, v).transpose(0, 2, 1, 3).reshape(B, T, self.nh * self.hd)
        return self.o_proj(o)


class Gemma2MLP(nnx.Module):
    def __init__(self, c, rngs):
        self.gate_proj = nnx.Linear(c.hidden_size, c.intermediate_size, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(c.hidden_size, c.intermediate_size, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(c.intermediate_size, c.hidden_size, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(nnx.gelu(self.gate_proj(x), approximate=True) * self.up_proj(x))


class Gemma2DecoderLayer(nnx.Module):
    def __init__(self, c, layer_type, rngs):
        self.self_attn = Gemma2Attention(c, layer_type, rngs)
        self.mlp = Gemma2MLP(c, rngs)
        self.input_layernorm = Gemma2RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = Gemma2RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.pre_feedforward_layernorm = Gemma2RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_feedforward_layernorm = Gemma2RMSNorm(c.hidden_size, c.rms_norm_eps)

    def __call__(self, x, cos, sin, key_ok):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin, key_ok))
        x = x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))
        return x


class Gemma2Model(nnx.Module):
    def __init__(self, c, rngs):
        self.c = c
        self.embed_tokens = nnx.Embed(c.vocab_size, c.hidden_size, rngs=rngs)
        self.layers = nnx.List([Gemma2DecoderLayer(c, lt, rngs) for lt in c.layer_types])
        self.norm = Gemma2RMSNorm(c.hidden_size, c.rms_norm_eps)

    def __call__(self, input_ids, attention_mask):
        x = self.embed_tokens(input_ids) * jnp.asarray(self.c.hidden_size ** 0.5, self.embed_tokens.embedding.dtype)
        T, hd = input_ids.shape[1], self.c.head_dim
        ft = jnp.promote_types(x.dtype, jnp.float32)
        inv = 1.0 / (self.c.rope_parameters["rope_theta"] ** (jnp.arange(0, hd, 2, dtype=ft) / hd))
        ang = jnp.arange(T, dtype=ft)[:, None] * inv[None, :]
        ang = jnp.concatenate([ang, ang], -1)
        cos, sin = jnp.cos(ang).astype(x.dtype), jnp.sin(ang).astype(x.dtype)
        key_ok = attention_mask.astype(bool)
        for layer in self.layers:
            x = layer(x, cos, sin, key_ok)
        return self.norm(x)


class Gemma2ForCausalLMPort(nnx.Module):
    def __init__(self, c, rngs):
        self.final_cap = c.final_logit_softcapping
        self.model = Gemma2Model(c, rngs)

    def __call__(self, input_ids, attention_mask):
        logits = self.model.embed_tokens.attend(self.model(input_ids, attention_mask))
        return jnp.tanh(logits / self.final_cap) * self.final_cap


jax_model = Gemma2ForCausalLMPort(C, nnx.Rngs(23))

_g = np.random.default_rng(1023)
batch = {"input_ids": _g.integers(3, 40, size=(2, 10)).astype(np.int64),
         "attention_mask": np.array([[1] * 10, [1] * 9 + [0]], dtype=np.int64)}


def torch_loss(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))[:, :-1]
    labels = batch["input_ids"][:, 1:]
    keep = batch["attention_mask"][:, 1:].to(logits.dtype)
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
    return (nll * keep.reshape(-1)).sum() / keep.sum()


def jax_loss(model, batch):
    logits = upcast(model(batch["input_ids"], batch["attention_mask"]))[:, :-1]
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["input_ids"][:, 1:])
    keep = batch["attention_mask"][:, 1:].astype(nll.dtype)
    return (nll * keep).sum() / keep.sum()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.2)


jax_optimizer = optax.sgd(0.2)
