"""EXPECTED: pooling_mismatch
WHERE: head
The port mean-pools all tokens before the head where torch takes the CLS token.
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

torch.manual_seed(1)
rng = np.random.default_rng(1)
IMG, PATCH, C_IN, D, NH, F, L, N_CLS, B = 8, 4, 3, 16, 2, 32, 2, 3, 3
DH, N_PATCH = D // NH, (IMG // PATCH) ** 2


class Embeddings(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Conv2d(C_IN, D, PATCH, stride=PATCH)
        self.cls_token = torch.nn.Parameter(0.5 * torch.randn(1, 1, D))
        self.pos_embed = torch.nn.Parameter(0.5 * torch.randn(1, N_PATCH + 1, D))

    def forward(self, x):  # NCHW
        p = self.proj(x).flatten(2).transpose(1, 2)  # [B, N, D], patches in row-major order
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        return torch.cat([cls, p], dim=1) + self.pos_embed


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.proj = torch.nn.Linear(D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, NH, DH).permute(2, 0, 3, 1, 4)  # each [B, NH, T, DH]
        att = torch.softmax(q @ k.transpose(-2, -1) * DH ** -0.5, dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, D))


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(D, F)
        self.fc2 = torch.nn.Linear(F, D)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(D, eps=1e-6)
        self.attn = Attention()
        self.norm2 = torch.nn.LayerNorm(D, eps=1e-6)
        self.mlp = MLP()

    def forward(self, x):  # pre-norm
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TorchViT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = Embeddings()
        self.blocks = torch.nn.ModuleList([Block() for _ in range(L)])
        self.norm = torch.nn.LayerNorm(D, eps=1e-6)
        self.head = torch.nn.Linear(D, N_CLS)

    def forward(self, x):
        h = self.embeddings(x)
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.norm(h)[:, 0])  # CLS pooling


torch_model = TorchViT()
with torch.no_grad():
    for name, p in torch_model.named_parameters():
        if "norm" in name and name.endswith("weight"):
            p.uniform_(0.6, 1.4)
        elif name.endswith("bias"):
            p.uniform_(-0.2, 0.2)


class JaxEmbeddings(nnx.Module):
    def __init__(self, rngs):
        self.proj = nnx.Conv(C_IN, D, (PATCH, PATCH), strides=(PATCH, PATCH), padding="VALID", rngs=rngs)
        self.cls_token = nnx.Param(jnp.zeros((1, 1, D)))
        self.pos_embed = nnx.Param(jnp.zeros((1, N_PATCH + 1, D)))

    def __call__(self, x):
        p = self.proj(jnp.transpose(x, (0, 2, 3, 1)))  # [B, H/P, W/P, D]
        p = p.reshape(p.shape[0], -1, D)  # row-major (h, w), as torch's flatten(2)
        cls = jnp.broadcast_to(self.cls_token.value, (x.shape[0], 1, D))
        return jnp.concatenate([cls, p], axis=1) + self.pos_embed.value


class JaxAttention(nnx.Module):
    def __init__(self, rngs):
        self.qkv = nnx.Linear(D, 3 * D, rngs=rngs)
        self.proj = nnx.Linear(D, D, rngs=rngs)

    def __call__(self, x):
        b, t, _ = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, NH, DH)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # each [B, T, NH, DH]
        # hand-written softmax attention (jax.nn.dot_product_attention takes its softmax in float32)
        weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(DH), axis=-1)
        ctx = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
        return self.proj(ctx.reshape(b, t, D))


class JaxMLP(nnx.Module):
    def __init__(self, rngs):
        self.fc1 = nnx.Linear(D, F, rngs=rngs)
        self.fc2 = nnx.Linear(F, D, rngs=rngs)

    def __call__(self, x):
        return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))


class JaxBlock(nnx.Module):
    def __init__(self, rngs):
        self.norm1 = nnx.LayerNorm(D, epsilon=1e-6, rngs=rngs)
        self.attn = JaxAttention(rngs)
        self.norm2 = nnx.LayerNorm(D, epsilon=1e-6, rngs=rngs)
        self.mlp = JaxMLP(rngs)

    def __call__(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class JaxViT(nnx.Module):
    def __init__(self, rngs):
        self.embeddings = JaxEmbeddings(rngs)
        self.blocks = nnx.List([JaxBlock(rngs) for _ in range(L)])
        self.norm = nnx.LayerNorm(D, epsilon=1e-6, rngs=rngs)
        self.head = nnx.Linear(D, N_CLS, rngs=rngs)

    def __call__(self, x):
        h = self.embeddings(x)
        for blk in self.blocks:
            h = blk(h)
        h = self.norm(h)
        pooled = h.mean(axis=1)  # mean over the tokens
        return self.head(pooled)


jax_model = JaxViT(nnx.Rngs(0))

batch = {
    "pixel_values": rng.normal(size=(B, C_IN, IMG, IMG)).astype(np.float32),
    "labels": np.array([2, 0, 1], dtype=np.int64),
}


def torch_loss(model, batch):
    return torch.nn.functional.cross_entropy(model(batch["pixel_values"]), batch["labels"])


def jax_loss(model, batch):
    logits = model(batch["pixel_values"])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()


def torch_optimizer(params):  # SGD, not Adam: the key bias has a zero gradient that Adam would turn into noise steps
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


jax_optimizer = optax.sgd(0.05, momentum=0.9)
