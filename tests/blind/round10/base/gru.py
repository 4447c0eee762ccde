"""EXPECTED: correct
WHERE: none
LINES: none
RELATION: none
SENTENCE
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
import torch.nn as tnn
import torch.nn.functional as F
from flax import nnx

torch.manual_seed(3030)
I, H, O, BETA = 4, 8, 2, 0.5


class TorchGRUModel(tnn.Module):
    def __init__(self):
        super().__init__()
        self.gru = tnn.GRU(I, H, batch_first=True)
        self.head = tnn.Linear(H, O)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out)


torch_model = TorchGRUModel().eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if name.endswith("bias") or "bias" in name:
            p.uniform_(-0.3, 0.3)
        else:
            p.normal_(0.0, 0.5)


class GRU(nnx.Module):
    """torch.nn.GRU (one layer, batch_first); gates packed (r, z, n) like torch's weight_ih / weight_hh."""

    def __init__(self, rngs):
        self.dense_i = nnx.Linear(I, 3 * H, rngs=rngs)
        self.dense_h = nnx.Linear(H, 3 * H, rngs=rngs)

    def step(self, gx, h):
        gh = self.dense_h(h)
        xr, xz, xn = jnp.split(gx, 3, axis=-1)
        hr, hz, hn = jnp.split(gh, 3, axis=-1)
        r = jax.nn.sigmoid(xr + hr)
        z = jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        h_new = (1 - z) * n + z * h
        return h_new, h_new

    def __call__(self, x):
        gx = self.dense_i(x)
        h = jnp.zeros((x.shape[0], H), dtype=x.dtype)
        outs = []
        for t in range(x.shape[1]):
            h, y = self.step(gx[:, t], h)
            outs.append(y)
        return jnp.stack(outs, axis=1)


class GRUModel(nnx.Module):
    def __init__(self, rngs):
        self.gru = GRU(rngs)
        self.head = nnx.Linear(H, O, rngs=rngs)

    def __call__(self, x):
        return self.head(self.gru(x))


jax_model = GRUModel(nnx.Rngs(0))

rng = np.random.default_rng(3030)
batch = {"x": rng.normal(size=(3, 6, I)).astype(np.float32), "y": rng.normal(size=(3, 6, O)).astype(np.float32)}


def torch_loss(model, batch):
    return F.smooth_l1_loss(model(batch["x"]), batch["y"], beta=BETA)


def jax_loss(model, batch):
    return optax.huber_loss(model(batch["x"]), batch["y"], delta=BETA).mean() / BETA


def torch_optimizer(params):
    return torch.optim.RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-3)


jax_optimizer = optax.rmsprop(1e-2, decay=0.99, eps=1e-3, eps_in_sqrt=False)
