"""EXPECTED: correct
WHERE: none
A time-major 2-layer nn.GRU sequence classifier (x [T, B, F], non-zero h0 [2, B, H], head on the last step of the top layer); the port (one hand-written cell per layer in gru.0 / gru.1, fused r|z|n kernels, b_hn inside the reset gate) matches (SGD with momentum, 3 steps).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(509)
rng = np.random.default_rng(509)
T, B, F, H, N_CLS, L = 6, 3, 5, 10, 4, 2


class TorchGRUClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(F, H, num_layers=L)  # time-major
        self.head = torch.nn.Linear(H, N_CLS)

    def forward(self, x, h0):  # x [T, B, F], h0 [L, B, H]
        out, h_n = self.gru(x, h0)
        return self.head(out[-1])


torch_model = TorchGRUClassifier()
with torch.no_grad():
    for name, p in torch_model.gru.named_parameters():
        if name.startswith("bias_hh"):
            p.uniform_(-0.8, 0.8)
        elif name.startswith("bias_ih"):
            p.uniform_(-0.5, 0.5)
        else:
            p.uniform_(-0.6, 0.6)
    torch_model.head.bias.uniform_(-0.3, 0.3)


class GRULayer(nnx.Module):
    """One layer of torch.nn.GRU: gates r | z | n fused in both kernels, both biases kept."""

    def __init__(self, d_in, d_hidden, rngs):
        self.dense_i = nnx.Linear(d_in, 3 * d_hidden, rngs=rngs)
        self.dense_h = nnx.Linear(d_hidden, 3 * d_hidden, rngs=rngs)

    def __call__(self, x, h0):  # x [T, B, d_in]
        def step(h, x_t):
            i_r, i_z, i_n = jnp.split(self.dense_i(x_t), 3, axis=-1)
            h_r, h_z, h_n = jnp.split(self.dense_h(h), 3, axis=-1)  # h_n includes b_hn
            r = jax.nn.sigmoid(i_r + h_r)
            z = jax.nn.sigmoid(i_z + h_z)
            n = jnp.tanh(i_n + r * h_n)
            h = (1.0 - z) * n + z * h
            return h, h

        outs = []
        h = h0
        for t in range(x.shape[0]):
            h, y = step(h, x[t])
            outs.append(y)
        return jnp.stack(outs, axis=0)


class GRUClassifier(nnx.Module):
    def __init__(self, rngs):
        self.gru = nnx.List([GRULayer(F if l == 0 else H, H, rngs=rngs) for l in range(L)])
        self.head = nnx.Linear(H, N_CLS, rngs=rngs)

    def __call__(self, x, h0):
        seq = x
        for l, layer in enumerate(self.gru):
            seq = layer(seq, h0[l])
        return self.head(seq[-1])


jax_model = GRUClassifier(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(T, B, F)).astype(np.float32),
    "h0": (0.6 * rng.normal(size=(L, B, H))).astype(np.float32),
    "y": np.array([0, 3, 2], dtype=np.int64),
}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"], batch["h0"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"], batch["h0"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.2, momentum=0.9)


jax_optimizer = optax.sgd(0.2, momentum=0.9)
