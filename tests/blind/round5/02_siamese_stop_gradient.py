"""EXPECTED: stop_gradient
WHERE: loss
The port's loss wraps the second branch's embedding in jax.lax.stop_gradient, so the shared encoder learns only through the first input of each pair where torch backpropagates through both.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(501)
rng = np.random.default_rng(501)
B, I, H, E = 4, 12, 24, 16


class TorchEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(I, H)
        self.norm = torch.nn.LayerNorm(H)
        self.fc2 = torch.nn.Linear(H, E)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


class TorchSiamese(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = TorchEncoder()  # one module, both branches

    def forward(self, x1, x2):
        return self.encoder(x1), self.encoder(x2)


torch_model = TorchSiamese()
with torch.no_grad():
    torch_model.encoder.fc1.bias.uniform_(-0.4, 0.4)
    torch_model.encoder.fc2.bias.uniform_(-0.4, 0.4)
    torch_model.encoder.norm.weight.uniform_(0.6, 1.4)
    torch_model.encoder.norm.bias.uniform_(-0.3, 0.3)


class Encoder(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(I, H, rngs=rngs)
        self.norm = nnx.LayerNorm(H, epsilon=1e-5, rngs=rngs)
        self.fc2 = nnx.Linear(H, E, rngs=rngs)

    def __call__(self, x):
        return self.fc2(jax.nn.gelu(self.norm(self.fc1(x)), approximate=False))


class Siamese(nnx.Module):
    def __init__(self, rngs):
        self.encoder = Encoder(rngs)

    def __call__(self, x1, x2):
        return self.encoder(x1), self.encoder(x2)


jax_model = Siamese(nnx.Rngs(0))

batch = {
    "x1": rng.normal(size=(B, I)).astype(np.float32),
    "x2": rng.normal(size=(B, I)).astype(np.float32),
    "sim": np.array([1.0, -0.5, 0.3, -1.0], dtype=np.float32),
}


def torch_loss(model, batch):
    e1, e2 = model(batch["x1"], batch["x2"])
    cos = torch.nn.functional.cosine_similarity(e1, e2, dim=-1)
    return ((cos - batch["sim"]) ** 2).mean()


def _cos(a, b):
    return (a * b).sum(-1) / (jnp.linalg.norm(a, axis=-1) * jnp.linalg.norm(b, axis=-1))


def jax_loss(model, batch):
    e1, e2 = model(batch["x1"], batch["x2"])
    e2 = jax.lax.stop_gradient(e2)
    return jnp.mean((_cos(e1, e2) - batch["sim"]) ** 2)


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=1e-2)


jax_optimizer = optax.adam(1e-2)
