"""Worked port 6, JAX side: transformers' ViTForImageClassification in Flax NNX, correct and with one bug each.

The correct port: the NCHW image moved to NHWC, an nnx.Conv patch embedding (kernel = stride =
patch), the patch grid flattened row by row, [CLS] in front, position embeddings added, pre-norm
layers (nnx.LayerNorm(epsilon=1e-12), softmax attention, an exact-GELU MLP), a final LayerNorm
and the classifier on [CLS]; cross-entropy; optax.adamw. Attribute names are HF's
(vit/layers/0/attention/q_proj), so the weights come across by path.
Gradient flow: no stop: everything trains.
Port note: VARIANTS name each buggy port; no catalogue pitfall names them (""): the checker must
report DIFFERS. `patch_order` flattens the patch grid column by column (the positions then
label the wrong patches); `pool_mean` classifies the mean of all tokens, not [CLS] (a port
written from a global-average-pool ViT).
Shapes: B batch, C channels, H x W image, N patches + 1, D model width, K classes.
Reference: Dosovitskiy et al. 2021, arXiv:2010.11929; Flax docs, flax.nnx.Conv.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx

__all__ = ["VARIANTS", "ViTEmbeddings", "ViTAttention", "ViTLayer", "ViTModel", "ViTForImageClassification",
           "build", "loss", "optimizer"]  # fmt: skip

VARIANTS = {"correct": None, "patch_order": "", "pool_mean": ""}


class _Patches(nnx.Module):
    def __init__(self, channels: int, dim: int, patch: int, rngs: nnx.Rngs) -> None:
        self.projection = nnx.Conv(channels, dim, (patch, patch), strides=(patch, patch), padding="VALID", rngs=rngs)

    def __call__(self, images: jax.Array) -> jax.Array:
        return self.projection(images)  # [B, h, w, D]


class ViTEmbeddings(nnx.Module):
    """pixel_values [B, C, H, W] -> [CLS] and the patches, plus positions: [B, N + 1, D]."""

    def __init__(self, image: int, patch: int, channels: int, dim: int, variant: str, rngs: nnx.Rngs) -> None:
        self.variant = variant
        self.patch_embeddings = _Patches(channels, dim, patch, rngs)
        self.cls_token = nnx.Param(jnp.zeros((1, 1, dim)))
        self.position_embeddings = nnx.Param(jnp.zeros((1, (image // patch) ** 2 + 1, dim)))

    def __call__(self, pixel_values: jax.Array) -> jax.Array:
        grid = self.patch_embeddings(pixel_values.transpose(0, 2, 3, 1))  # NCHW -> NHWC -> [B, h, w, D]
        if self.variant == "patch_order":
            grid = grid.transpose(0, 2, 1, 3)  # column by column
        b, _, _, dim = grid.shape
        tokens = jnp.concatenate((jnp.broadcast_to(self.cls_token[...], (b, 1, dim)), grid.reshape(b, -1, dim)), axis=1)
        return tokens + self.position_embeddings[...]


class ViTAttention(nnx.Module):
    """x [B, N, D] -> softmax attention over every token, projected back [B, N, D]."""

    def __init__(self, dim: int, heads: int, rngs: nnx.Rngs) -> None:
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nnx.Linear(dim, dim, rngs=rngs) for _ in range(4))

    def __call__(self, x: jax.Array) -> jax.Array:
        b, n, dim = x.shape
        q, k, v = (
            f(x).reshape(b, n, self.heads, -1).transpose(0, 2, 1, 3) for f in (self.q_proj, self.k_proj, self.v_proj)
        )
        logits = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(dim // self.heads).astype(x.dtype)  # [B, H, N, N]
        weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(
            v.dtype
        )  # the softmax in float32, as torch's kernel keeps it, cast back
        return self.o_proj((weights @ v).transpose(0, 2, 1, 3).reshape(b, n, dim))


class _MLP(nnx.Module):
    def __init__(self, dim: int, hidden: int, rngs: nnx.Rngs) -> None:
        self.fc1, self.fc2 = nnx.Linear(dim, hidden, rngs=rngs), nnx.Linear(hidden, dim, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc2(jax.nn.gelu(self.fc1(x), approximate=False))


class ViTLayer(nnx.Module):
    """Pre-norm layer: x + attention(LN(x)), then + MLP(LN(x)); [B, N, D] -> [B, N, D]."""

    def __init__(self, dim: int, heads: int, hidden: int, rngs: nnx.Rngs) -> None:
        self.attention = ViTAttention(dim, heads, rngs)
        self.layernorm_before = nnx.LayerNorm(dim, epsilon=1e-12, rngs=rngs)
        self.layernorm_after = nnx.LayerNorm(dim, epsilon=1e-12, rngs=rngs)
        self.mlp = _MLP(dim, hidden, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attention(self.layernorm_before(x))
        return x + self.mlp(self.layernorm_after(x))


class ViTModel(nnx.Module):
    """pixel_values [B, C, H, W] -> LN(layers(embeddings)) [B, N + 1, D]."""

    def __init__(self, image, patch, channels, dim, heads, hidden, layers, variant: str, rngs: nnx.Rngs) -> None:
        self.embeddings = ViTEmbeddings(image, patch, channels, dim, variant, rngs)
        self.layers = nnx.List([ViTLayer(dim, heads, hidden, rngs) for _ in range(layers)])
        self.layernorm = nnx.LayerNorm(dim, epsilon=1e-12, rngs=rngs)

    def __call__(self, pixel_values: jax.Array) -> jax.Array:
        x = self.embeddings(pixel_values)
        for layer in self.layers:
            x = layer(x)
        return self.layernorm(x)


class ViTForImageClassification(nnx.Module):
    """pixel_values [B, C, H, W] -> logits [B, K] from the [CLS] token."""

    def __init__(self, image, patch, channels, dim, heads, hidden, layers, classes, variant: str) -> None:
        rngs = nnx.Rngs(0)
        self.variant = variant
        self.vit = ViTModel(image, patch, channels, dim, heads, hidden, layers, variant, rngs)
        self.classifier = nnx.Linear(dim, classes, rngs=rngs)

    def __call__(self, pixel_values: jax.Array) -> jax.Array:
        hidden = self.vit(pixel_values)
        return self.classifier(hidden.mean(1) if self.variant == "pool_mean" else hidden[:, 0])


def build(variant: str = "correct", *, image: int, patch: int, channels: int, dim: int, heads: int, hidden: int,
          layers: int, classes: int, **_) -> ViTForImageClassification:  # fmt: skip
    """The NNX port named by `variant` (a key of VARIANTS), freshly initialised."""
    if variant not in VARIANTS:
        raise ValueError(f"vit: variant expected one of {list(VARIANTS)}, got {variant!r}")
    return ViTForImageClassification(image, patch, channels, dim, heads, hidden, layers, classes, variant)


def loss(model: ViTForImageClassification, batch: dict[str, jax.Array]) -> jax.Array:
    """Mean cross-entropy of the logits against the integer labels, a scalar."""
    logits = model(batch["pixel_values"]).astype(jnp.float32)  # as torch's kernel: its log-softmax in float32
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()


def optimizer(variant: str = "correct") -> optax.GradientTransformation:
    """optax.adamw(lr 1e-3, weight decay 0.01): torch.optim.AdamW's defaults otherwise."""
    return optax.adamw(1e-3, weight_decay=0.01)
