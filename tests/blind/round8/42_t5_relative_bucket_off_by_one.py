"""EXPECTED: relative_bucket_off_by_one
WHERE: t5.encoder.block.0.layer.0.SelfAttention
LINES: 60-60
RELATION: none
HF T5EncoderModel (relative position buckets 8 / max distance 16, no attention scaling, right padding) under a token-tagging head, ported by hand: the port sends relative position 0 to the 'key after query' half of the buckets (rel >= 0) where T5 uses rel > 0, so the diagonal reads bucket 4 instead of bucket 0.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import T5Config, T5EncoderModel

torch.manual_seed(815)
V, D, DKV, NH, DFF, L, NB, MAXD, NTAG = 40, 32, 8, 4, 48, 2, 8, 16, 5
cfg = T5Config(vocab_size=V, d_model=D, d_kv=DKV, d_ff=DFF, num_layers=L, num_heads=NH,
               relative_attention_num_buckets=NB, relative_attention_max_distance=MAXD, dropout_rate=0.0,
               layer_norm_epsilon=1e-6, feed_forward_proj="relu", is_encoder_decoder=False, use_cache=False,
               pad_token_id=0, attn_implementation="eager")


class TorchT5Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.t5 = T5EncoderModel(cfg)
        self.head = torch.nn.Linear(D, NTAG)

    def forward(self, input_ids, attention_mask):
        return self.head(self.t5(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state)


torch_model = TorchT5Tagger().eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "layer_norm" in name:
            p.uniform_(0.6, 1.4)
        elif "relative_attention_bias" in name:
            p.normal_(0.0, 1.0)
        elif name.endswith("bias"):
            p.uniform_(-0.2, 0.2)
        else:
            p.normal_(0.0, 0.3)


class T5LayerNorm(nnx.Module):
    def __init__(self, dim, eps=1e-6):
        self.scale = nnx.Param(jnp.ones((dim,), jnp.float32))
        self.eps = eps

    def __call__(self, x):
        var = jnp.mean(x.astype(jnp.float32) ** 2, axis=-1, keepdims=True)
        return self.scale[...] * (x * jax.lax.rsqrt(var + self.eps)).astype(self.scale[...].dtype)


def relative_position_bucket(rel, num_buckets=NB, max_distance=MAXD):
    num_buckets //= 2  # bidirectional: one half for keys after the query
    buckets = (rel >= 0).astype(np.int32) * num_buckets
    rel = jnp.abs(rel)
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    large = max_exact + (jnp.log(rel.astype(np.float32) / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).astype(np.int32)
    large = jnp.minimum(large, num_buckets - 1)
    return buckets + jnp.where(is_small, rel, large)


class T5Attention(nnx.Module):
    def __init__(self, has_bias, rngs):
        mk = lambda i, o: nnx.Linear(i, o, use_bias=False, rngs=rngs)  # noqa: E731
        self.q, self.k, self.v, self.o = mk(D, NH * DKV), mk(D, NH * DKV), mk(D, NH * DKV), mk(NH * DKV, D)
        if has_bias:
            self.relative_attention_bias = nnx.Embed(NB, NH, rngs=rngs)

    def compute_bias(self, t):
        ctx = jnp.arange(t)[:, None]
        mem = jnp.arange(t)[None, :]
        buckets = relative_position_bucket(mem - ctx)  # [q, k]
        return jnp.transpose(self.relative_attention_bias(buckets), (2, 0, 1))[None]  # [1, H, q, k]

    def __call__(self, x, key_ok, position_bias):
        b, t, _ = x.shape
        q, k, v = (m(x).reshape(b, t, NH, DKV) for m in (self.q, self.k, self.v))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k)
        s = s + position_bias
        s = jnp.where(key_ok[:, None, None, :], s, jnp.finfo(s.dtype).min)
        p = jax.nn.softmax(s, axis=-1)
        return self.o(jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, t, NH * DKV))


class T5LayerSelfAttention(nnx.Module):
    def __init__(self, has_bias, rngs):
        self.SelfAttention = T5Attention(has_bias, rngs)
        self.layer_norm = T5LayerNorm(D)

    def __call__(self, x, key_ok, position_bias):
        return x + self.SelfAttention(self.layer_norm(x), key_ok, position_bias)


class T5DenseReluDense(nnx.Module):
    def __init__(self, rngs):
        self.wi = nnx.Linear(D, DFF, use_bias=False, rngs=rngs)
        self.wo = nnx.Linear(DFF, D, use_bias=False, rngs=rngs)

    def __call__(self, x):
        return self.wo(jax.nn.relu(self.wi(x)))


class T5LayerFF(nnx.Module):
    def __init__(self, rngs):
        self.DenseReluDense = T5DenseReluDense(rngs)
        self.layer_norm = T5LayerNorm(D)

    def __call__(self, x):
        return x + self.DenseReluDense(self.layer_norm(x))


class T5Block(nnx.Module):
    def __init__(self, has_bias, rngs):
        self.layer = nnx.List([T5LayerSelfAttention(has_bias, rngs), T5LayerFF(rngs)])

    def __call__(self, x, key_ok, position_bias):
        return self.layer[1](self.layer[0](x, key_ok, position_bias))


class T5Stack(nnx.Module):
    def __init__(self, rngs):
        self.block = nnx.List([T5Block(i == 0, rngs) for i in range(L)])
        self.final_layer_norm = T5LayerNorm(D)

    def __call__(self, x, key_ok):
        position_bias = self.block[0].layer[0].SelfAttention.compute_bias(x.shape[1])  # block 0's, shared by all
        for blk in self.block:
            x = blk(x, key_ok, position_bias)
        return self.final_layer_norm(x)


class T5EncoderPort(nnx.Module):
    def __init__(self, rngs):
        self.shared = nnx.Embed(V, D, rngs=rngs)
        self.encoder = T5Stack(rngs)

    def __call__(self, ids, key_ok):
        return self.encoder(self.shared(ids), key_ok)


class T5Tagger(nnx.Module):
    def __init__(self, rngs):
        self.t5 = T5EncoderPort(rngs)
        self.head = nnx.Linear(D, NTAG, rngs=rngs)

    def __call__(self, ids, attention_mask):
        return self.head(self.t5(ids, attention_mask.astype(bool)))


jax_model = T5Tagger(nnx.Rngs(0))

_r = np.random.default_rng(815)
_mask = np.array([[1] * 10, [1] * 7 + [0] * 3], dtype=np.int64)
batch = {"input_ids": (_r.integers(1, V, size=(2, 10)) * _mask).astype(np.int64), "attention_mask": _mask,
         "tags": _r.integers(0, NTAG, size=(2, 10)).astype(np.int64)}


def torch_loss(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"])
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch["tags"], reduction="none")
    w = batch["attention_mask"].to(nll.dtype)
    return (nll * w).sum() / w.sum()


def jax_loss(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"])
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["tags"])
    w = batch["attention_mask"].astype(nll.dtype)
    return (nll * w).sum() / w.sum()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


jax_optimizer = optax.sgd(0.1, momentum=0.9)
