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
from transformers import OPTConfig, OPTForCausalLM

torch.manual_seed(1010)
V, D, NH, FF, P, PAD = 48, 16, 2, 32, 16, 1
HD = D // NH
OFFSET = 2  # OPT's learned positions are stored two rows down

config = OPTConfig(vocab_size=V, hidden_size=D, num_hidden_layers=1, ffn_dim=FF, num_attention_heads=NH,
                   max_position_embeddings=P, do_layer_norm_before=True, word_embed_proj_dim=D, dropout=0.0,
                   attention_dropout=0.0, activation_function="relu", enable_bias=True, pad_token_id=PAD,
                   attn_implementation="sdpa")
torch_model = OPTForCausalLM(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "layer_norm.weight" in name:
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.2, 0.2)
        elif "embed" in name:
            p.normal_(0.0, 0.5)
        else:
            p.normal_(0.0, 0.3)


class OPTAttention(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(D, D, rngs=rngs)
        self.k_proj = nnx.Linear(D, D, rngs=rngs)
        self.v_proj = nnx.Linear(D, D, rngs=rngs)
        self.out_proj = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x, allowed):
        B, T, _ = x.shape
        q = self.q_proj(x) * HD ** -0.5
        k = self.k_proj(x)
        v = self.v_proj(x)
        q, k, v = (a.reshape(B, T, NH, HD) for a in (q, k, v))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k)
        scores = jnp.where(allowed, scores, jnp.finfo(scores.dtype).min)
        o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v).reshape(B, T, D)
        return self.out_proj(o)


class OPTDecoderLayer(nnx.Module):
    def __init__(self, rngs):
        self.self_attn = OPTAttention(rngs)
        self.self_attn_layer_norm = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.fc1 = nnx.Linear(D, FF, rngs=rngs)
        self.fc2 = nnx.Linear(FF, D, rngs=rngs)
        self.final_layer_norm = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)

    def __call__(self, x, allowed):
        x = x + self.self_attn(self.self_attn_layer_norm(x), allowed)
        x = x + self.fc2(jax.nn.relu(self.fc1(self.final_layer_norm(x))))
        return x


class OPTDecoder(nnx.Module):
    def __init__(self, rngs):
        self.embed_tokens = nnx.Embed(V, D, rngs=rngs)
        self.embed_positions = nnx.Embed(P + OFFSET, D, rngs=rngs)
        self.layers = nnx.List([OPTDecoderLayer(rngs)])
        self.final_layer_norm = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)

    def __call__(self, ids, mask):
        T = ids.shape[1]
        position_ids = jnp.cumsum(mask, axis=1) * mask - 1 + OFFSET
        x = self.embed_tokens(ids) + self.embed_positions(position_ids)
        qi, ki = jnp.arange(T)[:, None], jnp.arange(T)[None, :]
        allowed = (ki <= qi)[None, None] & (mask[:, None, None, :] == 1)
        for layer in self.layers:
            x = layer(x, allowed)
        return self.final_layer_norm(x)


class OPTModel(nnx.Module):
    def __init__(self, rngs):
        self.decoder = OPTDecoder(rngs)


class OPTForCausalLMPort(nnx.Module):
    def __init__(self, rngs):
        self.model = OPTModel(rngs)

    def __call__(self, ids, mask):
        h = self.model.decoder(ids, mask)
        return self.model.decoder.embed_tokens.attend(h)  # lm_head tied to embed_tokens


jax_model = OPTForCausalLMPort(nnx.Rngs(0))

B, T = 2, 8
lengths = np.array([8, 6])
attention_mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
ids = np.random.default_rng(1010).integers(3, V, size=(B, T)).astype(np.int64)
ids = np.where(attention_mask == 1, ids, PAD)
labels = np.where(attention_mask == 1, ids, -100)
batch = {"input_ids": ids, "attention_mask": attention_mask, "labels": labels}


def torch_loss(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), batch["labels"][:, 1:].reshape(-1), ignore_index=-100)


def jax_loss(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"])
    logits, labels = logits[:, :-1], batch["labels"][:, 1:]
    valid = labels != -100
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.where(valid, labels, 0))
    return jnp.sum(nll * valid) / jnp.sum(valid)


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=3e-3, eps=1e-4, weight_decay=0.01)


jax_optimizer = optax.chain(optax.add_decayed_weights(0.01), optax.adam(3e-3, eps=1e-4))
