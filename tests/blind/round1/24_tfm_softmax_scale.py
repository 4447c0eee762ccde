"""EXPECTED: attention_scale
WHERE: module
The port scales the attention scores by 1/sqrt(model width) instead of 1/sqrt(head width).
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(0)
rng = np.random.default_rng(0)
B, T, D, NH, F, N_CLS = 3, 6, 16, 2, 32, 3
DH = D // NH


class TorchBlock(torch.nn.Module):
    """Pre-LN encoder block, hand-written attention with a key padding mask, mean-pooled classifier."""

    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(D)
        self.q = torch.nn.Linear(D, D)
        self.k = torch.nn.Linear(D, D)
        self.v = torch.nn.Linear(D, D)
        self.o = torch.nn.Linear(D, D)
        self.ln2 = torch.nn.LayerNorm(D)
        self.ff1 = torch.nn.Linear(D, F)
        self.ff2 = torch.nn.Linear(F, D)
        self.head = torch.nn.Linear(D, N_CLS)

    def forward(self, x, mask):  # x [B, T, D]; mask [B, T] bool, True = real token
        h = self.ln1(x)
        q = self.q(h).view(B, T, NH, DH).transpose(1, 2)
        k = self.k(h).view(B, T, NH, DH).transpose(1, 2)
        v = self.v(h).view(B, T, NH, DH).transpose(1, 2)
        s = q @ k.transpose(-1, -2) / math.sqrt(DH)
        s = s.masked_fill(~mask[:, None, None, :], float("-inf"))
        ctx = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.o(ctx)
        x = x + self.ff2(torch.nn.functional.gelu(self.ff1(self.ln2(x))))
        m = mask[..., None].to(x.dtype)
        return self.head((x * m).sum(1) / m.sum(1))


torch_model = TorchBlock()
with torch.no_grad():
    for ln in (torch_model.ln1, torch_model.ln2):
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.2, 0.2)


class JaxBlock(nnx.Module):
    def __init__(self, rngs):
        self.ln1 = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.q = nnx.Linear(D, D, rngs=rngs)
        self.k = nnx.Linear(D, D, rngs=rngs)
        self.v = nnx.Linear(D, D, rngs=rngs)
        self.o = nnx.Linear(D, D, rngs=rngs)
        self.ln2 = nnx.LayerNorm(D, epsilon=1e-5, rngs=rngs)
        self.ff1 = nnx.Linear(D, F, rngs=rngs)
        self.ff2 = nnx.Linear(F, D, rngs=rngs)
        self.head = nnx.Linear(D, N_CLS, rngs=rngs)

    def __call__(self, x, mask):
        h = self.ln1(x)
        q = self.q(h).reshape(B, T, NH, DH)
        k = self.k(h).reshape(B, T, NH, DH)
        v = self.v(h).reshape(B, T, NH, DH)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * D ** -0.5
        s = s + (1.0 - mask[:, None, None, :].astype(s.dtype)) * -1e9  # additive padding mask
        ctx = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v).reshape(B, T, D)
        x = x + self.o(ctx)
        x = x + self.ff2(jax.nn.gelu(self.ff1(self.ln2(x)), approximate=False))
        m = mask[..., None].astype(x.dtype)
        return self.head((x * m).sum(1) / m.sum(1))


jax_model = JaxBlock(nnx.Rngs(0))

lengths = np.array([6, 4, 3])
batch = {
    "x": (0.05 * rng.normal(size=(B, T, D))).astype(np.float32),  # embedding-sized inputs
    "mask": np.arange(T)[None, :] < lengths[:, None],
    "y": np.array([2, 0, 1], dtype=np.int64),
}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["x"], batch["mask"]), batch["y"])


def jax_loss(model, batch):
    return optax.softmax_cross_entropy_with_integer_labels(model(batch["x"], batch["mask"]), batch["y"]).mean()


def torch_optimizer(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)


jax_optimizer = optax.adamw(1e-2, weight_decay=0.01)
