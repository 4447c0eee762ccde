"""EXPECTED: gru_bias
WHERE: gru
The port adds the hidden-side bias b_hn outside the reset gate, n = tanh(W_in x + b_in + r * (W_hn h) + b_hn), where torch has r * (W_hn h + b_hn).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(1)
rng = np.random.default_rng(1)
T, B, I, H, O = 6, 3, 5, 8, 2


class TorchGRUModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(I, H)  # time-major: x [T, B, I]
        self.head = torch.nn.Linear(H, O)

    def forward(self, x, h0):  # h0 [B, H], non-zero
        out, h_last = self.gru(x, h0[None])
        return self.head(out), h_last[0]


torch_model = TorchGRUModel()
with torch.no_grad():
    torch_model.gru.bias_ih_l0.uniform_(-0.5, 0.5)
    torch_model.gru.bias_hh_l0.uniform_(-0.8, 0.8)
    torch_model.head.bias.uniform_(-0.3, 0.3)


class GRU(nnx.Module):
    """torch.nn.GRU, one layer, time-major: fused gates r | z | n in both kernels, both biases kept."""

    def __init__(self, d_in, d_hidden, rngs):
        self.dense_i = nnx.Linear(d_in, 3 * d_hidden, rngs=rngs)
        self.dense_h = nnx.Linear(d_hidden, 3 * d_hidden, rngs=rngs)

    def __call__(self, x, h0):
        w_i, b_i = self.dense_i.kernel.value, self.dense_i.bias.value
        w_h, b_h = self.dense_h.kernel.value, self.dense_h.bias.value
        b_hr, b_hz, b_hn = jnp.split(b_h, 3)

        def step(h, x_t):
            i_r, i_z, i_n = jnp.split(x_t @ w_i + b_i, 3, axis=-1)
            h_r, h_z, h_n = jnp.split(h @ w_h, 3, axis=-1)
            r = jax.nn.sigmoid(i_r + h_r + b_hr)
            z = jax.nn.sigmoid(i_z + h_z + b_hz)
            n = jnp.tanh(i_n + r * h_n + b_hn)
            h = (1.0 - z) * n + z * h
            return h, h

        h_last, out = jax.lax.scan(step, h0, x)
        return out, h_last


class JaxGRUModel(nnx.Module):
    def __init__(self, rngs):
        self.gru = GRU(I, H, rngs=rngs)
        self.head = nnx.Linear(H, O, rngs=rngs)

    def __call__(self, x, h0):
        out, h_last = self.gru(x, h0)
        return self.head(out), h_last


jax_model = JaxGRUModel(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(T, B, I)).astype(np.float32),
    "h0": (0.7 * rng.normal(size=(B, H))).astype(np.float32),
    "y": rng.normal(size=(T, B, O)).astype(np.float32),
}


def torch_loss(model, batch):
    out, h_last = model(batch["x"], batch["h0"])
    return ((out - batch["y"]) ** 2).mean() + 0.1 * (h_last ** 2).mean()


def jax_loss(model, batch):
    out, h_last = model(batch["x"], batch["h0"])
    return jnp.mean((out - batch["y"]) ** 2) + 0.1 * jnp.mean(h_last ** 2)


def torch_optimizer(params):
    return torch.optim.RMSprop(params, lr=1e-2, alpha=0.9, eps=1e-8)


jax_optimizer = optax.rmsprop(1e-2, decay=0.9, eps=1e-8, eps_in_sqrt=False)  # torch adds eps after the sqrt
