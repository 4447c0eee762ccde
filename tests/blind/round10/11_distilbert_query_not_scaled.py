"""EXPECTED: attention_not_scaled
WHERE: distilbert.transformer.layer.0.attention
LINES: 56-56
RELATION: factor 2.82842712
HF DistilBertForSequenceClassification (post-LN block, q scaled by 1/sqrt(head_dim), padding mask, [CLS] -> pre_classifier -> ReLU -> classifier) ported by hand: the port leaves the queries unscaled where DistilBERT divides them by sqrt(head_dim) = sqrt(8).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import DistilBertConfig, DistilBertForSequenceClassification

torch.manual_seed(2020)
V, D, NH, FF, P, NCLS, PAD = 40, 16, 2, 32, 16, 3, 0
DH = D // NH
EPS = 1e-12

config = DistilBertConfig(vocab_size=V, max_position_embeddings=P, sinusoidal_pos_embds=False, n_layers=1, n_heads=NH,
                          dim=D, hidden_dim=FF, dropout=0.0, attention_dropout=0.0, activation="gelu",
                          seq_classif_dropout=0.0, pad_token_id=PAD, num_labels=NCLS, attn_implementation="sdpa")
torch_model = DistilBertForSequenceClassification(config).eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "layer_norm.weight" in name or "LayerNorm.weight" in name:
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.2, 0.2)
        elif "embeddings" in name:
            p.normal_(0.0, 0.5)
        else:
            p.normal_(0.0, 0.3)


class Embeddings(nnx.Module):
    def __init__(self, rngs):
        self.word_embeddings = nnx.Embed(V, D, rngs=rngs)
        self.position_embeddings = nnx.Embed(P, D, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, ids):
        position_ids = jnp.arange(ids.shape[1])[None, :]
        return self.LayerNorm(self.word_embeddings(ids) + self.position_embeddings(position_ids))


class MultiHeadSelfAttention(nnx.Module):
    def __init__(self, rngs):
        self.q_lin = nnx.Linear(D, D, rngs=rngs)
        self.k_lin = nnx.Linear(D, D, rngs=rngs)
        self.v_lin = nnx.Linear(D, D, rngs=rngs)
        self.out_lin = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x, key_mask):
        B, T, _ = x.shape
        q = self.q_lin(x).reshape(B, T, NH, DH)
        k = self.k_lin(x).reshape(B, T, NH, DH)
        v = self.v_lin(x).reshape(B, T, NH, DH)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k)
        scores = jnp.where(key_mask[:, None, None, :], scores, jnp.finfo(scores.dtype).min)
        w = jax.nn.softmax(scores, axis=-1)
        context = jnp.einsum("bhqk,bkhd->bhqd", w, v).transpose(0, 2, 1, 3).reshape(B, T, D)
        return self.out_lin(context)


class FFN(nnx.Module):
    def __init__(self, rngs):
        self.lin1 = nnx.Linear(D, FF, rngs=rngs)
        self.lin2 = nnx.Linear(FF, D, rngs=rngs)

    def __call__(self, x):
        return self.lin2(jax.nn.gelu(self.lin1(x), approximate=False))


class TransformerBlock(nnx.Module):
    def __init__(self, rngs):
        self.attention = MultiHeadSelfAttention(rngs)
        self.sa_layer_norm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)
        self.ffn = FFN(rngs)
        self.output_layer_norm = nnx.LayerNorm(D, epsilon=EPS, rngs=rngs)

    def __call__(self, x, key_mask):
        sa = self.sa_layer_norm(self.attention(x, key_mask) + x)
        return self.output_layer_norm(self.ffn(sa) + sa)


class Transformer(nnx.Module):
    def __init__(self, rngs):
        self.layer = nnx.List([TransformerBlock(rngs)])


class DistilBertModel(nnx.Module):
    def __init__(self, rngs):
        self.embeddings = Embeddings(rngs)
        self.transformer = Transformer(rngs)

    def __call__(self, ids, key_mask):
        x = self.embeddings(ids)
        for layer in self.transformer.layer:
            x = layer(x, key_mask)
        return x


class DistilBertClassifier(nnx.Module):
    def __init__(self, rngs):
        self.distilbert = DistilBertModel(rngs)
        self.pre_classifier = nnx.Linear(D, D, rngs=rngs)
        self.classifier = nnx.Linear(D, NCLS, rngs=rngs)

    def __call__(self, ids, key_mask):
        h = self.distilbert(ids, key_mask)[:, 0]
        return self.classifier(jax.nn.relu(self.pre_classifier(h)))


jax_model = DistilBertClassifier(nnx.Rngs(0))

B, T = 3, 8
lengths = np.array([8, 5, 6])
attention_mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
ids = np.random.default_rng(2020).integers(2, V, size=(B, T)).astype(np.int64)
ids = np.where(attention_mask == 1, ids, PAD)
batch = {"input_ids": ids, "attention_mask": attention_mask, "labels": np.array([2, 0, 1], dtype=np.int64)}


def torch_loss(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return torch.nn.functional.cross_entropy(logits, batch["labels"])


def jax_loss(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"].astype(bool))
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, batch["labels"][:, None], axis=1))


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-2)


jax_optimizer = optax.chain(optax.add_decayed_weights(1e-2), optax.sgd(0.1, momentum=0.9))
