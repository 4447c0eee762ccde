"""EXPECTED: gelu_tanh
WHERE: act
The port uses the tanh-approximate GELU where torch uses the exact erf GELU (the activation between norm and fc2).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(1)
rng = np.random.default_rng(1)
D_IN, D_H, D_OUT, B = 10, 24, 3, 4


class TorchMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(D_IN, D_H)
        self.norm = torch.nn.LayerNorm(D_H)  # eps 1e-5
        self.act = torch.nn.GELU()  # exact (erf) GELU
        self.fc2 = torch.nn.Linear(D_H, D_OUT)

    def forward(self, x):
        return self.fc2(self.act(self.norm(self.fc1(x))))


torch_model = TorchMLP()
with torch.no_grad():
    torch_model.norm.weight.uniform_(0.5, 1.5)
    torch_model.norm.bias.uniform_(-0.3, 0.3)
    torch_model.fc1.bias.uniform_(-0.5, 0.5)
    torch_model.fc2.bias.uniform_(-0.5, 0.5)


class GELU(nnx.Module):
    def __init__(self, approximate):
        self.approximate = approximate

    def __call__(self, x):
        return jax.nn.gelu(x, approximate=self.approximate)


class JaxMLP(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(D_IN, D_H, rngs=rngs)
        self.norm = nnx.LayerNorm(D_H, epsilon=1e-5, rngs=rngs)
        self.act = GELU(approximate=True)
        self.fc2 = nnx.Linear(D_H, D_OUT, rngs=rngs)

    def __call__(self, x):
        return self.fc2(self.act(self.norm(self.fc1(x))))


jax_model = JaxMLP(nnx.Rngs(0))

# small-variance inputs so LayerNorm's eps matters
batch = {
    "x": (0.01 * rng.normal(size=(B, D_IN))).astype(np.float32),
    "y": rng.normal(size=(B, D_OUT)).astype(np.float32),
}


def torch_loss(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def jax_loss(model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def torch_optimizer(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)


jax_optimizer = optax.adamw(1e-2, weight_decay=0.1)
