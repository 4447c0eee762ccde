"""EXPECTED: correct
WHERE: none
LINES: none
Correct port of HF LlamaForCausalLM with stock nnx.RMSNorm / nnx.Linear / nnx.Embed and jax.nn.dot_product_attention (float32 softmax inside).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(610)
rng = np.random.default_rng(610)
V, D, NH, NKV, F, L, B, T = 48, 32, 4, 2, 64, 2, 2, 12
DH = D // NH
THETA, EPS = 10000.0, 1e-6

config = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
                     num_attention_heads=NH, num_key_value_heads=NKV, head_dim=DH, max_position_embeddings=64,
                     rms_norm_eps=EPS, rope_parameters={"rope_type": "default", "rope_theta": THETA},
                     attn_implementation="eager", tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0)
torch_model = LlamaForCausalLM(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if name.endswith("norm.weight"):
            p.uniform_(0.6, 1.4)  # perturbed from the default
        elif "embed_tokens" in name:
            p.normal_(0.0, 1.0)  # hidden states of RMS about 1, a trained model's scale
        elif name.endswith("bias"):
            p.uniform_(-0.5, 0.5)
        else:
            p.normal_(0.0, 0.25)


def rotate_half(a):
    half = a.shape[-1] // 2
    return jnp.concatenate([-a[..., half:], a[..., :half]], axis=-1)


def rotary_tables(t, dtype):
    """HF's rotary table: float32 positions and frequencies, cos / sin cast to the activations' dtype."""
    inv_freq = 1.0 / (THETA ** (jnp.arange(0, DH, 2, dtype=jnp.float32) / DH))
    pos = jnp.arange(t, dtype=jnp.float32)
    ang = pos[:, None] * inv_freq[None, :]
    emb = jnp.concatenate([ang, ang], axis=-1)[None, :, None, :]  # [1, T, 1, DH]
    return jnp.cos(emb).astype(dtype), jnp.sin(emb).astype(dtype)


class Attention(nnx.Module):
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
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = jnp.repeat(k, NH // NKV, axis=2)
        v = jnp.repeat(v, NH // NKV, axis=2)
        o = jax.nn.dot_product_attention(q, k, v, mask=allowed)  # its softmax runs in float32
        return self.o_proj(o.reshape(b, t, NH * DH))


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.gate_proj = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(D, F, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(F, D, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    def __init__(self, rngs):
        self.input_layernorm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)
        self.self_attn = Attention(rngs)
        self.post_attention_layernorm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)
        self.mlp = MLP(rngs)

    def __call__(self, x, cos, sin, allowed):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nnx.Module):
    def __init__(self, rngs):
        self.embed_tokens = nnx.Embed(V, D, rngs=rngs)
        self.layers = nnx.List([DecoderLayer(rngs) for _ in range(L)])
        self.norm = nnx.RMSNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, ids, key_mask):
        t = ids.shape[1]
        x = self.embed_tokens(ids)
        cos, sin = rotary_tables(t, x.dtype)
        allowed = jnp.tril(jnp.ones((t, t), dtype=bool))[None, None] & key_mask[:, None, None, :]
        for layer in self.layers:
            x = layer(x, cos, sin, allowed)
        return self.norm(x)


class ForCausalLM(nnx.Module):
    def __init__(self, rngs):
        self.model = Model(rngs)
        self.lm_head = nnx.Linear(D, V, use_bias=False, rngs=rngs)

    def __call__(self, input_ids, attention_mask):
        h = self.model(input_ids, attention_mask.astype(bool))
        return self.lm_head(h)


jax_model = ForCausalLM(nnx.Rngs(0))

lengths = np.array([T, T - 3])
batch = {
    "input_ids": rng.integers(1, V, size=(B, T)).astype(np.int64),
    "attention_mask": (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64),  # right padding
}


def torch_loss(model, batch):
    ids, mask = batch["input_ids"], batch["attention_mask"]
    logits = model(input_ids=ids, attention_mask=mask).logits
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # HF's loss upcasts the logits
    nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]
    w = mask[:, 1:].float()
    return (nll * w).sum() / w.sum()


def jax_loss(model, batch):
    ids, mask = batch["input_ids"], batch["attention_mask"]
    logits = model(ids, mask)
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1)[..., 0]
    w = mask[:, 1:].astype(jnp.float32)
    return (nll * w).sum() / w.sum()


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=5e-3)


jax_optimizer = optax.adam(5e-3)
