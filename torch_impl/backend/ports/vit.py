"""Worked port 6, torch side: transformers' ViTForImageClassification, unmodified, from a tiny config.

The model: 4x4 patches of an 8x8 image embedded by a strided Conv2d, flattened row by row, a
learned [CLS] token in front, learned position embeddings -> pre-norm layers (x + attention(LN(x)),
x + W2 GELU(W1 LN(x))) -> LayerNorm -> a Linear classifier on the [CLS] token; cross-entropy; AdamW.
Port note: images are channels first (NCHW; NNX convolutions take NHWC); the patch sequence is
row-major over the patch grid; cls_token and position_embeddings are bare parameters with a
leading 1; LayerNorm's eps is 1e-12; GELU is exact. Dropout is off (eval mode).
Shapes: B batch, C channels, H x W image, N patches + 1, D model width, K classes.
Reference: Dosovitskiy et al. 2021, arXiv:2010.11929; transformers, models/vit/modeling_vit.py.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from transformers import ViTConfig, ViTForImageClassification

__all__ = ["SIZES", "ViTForImageClassification", "build", "batch", "loss", "optimizer"]

SIZES = {
    "small": {"image": 8, "patch": 4, "channels": 3, "dim": 32, "heads": 4, "hidden": 64, "layers": 1, "classes": 5,
              "batch": 2},
}  # fmt: skip


def build(size: str = "small", seed: int = 0) -> ViTForImageClassification:
    """ViTForImageClassification from a tiny ViTConfig, HF's init seeded locally, float32, in eval mode."""
    s = SIZES[size]
    config = ViTConfig(
        image_size=s["image"],
        patch_size=s["patch"],
        num_channels=s["channels"],
        hidden_size=s["dim"],
        num_attention_heads=s["heads"],
        intermediate_size=s["hidden"],
        num_hidden_layers=s["layers"],
        num_labels=s["classes"],
    )
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left as it was
        torch.manual_seed(seed)
        return ViTForImageClassification(config).eval()


def batch(size: str = "small", seed: int = 0) -> dict[str, np.ndarray]:
    """{"pixel_values": [B, C, H, W] float32 (channels first), "labels": [B] int64}."""
    s, rng = SIZES[size], np.random.default_rng(seed)
    return {
        "pixel_values": rng.standard_normal((s["batch"], s["channels"], s["image"], s["image"])).astype(np.float32),
        "labels": rng.integers(0, s["classes"], size=s["batch"]),
    }


def loss(model: ViTForImageClassification, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of the classifier's logits against the labels, a scalar."""
    return F.cross_entropy(model(pixel_values=batch["pixel_values"]).logits, batch["labels"])


def optimizer(params) -> torch.optim.Optimizer:
    """AdamW, lr 1e-3, weight decay 0.01."""
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
