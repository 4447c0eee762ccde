"""Worked port 2, torch side: a GRU sequence classifier over frozen pretrained embeddings.

The model: nn.Embedding (frozen: requires_grad_(False), as a pretrained table is) -> nn.GRU
(batch_first) -> the last step's hidden state -> Linear head; cross-entropy; AdamW. torch's GRU
cell computes n = tanh(W_in x + b_in + r * (W_hn h + b_hn)): b_hn sits inside the reset gate.
Gradient flow: loss -> head -> GRU -> (stops at) the embedding table, whose .grad stays None:
AdamW skips it (no moment, no weight decay).
Port note: the NNX port needs a cell with b_hn (nnx.GRUCell has none, P08) and must keep the
table out of the optimizer (nnx.Optimizer(wrt=...)), not only stop its gradient.
Shapes: B batch, T steps, V vocabulary, E embedding, H hidden, K classes.
Reference: Cho et al. 2014, arXiv:1406.1078 (GRU); PyTorch docs, torch.nn.GRU.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SIZES", "Tagger", "build", "batch", "loss", "optimizer"]

SIZES = {
    "small": {"vocab": 11, "embed": 4, "hidden": 5, "classes": 3, "batch": 4, "steps": 6},
    "1m": {"vocab": 2000, "embed": 128, "hidden": 384, "classes": 10, "batch": 16, "steps": 24},
}


class Tagger(nn.Module):
    """tokens [B, T] int -> logits [B, K]."""

    def __init__(self, vocab: int, embed: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.embed.weight.requires_grad_(False)  # GRAD-FLOW: the pretrained table is frozen
        self.rnn = nn.GRU(embed, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(tokens))  # [B, T, H]
        return self.head(out[:, -1])  # [B, K]


def build(size: str = "small", seed: int = 0) -> Tagger:
    """A freshly initialised Tagger (torch's default init, seeded locally), float32."""
    s = SIZES[size]
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left as it was
        torch.manual_seed(seed)
        return Tagger(s["vocab"], s["embed"], s["hidden"], s["classes"])


def batch(size: str = "small", seed: int = 0) -> dict[str, np.ndarray]:
    """{"tokens": [B, T] int64 in [0, V), "label": [B] int64 in [0, K)}."""
    s, rng = SIZES[size], np.random.default_rng(seed)
    return {
        "tokens": rng.integers(0, s["vocab"], size=(s["batch"], s["steps"])),
        "label": rng.integers(0, s["classes"], size=s["batch"]),
    }


def loss(model: Tagger, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of the logits against the labels, a scalar."""
    return F.cross_entropy(model(batch["tokens"]), batch["label"])


def optimizer(params) -> torch.optim.Optimizer:
    """AdamW, lr 0.01, weight decay 0.1 (decoupled); parameters without .grad are skipped."""
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)
