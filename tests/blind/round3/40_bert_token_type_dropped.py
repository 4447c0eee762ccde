"""EXPECTED: token_type_dropped
WHERE: bert.embeddings
The port ignores token_type_ids: no token-type embedding is added to the word and position embeddings.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers import BertConfig, BertModel

torch.manual_seed(40)
rng = np.random.default_rng(40)
VOCAB, HIDDEN, HEADS, FFN, LAYERS, MAXPOS, TYPES, CLASSES = 30, 24, 3, 32, 2, 12, 2, 5
HEAD_DIM = HIDDEN // HEADS
LN_EPS = 1e-12

config = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                    intermediate_size=FFN, max_position_embeddings=MAXPOS, type_vocab_size=TYPES,
                    hidden_act="gelu", layer_norm_eps=LN_EPS, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0, pad_token_id=0)


class BertTagger(torch.nn.Module):
    """BertModel (no pooler) with a token-classification head."""

    def __init__(self):
        super().__init__()
        self.bert = BertModel(config, add_pooling_layer=False)
        self.classifier = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, input_ids, token_type_ids, attention_mask):
        h = self.bert(input_ids=input_ids, token_type_ids=token_type_ids,
                      attention_mask=attention_mask).last_hidden_state
        return self.classifier(h)


torch_model = BertTagger().eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "LayerNorm.weight" in name:
            p.normal_(1.0, 0.2)
        elif name.endswith("bias"):
            p.normal_(0.0, 0.05)
        elif "embeddings" in name:
            p.normal_(0.0, 0.003)  # small embeddings: the embedding LayerNorm sees a variance ~1e-5
        else:
            p.normal_(0.0, 0.15)


class BertEmbeddings(nnx.Module):
    def __init__(self, rngs):
        self.word_embeddings = nnx.Embed(VOCAB, HIDDEN, rngs=rngs)
        self.position_embeddings = nnx.Embed(MAXPOS, HIDDEN, rngs=rngs)
        self.token_type_embeddings = nnx.Embed(TYPES, HIDDEN, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(HIDDEN, epsilon=LN_EPS, rngs=rngs)

    def __call__(self, input_ids, token_type_ids):
        pos = jnp.arange(input_ids.shape[-1])[None, :]
        x = self.word_embeddings(input_ids)
        x = x + self.position_embeddings(pos)
        return self.LayerNorm(x)


class BertSelfAttention(nnx.Module):
    def __init__(self, rngs):
        self.query = nnx.Linear(HIDDEN, HIDDEN, rngs=rngs)
        self.key = nnx.Linear(HIDDEN, HIDDEN, rngs=rngs)
        self.value = nnx.Linear(HIDDEN, HIDDEN, rngs=rngs)

    def heads(self, x):  # [B, T, D] -> [B, H, T, HEAD_DIM]
        b, t, _ = x.shape
        return x.reshape(b, t, HEADS, HEAD_DIM).swapaxes(1, 2)

    def __call__(self, x, pad_mask):
        q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
        scores = jnp.matmul(q, k.swapaxes(-1, -2)) / np.sqrt(HEAD_DIM)
        scores = jnp.where(pad_mask[:, None, None, :], scores, -1e30)  # pad_mask True = real token
        ctx = jnp.matmul(jax.nn.softmax(scores, axis=-1), v)
        return ctx.swapaxes(1, 2).reshape(x.shape)


class BertSelfOutput(nnx.Module):
    def __init__(self, rngs):
        self.dense = nnx.Linear(HIDDEN, HIDDEN, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(HIDDEN, epsilon=LN_EPS, rngs=rngs)

    def __call__(self, h, x):
        return self.LayerNorm(self.dense(h) + x)


class BertAttention(nnx.Module):
    def __init__(self, rngs):
        self.self = BertSelfAttention(rngs)
        self.output = BertSelfOutput(rngs)


class BertIntermediate(nnx.Module):
    def __init__(self, rngs):
        self.dense = nnx.Linear(HIDDEN, FFN, rngs=rngs)


class BertOutput(nnx.Module):
    def __init__(self, rngs):
        self.dense = nnx.Linear(FFN, HIDDEN, rngs=rngs)
        self.LayerNorm = nnx.LayerNorm(HIDDEN, epsilon=LN_EPS, rngs=rngs)


class BertLayer(nnx.Module):
    def __init__(self, rngs):
        self.attention = BertAttention(rngs)
        self.intermediate = BertIntermediate(rngs)
        self.output = BertOutput(rngs)

    def __call__(self, x, pad_mask):
        a = self.attention.output(self.attention.self(x, pad_mask), x)
        h = nnx.gelu(self.intermediate.dense(a), approximate=False)  # BERT "gelu" is the exact erf form
        return self.output.LayerNorm(self.output.dense(h) + a)


class BertEncoder(nnx.Module):
    def __init__(self, rngs):
        self.layer = nnx.List([BertLayer(rngs) for _ in range(LAYERS)])


class Bert(nnx.Module):
    def __init__(self, rngs):
        self.embeddings = BertEmbeddings(rngs)
        self.encoder = BertEncoder(rngs)


class BertTaggerPort(nnx.Module):
    def __init__(self, rngs):
        self.bert = Bert(rngs)
        self.classifier = nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

    def __call__(self, input_ids, token_type_ids, attention_mask):
        pad_mask = attention_mask > 0
        x = self.bert.embeddings(input_ids, token_type_ids)
        for layer in self.bert.encoder.layer:
            x = layer(x, pad_mask)
        return self.classifier(x)


jax_model = BertTaggerPort(nnx.Rngs(3))

B, T = 4, 6
lengths = np.array([6, 4, 5, 2])
attention_mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
input_ids = rng.integers(1, VOCAB, size=(B, T)).astype(np.int64) * attention_mask
token_type_ids = ((np.arange(T)[None, :] >= np.array([3, 2, 2, 1])[:, None]) * attention_mask).astype(np.int64)
labels = np.where(attention_mask == 1, rng.integers(0, CLASSES, size=(B, T)), -100).astype(np.int64)
batch = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
         "labels": labels}


def torch_loss(model, batch):
    logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, CLASSES), batch["labels"].reshape(-1))


def jax_loss(model, batch):
    logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    labels = batch["labels"]
    keep = labels >= 0
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(labels, 0))
    return jnp.sum(nll * keep) / jnp.sum(keep)


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=2e-2, weight_decay=1e-3)  # coupled L2, as torch's Adam does


jax_optimizer = optax.chain(optax.add_decayed_weights(1e-3), optax.adam(2e-2))
