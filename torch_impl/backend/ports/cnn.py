"""Worked port 1, torch side: a small CNN classifier with BatchNorm, trained in train mode.

The model: conv 3x3 -> BatchNorm2d -> ReLU -> grouped conv 3x3 stride 2 -> BatchNorm2d -> ReLU ->
global mean pool -> Linear + ReLU -> Linear head; cross-entropy; SGD with momentum and weight
decay. In train mode BatchNorm normalises with the batch statistics and updates its running
statistics (buffers, outside the graph): the K steps compare them too.
Port note: torch images are [B, C, H, W]; the NNX port transposes the same batch to
[B, H, W, C] (its conv kernels are [kh, kw, in/groups, out], torch_impl/_layout.py).
Shapes: B batch, C channels, H, W image, K classes.
Reference: Ioffe & Szegedy 2015, arXiv:1502.03167 (BatchNorm); He et al. 2015, arXiv:1512.03385.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SIZES", "Net", "build", "batch", "loss", "optimizer"]

SIZES = {
    "small": {"channels": 3, "width": 4, "classes": 5, "batch": 6, "height": 6, "image_width": 5},
    "1m": {"channels": 3, "width": 96, "classes": 10, "batch": 16, "height": 16, "image_width": 16},
}


class Net(nn.Module):
    """image [B, C, H, W] -> logits [B, K]."""

    def __init__(self, channels: int, width: int, classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, groups=2)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.fc = nn.Linear(2 * width, 2 * width)
        self.head = nn.Linear(2 * width, classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(image)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.head(F.relu(self.fc(x.mean(dim=(2, 3)))))  # [B, K]


def build(size: str = "small", seed: int = 0) -> Net:
    """A freshly initialised Net (torch's default init, seeded locally), in train mode, float32."""
    s = SIZES[size]
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left as it was
        torch.manual_seed(seed)
        return Net(s["channels"], s["width"], s["classes"]).train()


def batch(size: str = "small", seed: int = 0) -> dict[str, np.ndarray]:
    """{"image": [B, C, H, W] float32, "label": [B] int64 in [0, K)}."""
    s, rng = SIZES[size], np.random.default_rng(seed)
    image = rng.normal(size=(s["batch"], s["channels"], s["height"], s["image_width"])).astype(np.float32)
    return {"image": image, "label": rng.integers(0, s["classes"], size=s["batch"])}


def loss(model: Net, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of the logits against the labels, a scalar."""
    return F.cross_entropy(model(batch["image"]), batch["label"])


def optimizer(params) -> torch.optim.Optimizer:
    """SGD, lr 0.05, momentum 0.9, weight decay 1e-3 (added to the gradient, as optax.add_decayed_weights)."""
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)
