"""EXPECTED: weight_decay_coupled
WHERE: optimizer
LINES: 143-143
RELATION: none
A two-stage ConvNeXt (patchify stem, channels-first LayerNorms, 7x7 depthwise blocks with layer scale, AdamW) ported with nnx layers: torch AdamW decays the weights apart from the Adam step; the port adds the decay to the gradient before Adam (L2: optax add_decayed_weights then adam).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
import torch.nn as tnn
from flax import nnx

torch.manual_seed(812)
C, NCLS = 16, 4


class ChannelsFirstLayerNorm(tnn.Module):  # ConvNeXt's LayerNorm over the channel axis of [B, C, H, W]
    def __init__(self, c, eps=1e-6):
        super().__init__()
        self.weight = tnn.Parameter(torch.ones(c))
        self.bias = tnn.Parameter(torch.zeros(c))
        self.eps = eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class Block(tnn.Module):  # ConvNeXt block (Liu et al. 2022): dwconv 7x7, LN, 4x MLP with GELU, layer scale, residual
    def __init__(self, dim):
        super().__init__()
        self.dwconv = tnn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = tnn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = tnn.Linear(dim, 4 * dim)
        self.pwconv2 = tnn.Linear(4 * dim, dim)
        self.gamma = tnn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x):
        shortcut = x
        x = self.dwconv(x).permute(0, 2, 3, 1)
        x = self.pwconv2(torch.nn.functional.gelu(self.pwconv1(self.norm(x))))
        x = self.gamma * x
        return shortcut + x.permute(0, 3, 1, 2)


class TorchConvNeXt(tnn.Module):
    def __init__(self):
        super().__init__()
        self.stem = tnn.Conv2d(3, C, 2, stride=2)
        self.stem_norm = ChannelsFirstLayerNorm(C)
        self.block0 = Block(C)
        self.down_norm = ChannelsFirstLayerNorm(C)
        self.down = tnn.Conv2d(C, C, 2, stride=2)
        self.block1 = Block(C)
        self.head_norm = tnn.LayerNorm(C, eps=1e-6)
        self.head = tnn.Linear(C, NCLS)

    def forward(self, x):
        x = self.block0(self.stem_norm(self.stem(x)))
        x = self.block1(self.down(self.down_norm(x)))
        return self.head(self.head_norm(x.mean(dim=(2, 3))))


torch_model = TorchConvNeXt().eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if name.endswith("gamma"):
            p.uniform_(0.3, 1.2)  # trained layer scales, not the 1e-6 init
        elif "norm" in name and name.endswith("weight"):
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.2, 0.2)
        else:
            p.normal_(0.0, 0.25)


class LayerNorm(nnx.Module):
    def __init__(self, c, eps=1e-6):
        self.scale = nnx.Param(jnp.ones((c,)))
        self.bias = nnx.Param(jnp.zeros((c,)))
        self.eps = eps

    def __call__(self, x):  # NHWC: normalise the last axis
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + self.eps) * self.scale[...] + self.bias[...]


class ConvNeXtBlock(nnx.Module):
    def __init__(self, dim, rngs):
        self.dwconv = nnx.Conv(dim, dim, (7, 7), padding=((3, 3), (3, 3)), feature_group_count=dim, rngs=rngs)
        self.norm = nnx.LayerNorm(dim, epsilon=1e-6, use_fast_variance=False, rngs=rngs)
        self.pwconv1 = nnx.Linear(dim, 4 * dim, rngs=rngs)
        self.pwconv2 = nnx.Linear(4 * dim, dim, rngs=rngs)
        self.gamma = nnx.Param(jnp.full((dim,), 1e-6))

    def __call__(self, x):
        shortcut = x
        h = self.pwconv2(jax.nn.gelu(self.pwconv1(self.norm(self.dwconv(x))), approximate=False))
        return shortcut + self.gamma[...] * h


class ConvNeXt(nnx.Module):
    def __init__(self, rngs):
        self.stem = nnx.Conv(3, C, (2, 2), strides=(2, 2), padding="VALID", rngs=rngs)
        self.stem_norm = LayerNorm(C)
        self.block0 = ConvNeXtBlock(C, rngs)
        self.down_norm = LayerNorm(C)
        self.down = nnx.Conv(C, C, (2, 2), strides=(2, 2), padding="VALID", rngs=rngs)
        self.block1 = ConvNeXtBlock(C, rngs)
        self.head_norm = nnx.LayerNorm(C, epsilon=1e-6, use_fast_variance=False, rngs=rngs)
        self.head = nnx.Linear(C, NCLS, rngs=rngs)

    def __call__(self, x):  # x [B, 3, H, W] as torch's
        x = jnp.transpose(x, (0, 2, 3, 1))
        x = self.block0(self.stem_norm(self.stem(x)))
        x = self.block1(self.down(self.down_norm(x)))
        return self.head(self.head_norm(x.mean(axis=(1, 2))))


jax_model = ConvNeXt(nnx.Rngs(0))

_r = np.random.default_rng(812)
batch = {"x": _r.normal(size=(2, 3, 16, 16)).astype(np.float32), "y": np.array([0, 2], dtype=np.int64)}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.05)


jax_optimizer = optax.chain(optax.add_decayed_weights(0.05), optax.adam(3e-3))
