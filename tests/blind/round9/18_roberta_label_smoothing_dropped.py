"""EXPECTED: label_smoothing_dropped
WHERE: loss
LINES: 159-159
RELATION: none
HF RobertaForSequenceClassification (padding_idx 1 position ids, right padding, <s> classification head, label smoothing 0.1) ported by hand: the port's cross-entropy uses hard one-hot targets where torch's loss has label_smoothing=0.1.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import RobertaConfig, RobertaForSequenceClassification

torch.manual_seed(44)
V, D, NH, F, P, NCLS, PAD = 40, 16, 2, 24, 20, 3, 1
DH = D // NH
EPS = 1e-5
LS = 0.1

config = RobertaConfig(vocab_size=V, hidden_size=D, num_hidden_layers=1, num_attention_heads=NH, intermediate_size=F,
                       max_position_embeddings=P, type_vocab_size=1, hidden_act="gelu", layer_norm_eps=EPS,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=PAD, num_labels=NCLS,
                       attn_implementation="sdpa")
torch_model = RobertaForSequenceClassification(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "LayerNorm.weight" in name:
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.15, 0.15)
        elif "embeddings" in name:
            p.normal_(0.0, 0.4)
        else:
            p.normal_(0.0, 0.3)


class RobertaEmbeddings(nnx.Module):
    def __init__(self, rngs):
        self.word_embeddings = nnx.Embed(V, D, rngs=rngs)
        self.position_embeddings = nnx.Embed(P, D, rngs=rngs)
        self.token_type_embeddings = nnx.Embed(1, D, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, ids):
        not_pad = (ids != PAD).astype(jnp.int32)
        position_ids = jnp.cumsum(not_pad, axis=1) * not_pad + PAD
        x = self.word_embeddings(ids) + self.token_type_embeddings(jnp.zeros_like(ids))
        x = x + self.position_embeddings(position_ids)
        return self.LayerNorm(x)


class RobertaSelfAttention(nnx.Module):
    def __init__(self, rngs):
        self.query = nnx.Linear(D, D, rngs=rngs)
        self.key = nnx.Linear(D, D, rngs=rngs)
        self.value = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x, key_mask):
        b, t, _ = x.shape
        q, k, v = (m(x).reshape(b, t, NH, DH) for m in (self.query, self.key, self.value))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(DH).astype(x.dtype)
        s = jnp.where(key_mask[:, None, None, :], s, jnp.finfo(s.dtype).min)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(b, t, D)


class DenseNorm(nnx.Module):
    def __init__(self, d_in, rngs):
        self.dense = nnx.Linear(d_in, D, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, h, residual):
        return self.LayerNorm(self.dense(h) + residual)


class RobertaAttention(nnx.Module):
    def __init__(self, rngs):
        self.self = RobertaSelfAttention(rngs)
        self.output = DenseNorm(D, rngs)

    def __call__(self, x, key_mask):
        return self.output(self.self(x, key_mask), x)


class Intermediate(nnx.Module):
    def __init__(self, rngs):
        self.dense = nnx.Linear(D, F, rngs=rngs)

    def __call__(self, x):
        return jax.nn.gelu(self.dense(x), approximate=False)


class RobertaLayer(nnx.Module):
    def __init__(self, rngs):
        self.attention = RobertaAttention(rngs)
        self.intermediate = Intermediate(rngs)
        self.output = DenseNorm(F, rngs)

    def __call__(self, x, key_mask):
        x = self.attention(x, key_mask)
        return self.output(self.intermediate(x), x)


class RobertaEncoder(nnx.Module):
    def __init__(self, rngs):
        self.layer = nnx.List([RobertaLayer(rngs)])


class RobertaModel(nnx.Module):
    def __init__(self, rngs):
        self.embeddings = RobertaEmbeddings(rngs)
        self.encoder = RobertaEncoder(rngs)

    def __call__(self, ids, key_mask):
        x = self.embeddings(ids)
        for layer in self.encoder.layer:
            x = layer(x, key_mask)
        return x


class ClassificationHead(nnx.Module):
    def __init__(self, rngs):
        self.dense = nnx.Linear(D, D, rngs=rngs)
        self.out_proj = nnx.Linear(D, NCLS, rngs=rngs)

    def __call__(self, h):
        x = h[:, 0, :]
        x = jnp.tanh(self.dense(x))
        return self.out_proj(x)


class RobertaClassifier(nnx.Module):
    def __init__(self, rngs):
        self.roberta = RobertaModel(rngs)
        self.classifier = ClassificationHead(rngs)

    def __call__(self, ids, key_mask):
        return self.classifier(self.roberta(ids, key_mask))


jax_model = RobertaClassifier(nnx.Rngs(0))

B, T = 3, 8
lengths = np.array([8, 5, 6])
attention_mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
ids = np.random.default_rng(44).integers(3, V, size=(B, T)).astype(np.int64)
ids[:, 0] = 0  # <s>
ids = np.where(attention_mask == 1, ids, PAD)
batch = {"input_ids": ids, "attention_mask": attention_mask, "labels": np.array([2, 0, 1], dtype=np.int64)}


def torch_loss(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return torch.nn.functional.cross_entropy(logits, batch["labels"], label_smoothing=LS)


def jax_loss(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"].astype(bool))
    target = jax.nn.one_hot(batch["labels"], NCLS, dtype=logits.dtype)
    return optax.softmax_cross_entropy(logits, target).mean()


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=1e-2, betas=(0.9, 0.98), eps=1e-3)


jax_optimizer = optax.adam(1e-2, b1=0.9, b2=0.98, eps=1e-3)
