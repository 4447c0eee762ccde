"""EXPECTED: norm_dim_wrong
WHERE: conv1
LINES: 46-46
The same weight-normed conv stack, but the port normalises v over axes (1, 2) of its [k, in, out] kernel (in and out) instead of over (k, in), every axis but the output channel.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from torch.nn.utils.parametrizations import weight_norm

torch.manual_seed(703)
C_IN, C1, C2, K, T = 4, 8, 8, 3, 16


class TorchConvStack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = weight_norm(torch.nn.Conv1d(C_IN, C1, K, padding=1), dim=0)
        self.conv2 = weight_norm(torch.nn.Conv1d(C1, C2, K, padding=1), dim=0)
        self.head = torch.nn.Linear(C2, 3)

    def forward(self, x):  # x [B, C, T]
        h = torch.nn.functional.leaky_relu(self.conv1(x), 0.1)
        h = torch.nn.functional.leaky_relu(self.conv2(h), 0.1)
        return self.head(h.mean(-1))


torch_model = TorchConvStack()
with torch.no_grad():
    for conv in (torch_model.conv1, torch_model.conv2):
        conv.parametrizations.weight.original0.uniform_(0.5, 1.5)  # g away from ||v||
        conv.bias.uniform_(-0.3, 0.3)


class WNConv1d(nnx.Module):
    def __init__(self, cin, cout, k):
        self.kernel_g = nnx.Param(jnp.ones((1, 1, cout)))
        self.kernel_v = nnx.Param(jnp.zeros((k, cin, cout)))
        self.bias = nnx.Param(jnp.zeros((cout,)))

    def __call__(self, x):  # x [B, T, C]
        v = self.kernel_v[...]
        kernel = self.kernel_g[...] * v / jnp.sqrt(jnp.sum(v * v, axis=(1, 2), keepdims=True))
        y = jax.lax.conv_general_dilated(x, kernel, (1,), [(1, 1)], dimension_numbers=("NWC", "WIO", "NWC"))
        return y + self.bias[...]


class JaxConvStack(nnx.Module):
    def __init__(self, rngs):
        self.conv1 = WNConv1d(C_IN, C1, K)
        self.conv2 = WNConv1d(C1, C2, K)
        self.head = nnx.Linear(C2, 3, rngs=rngs)

    def __call__(self, x):  # x [B, C, T] as torch's
        h = jnp.transpose(x, (0, 2, 1))
        h = jax.nn.leaky_relu(self.conv1(h), 0.1)
        h = jax.nn.leaky_relu(self.conv2(h), 0.1)
        return self.head(h.mean(1))


jax_model = JaxConvStack(nnx.Rngs(0))

_r = np.random.default_rng(703)
batch = {"x": _r.normal(size=(3, C_IN, T)), "y": _r.integers(0, 3, size=(3,)).astype(np.int64)}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=1e-2)


jax_optimizer = optax.adam(1e-2, b1=0.9, b2=0.999, eps=1e-8)
