"""EXPECTED: topk_not_renormalised
WHERE: model.layers.0.mlp.gate
LINES: 77-78
HF MixtralForCausalLM (4 experts, top-2, experts "eager") ported by hand: the port's router uses the top-2 softmax probabilities as they are, where Mixtral divides them by their sum.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import MixtralConfig, MixtralForCausalLM

torch.manual_seed(709)
V, D, NH, NKV, F, E, TOPK, L = 48, 32, 4, 2, 24, 4, 2, 2
HD = D // NH
THETA, EPS = 10000.0, 1e-5
config = MixtralConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
                       num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD, max_position_embeddings=64,
                       num_local_experts=E, num_experts_per_tok=TOPK, router_jitter_noise=0.0,
                       output_router_logits=False, sliding_window=None, rms_norm_eps=EPS,
                       rope_parameters={"rope_type": "default", "rope_theta": THETA}, attention_dropout=0.0,
                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                       attn_implementation="sdpa", experts_implementation="eager")
torch_model = MixtralForCausalLM(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "layernorm" in name or name == "model.norm.weight":
            p.uniform_(0.6, 1.4)
        elif "mlp.gate." in name:
            p.normal_(0.0, 0.6)  # decisive routing: no near-ties in the top-2
        elif "embed" in name:
            p.normal_(0.0, 0.5)
        else:
            p.normal_(0.0, 0.25)

UP = lambda a: a.astype(jnp.promote_types(a.dtype, jnp.float32))  # noqa: E731  HF's float32 islands


class MixtralRMSNorm(nnx.Module):
    def __init__(self, dim):
        self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))

    def __call__(self, x):
        h = UP(x)
        h = h * jax.lax.rsqrt(jnp.mean(jnp.square(h), axis=-1, keepdims=True) + EPS)
        return self.scale[...] * h.astype(x.dtype)


class MixtralAttention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(D, NH * HD, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(D, NKV * HD, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(D, NKV * HD, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(NH * HD, D, use_bias=False, rngs=rngs)

    def __call__(self, x, cos, sin, allowed):
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, NH, HD)
        k = jnp.repeat(self.k_proj(x).reshape(b, t, NKV, HD), NH // NKV, axis=2)
        v = jnp.repeat(self.v_proj(x).reshape(b, t, NKV, HD), NH // NKV, axis=2)
        rh = lambda a: jnp.concatenate([-a[..., HD // 2:], a[..., : HD // 2]], axis=-1)  # noqa: E731
        q, k = q * cos + rh(q) * sin, k * cos + rh(k) * sin
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * HD ** -0.5
        s = jnp.where(allowed, s, -1e30)
        p = jax.nn.softmax(UP(s), axis=-1).astype(v.dtype)
        return self.o_proj(jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, t, NH * HD))


class MixtralTopKRouter(nnx.Module):
    def __init__(self):
        self.weight = nnx.Param(jnp.zeros((E, D), jnp.float32))  # HF's layout: [num_experts, hidden]

    def __call__(self, h):
        logits = h @ self.weight[...].T
        probs = jax.nn.softmax(UP(logits), axis=-1)
        top, idx = jax.lax.top_k(probs, TOPK)
        return logits, top, idx


class MixtralExperts(nnx.Module):
    def __init__(self):
        self.gate_up_proj = nnx.Param(jnp.zeros((E, 2 * F, D), jnp.float32))  # HF's fused layout
        self.down_proj = nnx.Param(jnp.zeros((E, D, F), jnp.float32))

    def __call__(self, h, idx, top):
        combine = jnp.sum(jax.nn.one_hot(idx, E, dtype=top.dtype) * top[..., None], axis=1)  # [N, E], 0 off the top-2
        out = jnp.zeros_like(h)
        for e in range(E):  # expert by expert, as HF's index_add_ does
            gate, up = jnp.split(h @ self.gate_up_proj[e].T, 2, axis=-1)
            y = (jax.nn.silu(gate) * up) @ self.down_proj[e].T
            out = out + (y * combine[:, e:e + 1]).astype(h.dtype)
        return out


class MixtralSparseMoeBlock(nnx.Module):
    def __init__(self):
        self.gate = MixtralTopKRouter()
        self.experts = MixtralExperts()

    def __call__(self, x):
        b, t, d = x.shape
        h = x.reshape(-1, d)
        _, top, idx = self.gate(h)
        return self.experts(h, idx, top).reshape(b, t, d)


class MixtralDecoderLayer(nnx.Module):
    def __init__(self, rngs):
        self.self_attn = MixtralAttention(rngs)
        self.mlp = MixtralSparseMoeBlock()
        self.input_layernorm = MixtralRMSNorm(D)
        self.post_attention_layernorm = MixtralRMSNorm(D)

    def __call__(self, x, cos, sin, allowed):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
        return x + self.mlp(self.post_attention_layernorm(x))


class MixtralModel(nnx.Module):
    def __init__(self, rngs):
        self.embed_tokens = nnx.Embed(V, D, rngs=rngs)
        self.layers = nnx.List([MixtralDecoderLayer(rngs) for _ in range(L)])
        self.norm = MixtralRMSNorm(D)

    def __call__(self, input_ids, attention_mask):
        x = self.embed_tokens(input_ids)
        t = input_ids.shape[1]
        ft = jnp.promote_types(x.dtype, jnp.float32)
        inv = 1.0 / THETA ** (jnp.arange(0, HD, 2, dtype=ft) / HD)
        ang = jnp.arange(t, dtype=ft)[:, None] * inv[None]
        ang = jnp.concatenate([ang, ang], -1)[None, :, None, :]
        cos, sin = jnp.cos(ang).astype(x.dtype), jnp.sin(ang).astype(x.dtype)
        allowed = jnp.tril(jnp.ones((t, t), bool))[None, None] & attention_mask.astype(bool)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, cos, sin, allowed)
        return self.norm(x)


class MixtralForCausalLMNNX(nnx.Module):
    def __init__(self, rngs):
        self.model = MixtralModel(rngs)
        self.lm_head = nnx.Linear(D, V, use_bias=False, rngs=rngs)

    def __call__(self, input_ids, attention_mask):
        return self.lm_head(self.model(input_ids, attention_mask))


jax_model = MixtralForCausalLMNNX(nnx.Rngs(9))

_r = np.random.default_rng(709)
batch = {"input_ids": _r.integers(3, V, size=(2, 8)).astype(np.int64),
         "attention_mask": np.array([[1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0, 0]], dtype=np.int64)}


def torch_loss(model, batch):
    ids, am = batch["input_ids"], batch["attention_mask"]
    logits = model(input_ids=ids, attention_mask=am).logits
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    nll = -torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    w = am[:, 1:].to(nll.dtype)
    return (nll * w).sum() / w.sum()


def jax_loss(model, batch):
    ids, am = batch["input_ids"], batch["attention_mask"]
    logits = UP(model(ids, am))
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1], -1), ids[:, 1:, None], -1)[..., 0]
    w = am[:, 1:].astype(nll.dtype)
    return (nll * w).sum() / w.sum()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


jax_optimizer = optax.sgd(0.1, momentum=0.9)
