"""EXPECTED: correct
WHERE: none
LINES: none
RELATION: none
An MLP-Mixer (4x4 patch stem on 16x16 images, 16 tokens of width 16, two blocks of token- and channel-mixing MLPs, mean pool) ported with nnx layers; SGD with momentum and weight decay; the port matches.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
import torch.nn as tnn
from flax import nnx

torch.manual_seed(808)
C, N, TH, CH, NCLS = 16, 16, 24, 32, 4  # 16x16 images, 4x4 patches -> N = 16 tokens of width C = 16


class TorchMlp(tnn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.fc1 = tnn.Linear(d, h)
        self.fc2 = tnn.Linear(h, d)

    def forward(self, x):
        return self.fc2(tnn.functional.gelu(self.fc1(x)))


class TorchMixerBlock(tnn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = tnn.LayerNorm(C, eps=1e-6)
        self.token_mlp = TorchMlp(N, TH)
        self.norm2 = tnn.LayerNorm(C, eps=1e-6)
        self.channel_mlp = TorchMlp(C, CH)

    def forward(self, x):  # [B, N, C]
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class TorchMixer(tnn.Module):
    def __init__(self):
        super().__init__()
        self.stem = tnn.Conv2d(3, C, 4, stride=4)
        self.blocks = tnn.ModuleList([TorchMixerBlock() for _ in range(2)])
        self.norm = tnn.LayerNorm(C, eps=1e-6)
        self.head = tnn.Linear(C, NCLS)

    def forward(self, img):  # [B, 3, 16, 16]
        x = self.stem(img).flatten(2).transpose(1, 2)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x).mean(dim=1))


torch_model = TorchMixer().eval()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "norm" in name and name.endswith("weight"):
            p.uniform_(0.6, 1.5)
        elif name.endswith("bias"):
            p.uniform_(-0.2, 0.2)
        else:
            p.normal_(0.0, 0.3)


class Mlp(nnx.Module):
    def __init__(self, d, h, rngs):
        self.fc1 = nnx.Linear(d, h, rngs=rngs)
        self.fc2 = nnx.Linear(h, d, rngs=rngs)

    def __call__(self, x):
        return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))


class MixerBlock(nnx.Module):
    def __init__(self, rngs):
        self.norm1 = nnx.LayerNorm(C, epsilon=1e-6, rngs=rngs)
        self.token_mlp = Mlp(N, TH, rngs)
        self.norm2 = nnx.LayerNorm(C, epsilon=1e-6, rngs=rngs)
        self.channel_mlp = Mlp(C, CH, rngs)

    def __call__(self, x):  # [B, N, C]
        x = x + jnp.swapaxes(self.token_mlp(jnp.swapaxes(self.norm1(x), 1, 2)), 1, 2)
        x = x + self.channel_mlp(self.norm2(x))
        return x


class Mixer(nnx.Module):
    def __init__(self, rngs):
        self.stem = nnx.Conv(3, C, (4, 4), strides=(4, 4), padding="VALID", rngs=rngs)
        self.blocks = nnx.List([MixerBlock(rngs) for _ in range(2)])
        self.norm = nnx.LayerNorm(C, epsilon=1e-6, rngs=rngs)
        self.head = nnx.Linear(C, NCLS, rngs=rngs)

    def __call__(self, img):
        x = self.stem(img.transpose(0, 2, 3, 1))
        x = x.reshape(x.shape[0], N, C)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x).mean(axis=1))


jax_model = Mixer(nnx.Rngs(8))

rng = np.random.default_rng(808)
batch = {"img": rng.normal(size=(2, 3, 16, 16)).astype(np.float32), "label": np.array([1, 3], dtype=np.int64)}


def torch_loss(model, batch):
    return tnn.functional.cross_entropy(model(batch["img"]), batch["label"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["img"]), batch["label"]).mean()


def torch_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)


jax_optimizer = optax.chain(optax.add_decayed_weights(1e-3), optax.sgd(0.05, momentum=0.9))
