"""EXPECTED: eps_wrong
WHERE: norm1
LINES: 57-57
The same T5LayerNorm MLP, but the port builds its first norm with variance_epsilon 1e-5 where torch's T5LayerNorm has 1e-6.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx
from transformers.models.t5.modeling_t5 import T5LayerNorm as TorchT5LayerNorm

torch.manual_seed(710)
D_IN, H, D_OUT = 10, 32, 4


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(D_IN, H)
        self.norm1 = TorchT5LayerNorm(H, eps=1e-6)
        self.fc2 = torch.nn.Linear(H, H)
        self.norm2 = TorchT5LayerNorm(H, eps=1e-6)
        self.out = torch.nn.Linear(H, D_OUT)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.norm1(self.fc1(x)))
        h = torch.nn.functional.gelu(self.norm2(self.fc2(h)))
        return self.out(h)


torch_model = TorchNet()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if name.startswith("norm"):
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.3, 0.3)
    torch_model.fc1.weight.normal_(0.0, 1.0 / np.sqrt(D_IN))  # pre-norm activations of RMS about 1
    torch_model.fc2.weight.normal_(0.0, 1.0 / np.sqrt(H))


class T5LayerNorm(nnx.Module):
    def __init__(self, hidden_size, eps=1e-6):
        self.weight = nnx.Param(jnp.ones((hidden_size,)))
        self.variance_epsilon = eps

    def __call__(self, x):
        variance = jnp.mean(jnp.square(x.astype(jnp.float32)), axis=-1, keepdims=True)
        return self.weight[...] * (x * jax.lax.rsqrt(variance + self.variance_epsilon))


class JaxNet(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(D_IN, H, rngs=rngs)
        self.norm1 = T5LayerNorm(H, eps=1e-5)
        self.fc2 = nnx.Linear(H, H, rngs=rngs)
        self.norm2 = T5LayerNorm(H, eps=1e-6)
        self.out = nnx.Linear(H, D_OUT, rngs=rngs)

    def __call__(self, x):
        h = jax.nn.gelu(self.norm1(self.fc1(x)), approximate=False)
        h = jax.nn.gelu(self.norm2(self.fc2(h)), approximate=False)
        return self.out(h)


jax_model = JaxNet(nnx.Rngs(0))

_r = np.random.default_rng(710)
batch = {"x": _r.normal(size=(4, D_IN)), "y": _r.normal(size=(4, D_OUT))}


def torch_loss(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def jax_loss(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


jax_optimizer = optax.sgd(0.05, momentum=0.9)
