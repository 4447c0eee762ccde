"""EXPECTED: upsample_mode
WHERE: up1
LINES: 110-110
RELATION: none
A small U-Net (reflect-padded stem, avg-pool down block, nearest-upsample + 1x1 proj up block concatenating [skip, up], inference BatchNorm, class-weighted per-pixel cross-entropy) ported with nnx layers: the port upsamples bilinearly (jax.image.resize) where torch's F.interpolate uses mode='nearest'.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
import torch.nn as tnn
import torch.nn.functional as F
from flax import nnx

torch.manual_seed(4040)
NCLS = 3
CLASS_WEIGHTS = [0.5, 1.0, 2.0]


class TorchConvBlock(tnn.Module):
    def __init__(self, cin, cout, padding_mode="zeros"):
        super().__init__()
        self.conv = tnn.Conv2d(cin, cout, 3, padding=1, padding_mode=padding_mode, bias=False)
        self.bn = tnn.BatchNorm2d(cout)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class TorchDown(tnn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.block = TorchConvBlock(cin, cout)

    def forward(self, x):
        return self.block(F.avg_pool2d(x, 2))


class TorchUp(tnn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.proj = tnn.Conv2d(cin, cout, 1)
        self.block = TorchConvBlock(2 * cout, cout)

    def forward(self, x, skip):
        x = self.proj(F.interpolate(x, scale_factor=2, mode="nearest"))
        return self.block(torch.cat([skip, x], dim=1))


class TorchUNet(tnn.Module):
    def __init__(self):
        super().__init__()
        self.inc = TorchConvBlock(3, 8, padding_mode="reflect")
        self.down1 = TorchDown(8, 16)
        self.up1 = TorchUp(16, 8)
        self.outc = tnn.Conv2d(8, NCLS, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        return self.outc(self.up1(x2, x1))


torch_model = TorchUNet().eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if p.dim() == 1 and ".bn." in name and name.endswith("weight"):
            p.uniform_(0.6, 1.5)
        elif name.endswith("bias"):
            p.uniform_(-0.3, 0.3)
        else:
            p.normal_(0.0, 0.4)
    for m in torch_model.modules():
        if isinstance(m, tnn.BatchNorm2d):
            m.running_mean.uniform_(-0.4, 0.4)
            m.running_var.uniform_(0.5, 2.0)


class ConvBlock(nnx.Module):
    def __init__(self, cin, cout, rngs, pad="zeros"):
        self.pad = pad
        self.conv = nnx.Conv(cin, cout, (3, 3), padding="VALID", use_bias=False, rngs=rngs)
        self.bn = nnx.BatchNorm(cout, use_running_average=True, epsilon=1e-5, rngs=rngs)

    def __call__(self, x):
        if self.pad == "reflect":
            x = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect")
        else:
            x = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
        return nnx.relu(self.bn(self.conv(x)))


class Down(nnx.Module):
    def __init__(self, cin, cout, rngs):
        self.block = ConvBlock(cin, cout, rngs)

    def __call__(self, x):
        B, Hh, Ww, C = x.shape
        pooled = x.reshape(B, Hh // 2, 2, Ww // 2, 2, C).mean(axis=(2, 4))
        return self.block(pooled)


class Up(nnx.Module):
    def __init__(self, cin, cout, rngs):
        self.proj = nnx.Conv(cin, cout, (1, 1), rngs=rngs)
        self.block = ConvBlock(2 * cout, cout, rngs)

    def __call__(self, x, skip):
        x = self.proj(jax.image.resize(x, (x.shape[0], 2 * x.shape[1], 2 * x.shape[2], x.shape[3]), "bilinear"))
        cat = jnp.concatenate([skip, x], axis=-1)
        return self.block(cat)


class UNet(nnx.Module):
    def __init__(self, rngs):
        self.inc = ConvBlock(3, 8, rngs, pad="reflect")
        self.down1 = Down(8, 16, rngs)
        self.up1 = Up(16, 8, rngs)
        self.outc = nnx.Conv(8, NCLS, (1, 1), rngs=rngs)

    def __call__(self, x):  # NCHW in, NHWC logits out
        x = jnp.transpose(x, (0, 2, 3, 1))
        x1 = self.inc(x)
        x2 = self.down1(x1)
        return self.outc(self.up1(x2, x1))


jax_model = UNet(nnx.Rngs(0))

rng = np.random.default_rng(4040)
batch = {"x": rng.normal(size=(2, 3, 8, 8)).astype(np.float32), "y": rng.integers(0, NCLS, size=(2, 8, 8)).astype(np.int64)}


def torch_loss(model, batch):
    w = torch.tensor(CLASS_WEIGHTS, dtype=batch["x"].dtype)
    return F.cross_entropy(model(batch["x"]), batch["y"], weight=w)


def jax_loss(model, batch):
    logits = model(batch["x"])
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])
    wy = jnp.asarray(CLASS_WEIGHTS, dtype=logits.dtype)[batch["y"]]
    return jnp.sum(wy * nll) / jnp.sum(wy)


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=2e-3, betas=(0.5, 0.999))


jax_optimizer = optax.adam(2e-3, b1=0.5, b2=0.999)
