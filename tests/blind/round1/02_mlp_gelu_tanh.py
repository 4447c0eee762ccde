"""EXPECTED: gelu_tanh
WHERE: module
torch's F.gelu is exact (erf) but the port calls jax.nn.gelu with its default approximate=True (tanh formula).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(0)
rng = np.random.default_rng(0)
D_IN, D_H, D_OUT = 12, 16, 4


class TorchMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(D_IN, D_H)
        self.norm = torch.nn.LayerNorm(D_H)
        self.fc2 = torch.nn.Linear(D_H, D_H)
        self.head = torch.nn.Linear(D_H, D_OUT)

    def forward(self, x):
        x = (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-3)
        h = torch.nn.functional.gelu(self.norm(self.fc1(x)))
        h = torch.nn.functional.gelu(self.fc2(h))
        return self.head(h)


torch_model = TorchMLP()
with torch.no_grad():
    torch_model.norm.weight.uniform_(0.5, 1.5)
    torch_model.norm.bias.uniform_(-0.3, 0.3)


class JaxMLP(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(D_IN, D_H, rngs=rngs)
        self.norm = nnx.LayerNorm(D_H, epsilon=1e-5, rngs=rngs)
        self.fc2 = nnx.Linear(D_H, D_H, rngs=rngs)
        self.head = nnx.Linear(D_H, D_OUT, rngs=rngs)

    def __call__(self, x):
        x = (x - x.mean(-1, keepdims=True)) / (jnp.std(x, -1, keepdims=True, ddof=1) + 1e-3)
        h = jax.nn.gelu(self.norm(self.fc1(x)))
        h = jax.nn.gelu(self.fc2(h))
        return self.head(h)


jax_model = JaxMLP(nnx.Rngs(0))

batch = {
    "x": rng.normal(size=(4, D_IN)).astype(np.float32),
    "y": rng.normal(size=(4, D_OUT)).astype(np.float32),
}


def torch_loss(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def jax_loss(model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=1e-2, weight_decay=0.1)


jax_optimizer = optax.chain(optax.add_decayed_weights(0.1), optax.adam(1e-2))
