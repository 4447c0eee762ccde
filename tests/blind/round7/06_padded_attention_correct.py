"""EXPECTED: correct
WHERE: none
LINES: none
Left-padded sequences through a two-head attention layer (F.scaled_dot_product_attention with a boolean key-padding mask, True = attend) ported with jax.nn.dot_product_attention and the same mask, the loss a mean over real tokens only.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(706)
D, NH, T, B = 16, 2, 6, 3
HD = D // NH


class TorchAttn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = torch.nn.Linear(D, D)
        self.k_proj = torch.nn.Linear(D, D, bias=False)  # a key bias has no gradient through softmax (Whisper drops it)
        self.v_proj = torch.nn.Linear(D, D)
        self.o_proj = torch.nn.Linear(D, D)

    def forward(self, x, keep):  # x [B, T, D], keep [B, T] bool (True = real token)
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, NH, HD).transpose(1, 2)
        k = self.k_proj(x).view(b, t, NH, HD).transpose(1, 2)
        v = self.v_proj(x).view(b, t, NH, HD).transpose(1, 2)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        return self.o_proj(o.transpose(1, 2).reshape(b, t, D))


class TorchModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = TorchAttn()
        self.head = torch.nn.Linear(D, 1)

    def forward(self, x, keep):
        return self.head(x + self.attn(x, keep))[..., 0]


torch_model = TorchModel()
with torch.no_grad():
    for p in torch_model.parameters():
        p.normal_(0.0, 0.4)


class JaxAttn(nnx.Module):
    def __init__(self, rngs):
        self.q_proj = nnx.Linear(D, D, rngs=rngs)
        self.k_proj = nnx.Linear(D, D, use_bias=False, rngs=rngs)
        self.v_proj = nnx.Linear(D, D, rngs=rngs)
        self.o_proj = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x, keep):
        b, t, _ = x.shape
        q = self.q_proj(x).reshape(b, t, NH, HD)
        k = self.k_proj(x).reshape(b, t, NH, HD)
        v = self.v_proj(x).reshape(b, t, NH, HD)
        o = jax.nn.dot_product_attention(q, k, v, mask=keep[:, None, None, :])
        return self.o_proj(o.reshape(b, t, D))


class JaxModel(nnx.Module):
    def __init__(self, rngs):
        self.attn = JaxAttn(rngs)
        self.head = nnx.Linear(D, 1, rngs=rngs)

    def __call__(self, x, keep):
        return self.head(x + self.attn(x, keep))[..., 0]


jax_model = JaxModel(nnx.Rngs(0))

_r = np.random.default_rng(706)
_lens = np.array([6, 4, 2])
_keep = np.arange(T)[None, :] >= (T - _lens)[:, None]  # left padding
_x = _r.normal(size=(B, T, D))
_x[~_keep] = 0.0
batch = {"x": _x, "keep": _keep, "y": _r.normal(size=(B, T))}


def torch_loss(model, batch):
    keep = batch["keep"]
    err = (model(batch["x"], keep) - batch["y"]) ** 2
    w = keep.to(err.dtype)
    return (err * w).sum() / w.sum()


def jax_loss(model, batch):
    keep = batch["keep"]
    err = (model(batch["x"], keep) - batch["y"]) ** 2
    w = keep.astype(err.dtype)
    return (err * w).sum() / w.sum()


def torch_optimizer(params):
    return torch.optim.Adam(params, lr=5e-3)


jax_optimizer = optax.adam(5e-3, b1=0.9, b2=0.999, eps=1e-8)
