"""EXPECTED: correct
WHERE: module
Correct port: an MLP regressor (hand-written Dense and LayerNorm modules) with torch SGD(lr, momentum, weight_decay) ported as optax.chain(add_decayed_weights(wd), sgd(lr, momentum)).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(412)
rng = np.random.default_rng(412)
B, D_IN, H, D_OUT = 4, 10, 24, 3
LR, WD = 0.05, 0.05


class TorchRegressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(D_IN, H)
        self.norm = torch.nn.LayerNorm(H, eps=1e-5)
        self.fc2 = torch.nn.Linear(H, H)
        self.out = torch.nn.Linear(H, D_OUT)

    def forward(self, x):
        h = torch.nn.functional.silu(self.norm(self.fc1(x)))
        h = torch.tanh(self.fc2(h))
        return self.out(h)


torch_model = TorchRegressor()
with torch.no_grad():
    torch_model.norm.weight.uniform_(0.5, 1.5)
    torch_model.norm.bias.uniform_(-0.3, 0.3)
    for m in (torch_model.fc1, torch_model.fc2, torch_model.out):
        m.weight.mul_(2.0)
        m.bias.uniform_(-0.5, 0.5)


class Dense(nnx.Module):
    def __init__(self, d_in, d_out, key):
        k1, k2 = jax.random.split(key)
        self.kernel = nnx.Param(jax.random.normal(k1, (d_in, d_out)) * d_in ** -0.5)
        self.bias = nnx.Param(jax.random.normal(k2, (d_out,)) * 0.1)

    def __call__(self, x):
        return x @ self.kernel.value + self.bias.value


class LayerNorm(nnx.Module):
    def __init__(self, d, eps=1e-5):
        self.scale = nnx.Param(jnp.ones((d,)))
        self.bias = nnx.Param(jnp.zeros((d,)))
        self.eps = eps

    def __call__(self, x):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)  # biased, as torch's LayerNorm
        return (x - mu) / jnp.sqrt(var + self.eps) * self.scale.value + self.bias.value


class JaxRegressor(nnx.Module):
    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.fc1 = Dense(D_IN, H, k1)
        self.norm = LayerNorm(H, eps=1e-5)
        self.fc2 = Dense(H, H, k2)
        self.out = Dense(H, D_OUT, k3)

    def __call__(self, x):
        h = jax.nn.silu(self.norm(self.fc1(x)))
        h = jnp.tanh(self.fc2(h))
        return self.out(h)


jax_model = JaxRegressor(jax.random.key(0))

batch = {
    "x": rng.normal(size=(B, D_IN)).astype(np.float32),
    "y": rng.normal(size=(B, D_OUT)).astype(np.float32),
}


def torch_loss(model, batch):
    return torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=0.9, weight_decay=WD)  # coupled: grad + wd * param


jax_optimizer = optax.chain(optax.add_decayed_weights(WD), optax.sgd(LR, momentum=0.9))
