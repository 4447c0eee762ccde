"""EXPECTED: position_ids_offset
WHERE: bert.embeddings
LINES: 45-45
RELATION: shift axis 1
HF BertForMaskedLM (sentence pairs, right padding, tied decoder) ported by hand: the port looks up position embeddings at 1..T (a RoBERTa-style padding offset) where BERT's position_ids are 0..T-1.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import BertConfig, BertForMaskedLM

torch.manual_seed(0)
rng = np.random.default_rng(0)
V, D, NH, F, L, P, B, T = 40, 16, 2, 24, 1, 16, 3, 7
DH = D // NH
EPS = 1e-12

config = BertConfig(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=NH, intermediate_size=F,
                    max_position_embeddings=P, type_vocab_size=2, hidden_act="gelu", layer_norm_eps=EPS,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)
torch_model = BertForMaskedLM(config).eval()  # decoder tied to word_embeddings, bias = cls.predictions.bias
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "LayerNorm.weight" in name:
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.1, 0.1)
        elif "embeddings" in name:
            p.normal_(0.0, 0.3)
        else:
            p.normal_(0.0, 0.2)


class Embeddings(nnx.Module):
    def __init__(self, rngs):
        self.word_embeddings = nnx.Embed(V, D, rngs=rngs)
        self.position_embeddings = nnx.Embed(P, D, rngs=rngs)
        self.token_type_embeddings = nnx.Embed(2, D, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, ids, token_type_ids):
        pos = self.position_embeddings(jnp.arange(1, ids.shape[1] + 1))[None]
        x = self.word_embeddings(ids) + pos
        x = x + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(x)


class SelfAttention(nnx.Module):
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


class DenseNorm(nnx.Module):  # BertSelfOutput / BertOutput: dense, residual, LayerNorm
    def __init__(self, d_in, rngs):
        self.dense = nnx.Linear(d_in, D, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, h, residual):
        return self.LayerNorm(self.dense(h) + residual)


class Attention(nnx.Module):
    def __init__(self, rngs):
        self.self = SelfAttention(rngs)
        self.output = DenseNorm(D, rngs)

    def __call__(self, x, key_mask):
        return self.output(self.self(x, key_mask), x)


class Intermediate(nnx.Module):
    def __init__(self, rngs):
        self.dense = nnx.Linear(D, F, rngs=rngs)

    def __call__(self, x):
        return jax.nn.gelu(self.dense(x), approximate=False)


class Layer(nnx.Module):
    def __init__(self, rngs):
        self.attention = Attention(rngs)
        self.intermediate = Intermediate(rngs)
        self.output = DenseNorm(F, rngs)

    def __call__(self, x, key_mask):
        x = self.attention(x, key_mask)
        return self.output(self.intermediate(x), x)


class Encoder(nnx.Module):
    def __init__(self, rngs):
        self.layer = nnx.List([Layer(rngs) for _ in range(L)])

    def __call__(self, x, key_mask):
        for layer in self.layer:
            x = layer(x, key_mask)
        return x


class Bert(nnx.Module):
    def __init__(self, rngs):
        self.embeddings = Embeddings(rngs)
        self.encoder = Encoder(rngs)

    def __call__(self, ids, token_type_ids, key_mask):
        return self.encoder(self.embeddings(ids, token_type_ids), key_mask)


class Transform(nnx.Module):
    def __init__(self, rngs):
        self.dense = nnx.Linear(D, D, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, x):
        return self.LayerNorm(jax.nn.gelu(self.dense(x), approximate=False))


class Predictions(nnx.Module):
    def __init__(self, rngs):
        self.transform = Transform(rngs)
        self.bias = nnx.Param(jnp.zeros((V,)))

    def __call__(self, x, word_embeddings):
        return word_embeddings.attend(self.transform(x)) + self.bias.value  # tied decoder


class MLMHead(nnx.Module):
    def __init__(self, rngs):
        self.predictions = Predictions(rngs)


class BertMLM(nnx.Module):
    def __init__(self, rngs):
        self.bert = Bert(rngs)
        self.cls = MLMHead(rngs)

    def __call__(self, ids, token_type_ids, key_mask):
        h = self.bert(ids, token_type_ids, key_mask)
        return self.cls.predictions(h, self.bert.embeddings.word_embeddings)


jax_model = BertMLM(nnx.Rngs(0))

lengths = np.array([7, 5, 6])
ids = rng.integers(1, V, size=(B, T)).astype(np.int64)
attention_mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
ids = ids * attention_mask  # pad id 0
labels = np.full((B, T), -100, dtype=np.int64)
for b, picks in enumerate([[1, 4], [2], [0, 3, 5]]):
    labels[b, picks] = ids[b, picks]
batch = {
    "input_ids": ids,
    "token_type_ids": (np.arange(T)[None, :] >= np.array([3, 2, 4])[:, None]).astype(np.int64) * attention_mask,
    "attention_mask": attention_mask,
    "labels": labels,  # -100 = not a masked-LM target
}


def torch_loss(model, batch):
    logits = model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                   attention_mask=batch["attention_mask"]).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), batch["labels"].reshape(-1))  # ignore_index=-100


def jax_loss(model, batch):
    logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"].astype(bool))
    labels = batch["labels"]
    valid = labels != -100
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.where(valid, labels, 0))
    return (nll * valid).sum() / valid.sum()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


jax_optimizer = optax.sgd(0.1, momentum=0.9)
