"""EXPECTED: correct
WHERE: none
An LSTM language model (embedding, batch-first nn.LSTM with non-zero (h0, c0), decoder tied to the embedding: decoder.weight = encoder.weight, decoder bias its own); the port reads the embedding table in its decoder and keeps only the bias there, and matches (Adam, 3 steps).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(513)
rng = np.random.default_rng(513)
V, D, B, T = 24, 16, 3, 6


class TorchLSTMLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Embedding(V, D)
        self.rnn = torch.nn.LSTM(D, D, batch_first=True)
        self.decoder = torch.nn.Linear(D, V)
        self.decoder.weight = self.encoder.weight  # weight tying

    def forward(self, ids, h0, c0):  # h0, c0 [1, B, D]
        out, _ = self.rnn(self.encoder(ids), (h0, c0))
        return self.decoder(out)


torch_model = TorchLSTMLM()
with torch.no_grad():
    torch_model.encoder.weight.normal_(0.0, 0.5)
    for name, p in torch_model.rnn.named_parameters():
        if name.startswith("bias"):
            p.uniform_(-0.5, 0.5)
    torch_model.decoder.bias.uniform_(-0.3, 0.3)


class LSTMCell(nnx.Module):
    """torch.nn.LSTM (one layer) as nnx.LSTMCell's per-gate layers, both biases kept; carry (c, h)."""

    def __init__(self, d_in, d_hidden, rngs):
        self.ii, self.if_, self.ig, self.io = (nnx.Linear(d_in, d_hidden, rngs=rngs) for _ in range(4))
        self.hi, self.hf, self.hg, self.ho = (nnx.Linear(d_hidden, d_hidden, rngs=rngs) for _ in range(4))

    def __call__(self, carry, x):
        c, h = carry
        i = jax.nn.sigmoid(self.ii(x) + self.hi(h))
        f = jax.nn.sigmoid(self.if_(x) + self.hf(h))
        g = jnp.tanh(self.ig(x) + self.hg(h))
        o = jax.nn.sigmoid(self.io(x) + self.ho(h))
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (c, h), h


class TiedDecoder(nnx.Module):
    """torch's decoder Linear whose weight is the embedding: only the bias lives here."""

    def __init__(self, n_out, rngs):
        self.bias = nnx.Param(jnp.zeros((n_out,)))

    def __call__(self, x, table):  # table [V, D] = encoder.embedding
        return x @ table.T + self.bias.value


class LSTMLM(nnx.Module):
    def __init__(self, rngs):
        self.encoder = nnx.Embed(V, D, rngs=rngs)
        self.rnn = LSTMCell(D, D, rngs)
        self.decoder = TiedDecoder(V, rngs)

    def __call__(self, ids, h0, c0):
        x = self.encoder(ids)
        carry = (c0[0], h0[0])
        outs = []
        for t in range(ids.shape[1]):
            carry, y = self.rnn(carry, x[:, t])
            outs.append(y)
        return self.decoder(jnp.stack(outs, axis=1), self.encoder.embedding.value)


jax_model = LSTMLM(nnx.Rngs(0))

ids = rng.integers(0, V, size=(B, T + 1))
batch = {
    "ids": ids[:, :-1].astype(np.int64),
    "targets": ids[:, 1:].astype(np.int64),
    "h0": (0.5 * rng.normal(size=(1, B, D))).astype(np.float32),
    "c0": (0.5 * rng.normal(size=(1, B, D))).astype(np.float32),
}


def torch_loss(model, batch):
    logits = model(batch["ids"], batch["h0"], batch["c0"])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), batch["targets"].reshape(-1))


def jax_loss(model, batch):
    logits = model(batch["ids"], batch["h0"], batch["c0"])
    return optax.softmax_cross_entropy_with_integer_labels(logits.reshape(-1, V), batch["targets"].reshape(-1)).mean()


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=1e-2)


jax_optimizer = optax.adam(1e-2)
