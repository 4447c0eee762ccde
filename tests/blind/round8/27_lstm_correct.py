"""EXPECTED: correct
WHERE: none
LINES: none
RELATION: none
A time-major nn.LSTM sequence regressor ported with a hand-written NNX LSTM cell keeping torch's two biases; Adam; the port matches.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(0)
rng = np.random.default_rng(0)
T, B, I, H, O = 5, 3, 4, 8, 2


class TorchLSTMModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(I, H)  # time-major
        self.head = torch.nn.Linear(H, O)

    def forward(self, x, h0, c0):  # x [T, B, I]
        out, (h, c) = self.lstm(x, (h0[None], c0[None]))
        return self.head(out), c[0]


torch_model = TorchLSTMModel()
with torch.no_grad():
    torch_model.lstm.bias_hh_l0.uniform_(-0.5, 0.5)
    torch_model.lstm.bias_ih_l0.uniform_(-0.5, 0.5)


class LSTMCell(nnx.Module):
    """nnx.LSTMCell's per-gate layout and (c, h) carry, with torch's two biases kept apart: the input-side
    layers carry b_ih, the hidden-side layers b_hh (a single folded bias would train differently)."""

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


class JaxLSTMModel(nnx.Module):
    def __init__(self, rngs):
        self.lstm = LSTMCell(I, H, rngs=rngs)
        self.head = nnx.Linear(H, O, rngs=rngs)

    def __call__(self, x, h0, c0):
        carry = (c0, h0)  # the cell carries (c, h), like nnx.LSTMCell
        outs = []
        for t in range(x.shape[0]):
            carry, y = self.lstm(carry, x[t])
            outs.append(y)
        return self.head(jnp.stack(outs)), carry[0]


jax_model = JaxLSTMModel(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(T, B, I)).astype(np.float32),
    "h0": (0.5 * rng.normal(size=(B, H))).astype(np.float32),
    "c0": (0.5 * rng.normal(size=(B, H))).astype(np.float32),
    "y": rng.normal(size=(T, B, O)).astype(np.float32),
}


def torch_loss(model, batch):
    out, c = model(batch["x"], batch["h0"], batch["c0"])
    return ((out - batch["y"]) ** 2).mean() + 0.1 * (c ** 2).mean()


def jax_loss(model, batch):
    out, c = model(batch["x"], batch["h0"], batch["c0"])
    return jnp.mean((out - batch["y"]) ** 2) + 0.1 * jnp.mean(c ** 2)


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=1e-2)


jax_optimizer = optax.adam(1e-2)
