"""EXPECTED: layernorm_eps
WHERE: norm
The hand-written torch norm holds variance_epsilon = 1e-5; the port's norm uses 1e-6.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(3)
rng = np.random.default_rng(3)
D_IN, D_H, D_OUT, B = 12, 16, 4, 4


class Standardize(torch.nn.Module):
    """Per-sample standardisation of the input features."""

    def forward(self, x):
        return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-3)


class LayerNorm(torch.nn.Module):
    """A hand-written LayerNorm, as many research codebases carry."""

    def __init__(self, hidden_size):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.bias = torch.nn.Parameter(torch.zeros(hidden_size))
        self.variance_epsilon = 1e-5

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        return self.weight * (x - u) / torch.sqrt(s + self.variance_epsilon) + self.bias


class TorchMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.standardize = Standardize()
        self.fc1 = torch.nn.Linear(D_IN, D_H)
        self.norm = LayerNorm(D_H)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(D_H, D_H)
        self.head = torch.nn.Linear(D_H, D_OUT)

    def forward(self, x):
        h = self.act(self.norm(self.fc1(self.standardize(x))))
        h = h + torch.nn.functional.silu(self.fc2(h))
        return self.head(h)


torch_model = TorchMLP()
with torch.no_grad():
    torch_model.fc1.weight.mul_(0.1)  # small pre-norm variance: the norm's epsilon matters
    torch_model.fc1.bias.uniform_(-0.05, 0.05)
    torch_model.norm.weight.uniform_(0.5, 1.5)
    torch_model.norm.bias.uniform_(-0.3, 0.3)
    torch_model.fc2.bias.uniform_(-0.3, 0.3)
    torch_model.head.bias.uniform_(-0.3, 0.3)


class JaxStandardize(nnx.Module):
    def __call__(self, x):
        return (x - x.mean(-1, keepdims=True)) / (jnp.std(x, axis=-1, keepdims=True, ddof=1) + 1e-3)


class JaxLayerNorm(nnx.Module):
    def __init__(self, hidden_size, eps):
        self.scale = nnx.Param(jnp.ones((hidden_size,)))
        self.bias = nnx.Param(jnp.zeros((hidden_size,)))
        self.eps = eps

    def __call__(self, x):
        u = x.mean(-1, keepdims=True)
        s = ((x - u) ** 2).mean(-1, keepdims=True)
        return self.scale.value * (x - u) / jnp.sqrt(s + self.eps) + self.bias.value


class JaxMLP(nnx.Module):
    def __init__(self, rngs):
        self.standardize = JaxStandardize()
        self.fc1 = nnx.Linear(D_IN, D_H, rngs=rngs)
        self.norm = JaxLayerNorm(D_H, eps=1e-6)
        self.fc2 = nnx.Linear(D_H, D_H, rngs=rngs)
        self.head = nnx.Linear(D_H, D_OUT, rngs=rngs)

    def __call__(self, x):
        h = self.fc1(self.standardize(x))
        h = jax.nn.gelu(self.norm(h), approximate=False)
        h = h + jax.nn.silu(self.fc2(h))
        return self.head(h)


jax_model = JaxMLP(nnx.Rngs(0))

batch = {
    "x": (rng.normal(size=(B, D_IN)) * 2.0 + 0.5).astype(np.float32),
    "y": rng.normal(size=(B, D_OUT)).astype(np.float32),
}


def torch_loss(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def jax_loss(model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=1e-2)


jax_optimizer = optax.adam(1e-2)

