"""EXPECTED: rmsprop_eps_placement
WHERE: optimizer
LINES: 131-131
RELATION: none
A temporal causal CNN (left-padded causal input conv, two depthwise-separable dilated blocks with inference BatchNorm, per-step linear head, centered RMSprop) ported with nnx layers: torch RMSprop adds eps outside the square root; the port's optax.rmsprop keeps its default eps_in_sqrt=True.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
import torch.nn as tnn
import torch.nn.functional as F
from flax import nnx

torch.manual_seed(2024)
CIN, C, COUT, T = 4, 16, 3, 16


class TorchCausalConv(tnn.Module):
    def __init__(self, cin, cout, k, dilation=1, groups=1):
        super().__init__()
        self.pad = (k - 1) * dilation
        self.conv = tnn.Conv1d(cin, cout, k, dilation=dilation, groups=groups)

    def forward(self, x):  # [B, C, T]
        return self.conv(F.pad(x, (self.pad, 0)))


class TorchBlock(tnn.Module):
    def __init__(self, dilation):
        super().__init__()
        self.depthwise = TorchCausalConv(C, C, 3, dilation=dilation, groups=C)
        self.norm = tnn.BatchNorm1d(C)
        self.pointwise = tnn.Conv1d(C, C, 1)

    def forward(self, x):
        h = self.pointwise(F.relu(self.norm(self.depthwise(x))))
        return x + h


class TorchTCN(tnn.Module):
    def __init__(self):
        super().__init__()
        self.inp = TorchCausalConv(CIN, C, 2)
        self.block0 = TorchBlock(1)
        self.block1 = TorchBlock(2)
        self.head = tnn.Linear(C, COUT)

    def forward(self, x):  # x: [B, T, CIN]
        h = self.inp(x.transpose(1, 2))
        h = self.block1(self.block0(h))
        return self.head(h.transpose(1, 2))


torch_model = TorchTCN().eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "norm.weight" in name:
            p.uniform_(0.6, 1.5)
        elif name.endswith("bias"):
            p.uniform_(-0.3, 0.3)
        else:
            p.normal_(0.0, 0.4)
    for m in (torch_model.block0.norm, torch_model.block1.norm):
        m.running_mean.uniform_(-0.3, 0.3)
        m.running_var.uniform_(0.5, 2.0)


class CausalConv(nnx.Module):
    def __init__(self, cin, cout, k, rngs, dilation=1, groups=1):
        self.pad = (k - 1) * dilation
        self.conv = nnx.Conv(cin, cout, (k,), kernel_dilation=(dilation,), feature_group_count=groups,
                             padding="VALID", rngs=rngs)

    def __call__(self, x):  # [B, T, C]
        return self.conv(jnp.pad(x, ((0, 0), (self.pad, 0), (0, 0))))


class InputConv(nnx.Module):
    def __init__(self, rngs):
        self.conv = nnx.Conv(CIN, C, (2,), padding=((1, 0),), rngs=rngs)

    def __call__(self, x):
        return self.conv(x)


class Block(nnx.Module):
    def __init__(self, dilation, rngs):
        self.depthwise = CausalConv(C, C, 3, rngs, dilation=dilation, groups=C)
        self.norm = nnx.BatchNorm(C, use_running_average=True, momentum=0.9, epsilon=1e-5, rngs=rngs)
        self.pointwise = nnx.Conv(C, C, (1,), rngs=rngs)

    def __call__(self, x):
        h = self.pointwise(nnx.relu(self.norm(self.depthwise(x))))
        return x + h


class TCN(nnx.Module):
    def __init__(self, rngs):
        self.inp = InputConv(rngs)
        self.block0 = Block(1, rngs)
        self.block1 = Block(2, rngs)
        self.head = nnx.Linear(C, COUT, rngs=rngs)

    def __call__(self, x):
        h = self.inp(x)
        h = self.block1(self.block0(h))
        return self.head(h)


jax_model = TCN(nnx.Rngs(0))

rng = np.random.default_rng(2024)
xs = rng.normal(size=(2, T, CIN)).astype(np.float32)
batch = {"x": xs, "y": (np.tanh(np.cumsum(xs[..., :COUT], axis=1) * 0.3) + 0.1).astype(np.float32)}


def torch_loss(model, batch):
    return F.mse_loss(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return jnp.mean((model(batch["x"]) - batch["y"]) ** 2)


def torch_optimizer(params):
    return torch.optim.RMSprop(params, lr=1e-2, alpha=0.9, eps=1e-3, centered=True)


jax_optimizer = optax.rmsprop(1e-2, decay=0.9, eps=1e-3, centered=True)
