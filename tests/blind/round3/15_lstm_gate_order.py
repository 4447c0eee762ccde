"""EXPECTED: lstm_gate_order
WHERE: lstm
The port splits torch's fused gate rows as (i, f, o, g) where torch orders them (i, f, g, o).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(1)
rng = np.random.default_rng(1)
B, T, I, H, O, L = 3, 5, 4, 8, 2, 2


class TorchLSTMModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(I, H, num_layers=L, batch_first=True)
        self.head = torch.nn.Linear(H, O)

    def forward(self, x, h0, c0):  # x [B, T, I]; h0, c0 [L, B, H]
        out, (h, c) = self.lstm(x, (h0, c0))
        return self.head(out), c[-1]


torch_model = TorchLSTMModel()
with torch.no_grad():
    for name, p in torch_model.lstm.named_parameters():
        if name.startswith("bias"):
            p.uniform_(-0.5, 0.5)
    torch_model.head.bias.uniform_(-0.3, 0.3)


class LSTMCell(nnx.Module):
    """One torch LSTM layer with fused kernels [in, 4H] (dense_i carries b_ih, dense_h carries b_hh); (c, h) carry."""

    def __init__(self, d_in, d_hidden, rngs):
        self.dense_i = nnx.Linear(d_in, 4 * d_hidden, rngs=rngs)
        self.dense_h = nnx.Linear(d_hidden, 4 * d_hidden, rngs=rngs)

    def __call__(self, carry, x):
        c, h = carry
        gates = self.dense_i(x) + self.dense_h(h)
        i, f, o, g = jnp.split(gates, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h


class JaxLSTMModel(nnx.Module):
    def __init__(self, rngs):
        self.lstm = nnx.List([LSTMCell(I if l == 0 else H, H, rngs=rngs) for l in range(L)])
        self.head = nnx.Linear(H, O, rngs=rngs)

    def __call__(self, x, h0, c0):  # batch-first, like torch
        h_seq = x
        for l, cell in enumerate(self.lstm):
            carry = (c0[l], h0[l])  # the cell carries (c, h)
            outs = []
            for t in range(h_seq.shape[1]):
                carry, y = cell(carry, h_seq[:, t])
                outs.append(y)
            h_seq = jnp.stack(outs, axis=1)
        return self.head(h_seq), carry[0]


jax_model = JaxLSTMModel(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(B, T, I)).astype(np.float32),
    "h0": (0.6 * rng.normal(size=(L, B, H))).astype(np.float32),
    "c0": (0.6 * rng.normal(size=(L, B, H))).astype(np.float32),
    "y": rng.normal(size=(B, T, O)).astype(np.float32),
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
