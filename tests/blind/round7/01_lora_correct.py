"""EXPECTED: correct
WHERE: none
LINES: none
A two-layer MLP whose Linear layers are a LoRALinear(nn.Linear) subclass (frozen base, trained A and B, scaling alpha / r) ported with kernel, bias, lora_a, lora_b and its own rule.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

from detach_parity import register_rule

torch.manual_seed(701)
D_IN, H, D_OUT, R, ALPHA = 12, 24, 6, 4, 16.0


class LoRALinear(torch.nn.Linear):
    def __init__(self, in_features, out_features, r, alpha):
        super().__init__(in_features, out_features)
        self.lora_A = torch.nn.Parameter(torch.randn(r, in_features) * 0.3)
        self.lora_B = torch.nn.Parameter(torch.randn(out_features, r) * 0.3)  # away from 0
        self.scaling = alpha / r
        self.weight.requires_grad_(False)
        self.bias.requires_grad_(False)

    def forward(self, x):
        return super().forward(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling


class TorchMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = LoRALinear(D_IN, H, R, ALPHA)
        self.fc2 = LoRALinear(H, D_OUT, R, ALPHA)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


torch_model = TorchMLP()
with torch.no_grad():
    for m in (torch_model.fc1, torch_model.fc2):
        m.bias.uniform_(-0.5, 0.5)


class LoRADense(nnx.Module):
    def __init__(self, din, dout, r, alpha, rngs):
        self.kernel = nnx.Param(jnp.zeros((din, dout)))
        self.bias = nnx.Param(jnp.zeros((dout,)))
        self.lora_a = nnx.LoRAParam(jnp.zeros((din, r)))
        self.lora_b = nnx.LoRAParam(jnp.zeros((r, dout)))
        self.scaling = alpha / r

    def __call__(self, x):
        return x @ self.kernel[...] + self.bias[...] + (x @ self.lora_a[...] @ self.lora_b[...]) * self.scaling


register_rule(LoRALinear, {"weight": ("kernel", (1, 0)), "bias": "bias",
                           "lora_A": ("lora_a", (1, 0)), "lora_B": ("lora_b", (1, 0))})


class JaxMLP(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = LoRADense(D_IN, H, R, ALPHA, rngs)
        self.fc2 = LoRADense(H, D_OUT, R, ALPHA, rngs)

    def __call__(self, x):
        return self.fc2(jnp.tanh(self.fc1(x)))


jax_model = JaxMLP(nnx.Rngs(0))

_r = np.random.default_rng(701)
batch = {"x": _r.normal(size=(4, D_IN)), "y": _r.normal(size=(4, D_OUT))}


def torch_loss(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def jax_loss(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def torch_optimizer(params):
    return torch.optim.AdamW([p for p in params if p.requires_grad], lr=1e-2, weight_decay=0.01)


jax_optimizer = (optax.adamw(1e-2, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01), nnx.LoRAParam)
