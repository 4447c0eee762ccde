"""EXPECTED: correct
WHERE: module
An MLP (per-sample standardisation, LayerNorm, exact GELU, a residual SiLU layer) with the user's own AdamW training steps; the port matches.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(0)
rng = np.random.default_rng(0)
D_IN, D_H, D_OUT, B = 12, 16, 4, 4


class Standardize(torch.nn.Module):
    """Per-sample standardisation of the input features."""

    def forward(self, x):
        return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-3)


class TorchMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.standardize = Standardize()
        self.fc1 = torch.nn.Linear(D_IN, D_H)
        self.norm = torch.nn.LayerNorm(D_H)
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


class JaxMLP(nnx.Module):
    def __init__(self, rngs):
        self.standardize = JaxStandardize()
        self.fc1 = nnx.Linear(D_IN, D_H, rngs=rngs)
        self.norm = nnx.LayerNorm(D_H, epsilon=1e-5, rngs=rngs)
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

_TORCH_OPT, _JAX_OPT = {}, {}  # one optimizer per model object, made on its first step


def torch_step(model, batch):
    if id(model) not in _TORCH_OPT:
        _TORCH_OPT[id(model)] = (model, torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1))
    opt = _TORCH_OPT[id(model)][1]
    opt.zero_grad()
    loss = torch_loss(model, batch)
    loss.backward()
    opt.step()
    return loss


def jax_step(model, batch):
    if id(model) not in _JAX_OPT:
        _JAX_OPT[id(model)] = (model, nnx.Optimizer(model, optax.adamw(1e-2, b1=0.9, b2=0.99, eps=1e-8, weight_decay=0.1), wrt=nnx.Param))
    opt = _JAX_OPT[id(model)][1]
    loss, grads = nnx.value_and_grad(jax_loss)(model, batch)
    opt.update(model, grads)
    return loss

