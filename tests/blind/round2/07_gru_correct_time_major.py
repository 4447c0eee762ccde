"""EXPECTED: correct
WHERE: none
A time-major torch.nn.GRU with a linear head, ported with a hand-written cell that keeps both biases; Adam.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(3)
rng = np.random.default_rng(3)
T, B, I, H, O = 5, 3, 6, 12, 2


class TorchGRUModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(I, H)  # time-major: x [T, B, I]
        self.head = torch.nn.Linear(H, O)

    def forward(self, x, h0):  # h0 [B, H]
        out, _ = self.gru(x, h0[None])
        return self.head(out)  # [T, B, O]


torch_model = TorchGRUModel()
with torch.no_grad():
    torch_model.gru.bias_hh_l0.uniform_(-0.8, 0.8)
    torch_model.gru.bias_ih_l0.uniform_(-0.5, 0.5)


class GRU(nnx.Module):
    """torch.nn.GRU, one layer, time-major: gates r | z | n."""

    def __init__(self, d_in, d_hidden, rngs):
        self.dense_i = nnx.Linear(d_in, 3 * d_hidden, rngs=rngs)
        self.dense_h = nnx.Linear(d_hidden, 3 * d_hidden, rngs=rngs)

    def __call__(self, x, h):
        outs = []
        for t in range(x.shape[0]):
            i_r, i_z, i_n = jnp.split(self.dense_i(x[t]), 3, axis=-1)
            h_r, h_z, h_n = jnp.split(self.dense_h(h), 3, axis=-1)
            r = jax.nn.sigmoid(i_r + h_r)
            z = jax.nn.sigmoid(i_z + h_z)
            n = jnp.tanh(i_n + r * h_n)  # b_hn inside the reset gate, as torch
            h = (1 - z) * n + z * h
            outs.append(h)
        return jnp.stack(outs, axis=0)


class JaxGRUModel(nnx.Module):
    def __init__(self, rngs):
        self.gru = GRU(I, H, rngs=rngs)
        self.head = nnx.Linear(H, O, rngs=rngs)

    def __call__(self, x, h0):
        return self.head(self.gru(x, h0))


jax_model = JaxGRUModel(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(T, B, I)).astype(np.float32),
    "h0": (0.5 * rng.normal(size=(B, H))).astype(np.float32),
    "y": rng.normal(size=(T, B, O)).astype(np.float32),
}


def torch_loss(model, batch):
    return ((model(batch["x"], batch["h0"]) - batch["y"]) ** 2).mean()


def jax_loss(model, batch):
    return jnp.mean((model(batch["x"], batch["h0"]) - batch["y"]) ** 2)


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=1e-2)


jax_optimizer = optax.adam(1e-2)
