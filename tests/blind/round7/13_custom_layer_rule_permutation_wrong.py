"""EXPECTED: rule_permutation_wrong
WHERE: proj
LINES: 54-54
The same model with the square Projection, but the register_rule maps w to kernel without the permutation (1, 0), so the port runs x @ w where torch runs x @ w.T.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

from detach_parity import register_rule

torch.manual_seed(712)
D_IN, H, D_OUT = 8, 16, 3


class Projection(torch.nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(d_out, d_in) / np.sqrt(d_in))
        self.b = torch.nn.Parameter(torch.rand(d_out) - 0.5)

    def forward(self, x):
        return x @ self.w.T + self.b


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(D_IN, H)
        self.proj = Projection(H, H)
        self.out = torch.nn.Linear(H, D_OUT)

    def forward(self, x):
        return self.out(torch.tanh(self.proj(torch.tanh(self.inp(x)))))


torch_model = TorchNet()
with torch.no_grad():
    torch_model.proj.w.add_(0.5 * torch.triu(torch.randn(H, H)))  # clearly not symmetric


class Dense(nnx.Module):
    def __init__(self, d_in, d_out):
        self.kernel = nnx.Param(jnp.zeros((d_in, d_out)))
        self.bias = nnx.Param(jnp.zeros((d_out,)))

    def __call__(self, x):
        return x @ self.kernel[...] + self.bias[...]


register_rule(Projection, {"w": "kernel", "b": "bias"})


class JaxNet(nnx.Module):
    def __init__(self, rngs):
        self.inp = nnx.Linear(D_IN, H, rngs=rngs)
        self.proj = Dense(H, H)
        self.out = nnx.Linear(H, D_OUT, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.proj(jnp.tanh(self.inp(x)))))


jax_model = JaxNet(nnx.Rngs(0))

_r = np.random.default_rng(712)
batch = {"x": _r.normal(size=(4, D_IN)), "y": _r.integers(0, D_OUT, size=(4,)).astype(np.int64)}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=1e-2)


jax_optimizer = optax.adam(1e-2, b1=0.9, b2=0.999, eps=1e-8)
