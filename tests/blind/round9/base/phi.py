"""EXPECTED: correct
WHERE: none
LINES: none
RELATION: none
SENTENCE
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import PhiConfig, PhiForCausalLM

torch.manual_seed(321)
conf = PhiConfig(
    vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    max_position_embeddings=64, layer_norm_eps=1e-5, hidden_act="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
    attention_dropout=0.0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    tie_word_embeddings=False, pad_token_id=0, attn_implementation="sdpa",
)
torch_model = PhiForCausalLM(conf).eval()
with torch.no_grad():
    for key, prm in torch_model.named_parameters():
        if "layernorm" in key and key.endswith("weight"):
            prm.uniform_(0.6, 1.5)
        elif key.endswith("bias"):
            prm.uniform_(-0.2, 0.2)
        else:
            prm.normal_(0.0, 0.5 if "embed" in key else 0.25)

NH, HD, ROT = 4, 8, 4  # rotary on the first 4 of the 8 head dims


class PhiAttention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(32, NH * HD, rngs=rngs)
        self.k_proj = nnx.Linear(32, NH * HD, rngs=rngs)
        self.v_proj = nnx.Linear(32, NH * HD, rngs=rngs)
        self.dense = nnx.Linear(NH * HD, 32, rngs=rngs)

    def rope(self, y, cos, sin):
        y_rot, y_pass = y[..., :ROT], y[..., ROT:]
        h = ROT // 2
        turned = jnp.concatenate((-y_rot[..., h:], y_rot[..., :h]), axis=-1)
        return jnp.concatenate((y_rot * cos + turned * sin, y_pass), axis=-1)

    def __call__(self, x, cos, sin, bias):
        B, T, _ = x.shape
        split = lambda y: y.reshape(B, T, NH, HD).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        w = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) / np.sqrt(HD) + bias
        w = jax.nn.softmax(w, axis=-1)
        o = jnp.matmul(w, v).transpose(0, 2, 1, 3).reshape(B, T, NH * HD)
        return self.dense(o)


class PhiMLP(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(32, 64, rngs=rngs)
        self.fc2 = nnx.Linear(64, 32, rngs=rngs)

    def __call__(self, x):
        return self.fc2(jax.nn.gelu(self.fc1(x), approximate=True))


class PhiDecoderLayer(nnx.Module):
    def __init__(self, rngs):
        self.input_layernorm = nnx.LayerNorm(32, epsilon=1e-5, rngs=rngs)
        self.self_attn = PhiAttention(rngs)
        self.mlp = PhiMLP(rngs)

    def __call__(self, x, cos, sin, bias):
        h = self.input_layernorm(x)
        return self.self_attn(h, cos, sin, bias) + self.mlp(h) + x


class PhiModel(nnx.Module):
    def __init__(self, rngs):
        self.embed_tokens = nnx.Embed(48, 32, rngs=rngs)
        self.layers = nnx.List([PhiDecoderLayer(rngs) for _ in range(2)])
        self.final_layernorm = nnx.LayerNorm(32, epsilon=1e-5, rngs=rngs)

    def __call__(self, input_ids, attention_mask):
        x = self.embed_tokens(input_ids)
        T = input_ids.shape[1]
        inv_freq = 1.0 / (10000.0 ** (jnp.arange(0, ROT, 2, dtype=x.dtype) / ROT))
        ang = jnp.arange(T, dtype=x.dtype)[:, None] * inv_freq[None, :]
        ang = jnp.concatenate((ang, ang), axis=-1)
        cos, sin = jnp.cos(ang), jnp.sin(ang)
        qi, ki = jnp.arange(T)[:, None], jnp.arange(T)[None, :]
        allowed = (ki <= qi)[None, None] & (attention_mask[:, None, None, :] == 1)
        bias = jnp.where(allowed, 0.0, jnp.finfo(x.dtype).min).astype(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, bias)
        return self.final_layernorm(x)


class PhiForCausalLMPort(nnx.Module):
    def __init__(self, rngs):
        self.model = PhiModel(rngs)
        self.lm_head = nnx.Linear(32, 48, rngs=rngs)

    def __call__(self, input_ids, attention_mask):
        return self.lm_head(self.model(input_ids, attention_mask))


jax_model = PhiForCausalLMPort(nnx.Rngs(5))

ids = np.random.default_rng(321).integers(3, 48, size=(2, 12))
batch = {"input_ids": ids.astype(np.int64),
         "attention_mask": np.array([[1] * 12, [1] * 9 + [0] * 3], dtype=np.int64)}


def torch_loss(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    labels = batch["input_ids"][:, 1:].masked_fill(batch["attention_mask"][:, 1:] == 0, -100)
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 48), labels.reshape(-1))


def jax_loss(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"])
    mask = batch["attention_mask"][:, 1:] == 1
    nll = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], batch["input_ids"][:, 1:])
    return jnp.where(mask, nll, 0.0).sum() / mask.sum()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


jax_optimizer = optax.sgd(0.1, momentum=0.9)
