"""EXPECTED: activation_swapped
WHERE: model.layers.0.mlp
LINES: 93-93
HF LlamaForCausalLM ported by hand (SGD, Nesterov momentum): the port's gated MLP applies exact GELU to gate_proj where Llama (hidden_act="silu") applies SiLU.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(628)
rng = np.random.default_rng(628)
VOCAB, HID, HEADS, KV_HEADS, FFN, LAYERS = 40, 32, 4, 2, 48, 2
HEAD_DIM = HID // HEADS
ROPE_THETA, NORM_EPS = 10000.0, 1e-5

cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HID, intermediate_size=FFN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=64,
                  rms_norm_eps=NORM_EPS, rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
                  attention_bias=False, mlp_bias=False, tie_word_embeddings=False, attention_dropout=0.0,
                  hidden_act="silu", bos_token_id=0, eos_token_id=0, pad_token_id=0, attn_implementation="sdpa")
torch_model = LlamaForCausalLM(cfg).eval()
with torch.no_grad():
    for pname, p in torch_model.named_parameters():
        if "norm" in pname:
            p.uniform_(0.5, 1.5)
        elif "embed" in pname:
            p.normal_(0.0, 0.6)
        else:
            p.normal_(0.0, 0.25)


def _up(x):  # float32 where HF computes in float32; float64 stays float64
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


class RMSNorm(nnx.Module):
    def __init__(self, dim, eps):
        self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))
        self.eps = eps

    def __call__(self, x):
        h = _up(x)
        h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + self.eps)
        return self.scale[...] * h.astype(x.dtype)


def rotary(seq_len, dtype):
    inv = 1.0 / ROPE_THETA ** (jnp.arange(0, HEAD_DIM, 2, dtype=jnp.promote_types(dtype, jnp.float32)) / HEAD_DIM)
    ang = jnp.arange(seq_len, dtype=inv.dtype)[:, None] * inv[None, :]
    ang = jnp.concatenate([ang, ang], axis=-1)
    return jnp.cos(ang).astype(dtype), jnp.sin(ang).astype(dtype)


def rotate_half(x):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)


class LlamaAttention(nnx.Module):
    def __init__(self, *, rngs):
        self.q_proj = nnx.Linear(HID, HEADS * HEAD_DIM, use_bias=False, rngs=rngs)
        self.k_proj = nnx.Linear(HID, KV_HEADS * HEAD_DIM, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(HID, KV_HEADS * HEAD_DIM, use_bias=False, rngs=rngs)
        self.o_proj = nnx.Linear(HEADS * HEAD_DIM, HID, use_bias=False, rngs=rngs)

    def __call__(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, HEADS, HEAD_DIM).transpose(0, 2, 1, 3)
        k = self.k_proj(x).reshape(b, t, KV_HEADS, HEAD_DIM).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(b, t, KV_HEADS, HEAD_DIM).transpose(0, 2, 1, 3)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = jnp.repeat(k, HEADS // KV_HEADS, axis=1)
        v = jnp.repeat(v, HEADS // KV_HEADS, axis=1)
        scores = (q @ k.transpose(0, 1, 3, 2)) * (HEAD_DIM ** -0.5)
        scores = jnp.where(mask, scores, -1e30)
        probs = jax.nn.softmax(_up(scores), axis=-1).astype(v.dtype)
        out = (probs @ v).transpose(0, 2, 1, 3).reshape(b, t, HEADS * HEAD_DIM)
        return self.o_proj(out)


class LlamaMLP(nnx.Module):
    def __init__(self, *, rngs):
        self.gate_proj = nnx.Linear(HID, FFN, use_bias=False, rngs=rngs)
        self.up_proj = nnx.Linear(HID, FFN, use_bias=False, rngs=rngs)
        self.down_proj = nnx.Linear(FFN, HID, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(jax.nn.gelu(self.gate_proj(x), approximate=False) * self.up_proj(x))


class LlamaDecoderLayer(nnx.Module):
    def __init__(self, *, rngs):
        self.self_attn = LlamaAttention(rngs=rngs)
        self.mlp = LlamaMLP(rngs=rngs)
        self.input_layernorm = RMSNorm(HID, NORM_EPS)
        self.post_attention_layernorm = RMSNorm(HID, NORM_EPS)

    def __call__(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


class LlamaModel(nnx.Module):
    def __init__(self, *, rngs):
        self.embed_tokens = nnx.Embed(VOCAB, HID, rngs=rngs)
        self.layers = nnx.List([LlamaDecoderLayer(rngs=rngs) for _ in range(LAYERS)])
        self.norm = RMSNorm(HID, NORM_EPS)

    def __call__(self, input_ids, attention_mask):
        x = self.embed_tokens(input_ids)
        t = input_ids.shape[1]
        cos, sin = rotary(t, x.dtype)
        mask = jnp.tril(jnp.ones((t, t), bool))[None, None] & attention_mask.astype(bool)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x)


class LlamaForCausalLM_NNX(nnx.Module):
    def __init__(self, *, rngs):
        self.model = LlamaModel(rngs=rngs)
        self.lm_head = nnx.Linear(HID, VOCAB, use_bias=False, rngs=rngs)

    def __call__(self, input_ids, attention_mask):
        return self.lm_head(self.model(input_ids, attention_mask))


jax_model = LlamaForCausalLM_NNX(rngs=nnx.Rngs(28))

SEQ = 10
batch = {
    "input_ids": rng.integers(1, VOCAB, size=(2, SEQ)).astype(np.int64),
    "attention_mask": np.array([[1] * SEQ, [1] * 7 + [0] * 3], dtype=np.int64),
}


def torch_loss(model, batch):
    ids, am = batch["input_ids"], batch["attention_mask"]
    logits = model(input_ids=ids, attention_mask=am).logits
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1), reduction="none")
    w = am[:, 1:].reshape(-1).to(nll.dtype)
    return (nll * w).sum() / w.sum()


def jax_loss(model, batch):
    ids, am = batch["input_ids"], batch["attention_mask"]
    logits = _up(model(ids, am))
    nll = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], ids[:, 1:])
    w = am[:, 1:].astype(nll.dtype)
    return (nll * w).sum() / w.sum()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True)


jax_optimizer = optax.sgd(0.05, momentum=0.9, nesterov=True)
