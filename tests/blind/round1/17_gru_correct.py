"""EXPECTED: correct
WHERE: module
A batch_first GRU with a non-zero initial state and right-padded masked loss, ported as a hand-written cell (fused r|z|n kernels, b_hn inside the reset gate); torch RMSprop as optax.rmsprop with eps outside the sqrt.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(0)
rng = np.random.default_rng(0)
B, T, I, H, O = 3, 6, 5, 8, 2


class TorchGRUModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(I, H, batch_first=True)
        self.head = torch.nn.Linear(H, O)

    def forward(self, x, h0):  # x [B, T, I], h0 [B, H]
        out, _ = self.gru(x, h0[None])
        return self.head(out)  # [B, T, O]


torch_model = TorchGRUModel()
with torch.no_grad():
    torch_model.gru.bias_hh_l0.uniform_(-0.5, 0.5)
    torch_model.gru.bias_ih_l0.uniform_(-0.5, 0.5)


class GRU(nnx.Module):
    """torch.nn.GRU (one layer, batch_first): gates r | z | n, with b_hn inside the reset gate."""

    def __init__(self, d_in, d_hidden, rngs):
        self.dense_i = nnx.Linear(d_in, 3 * d_hidden, rngs=rngs)
        self.dense_h = nnx.Linear(d_hidden, 3 * d_hidden, rngs=rngs)

    def __call__(self, x, h):
        outs = []
        for t in range(x.shape[1]):
            i_r, i_z, i_n = jnp.split(self.dense_i(x[:, t]), 3, axis=-1)
            h_r, h_z, h_n = jnp.split(self.dense_h(h), 3, axis=-1)
            r = jax.nn.sigmoid(i_r + h_r)
            z = jax.nn.sigmoid(i_z + h_z)
            n = jnp.tanh(i_n + r * h_n)
            h = (1 - z) * n + z * h
            outs.append(h)
        return jnp.stack(outs, axis=1)


class JaxGRUModel(nnx.Module):
    def __init__(self, rngs):
        self.gru = GRU(I, H, rngs=rngs)
        self.head = nnx.Linear(H, O, rngs=rngs)

    def __call__(self, x, h0):
        out = self.gru(x, h0)
        return self.head(out)


jax_model = JaxGRUModel(nnx.Rngs(0))

lengths = np.array([6, 4, 2])
batch = {
    "x": rng.normal(size=(B, T, I)).astype(np.float32),
    "h0": (0.5 * rng.normal(size=(B, H))).astype(np.float32),
    "y": rng.normal(size=(B, T, O)).astype(np.float32),
    "mask": (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32),  # right padding
}


def torch_loss(model, batch):
    err = ((model(batch["x"], batch["h0"]) - batch["y"]) ** 2).sum(-1)
    return (err * batch["mask"]).sum() / batch["mask"].sum()


def jax_loss(model, batch):
    err = ((model(batch["x"], batch["h0"]) - batch["y"]) ** 2).sum(-1)
    return (err * batch["mask"]).sum() / batch["mask"].sum()


def torch_optimizer(params):
    return torch.optim.RMSprop(params, lr=1e-2, alpha=0.9, eps=1e-8)


jax_optimizer = optax.rmsprop(1e-2, decay=0.9, eps=1e-8, eps_in_sqrt=False)  # torch adds eps after the sqrt
