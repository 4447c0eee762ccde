"""Worked port 3, torch side: a pre-norm transformer encoder with MultiheadAttention, a key-padding mask and GELU.

The model: token embedding + a learned position table (a bare nn.Parameter) -> blocks of
x + MHA(LN(x), key_padding_mask) and x + W2 GELU(W1 LN(x)) -> LN -> mean over the real
tokens -> Linear head; cross-entropy; AdamW. The `1m` size has about a million parameters.
Port note: the key-padding mask is True where a token is padding (torch: True = ignore);
F.gelu is exact (erf); nn.LayerNorm's eps is 1e-5; in_proj_weight packs q | k | v.
Shapes: B batch, T tokens, V vocabulary, D model width, K classes.
Reference: Vaswani et al. 2017, arXiv:1706.03762; Xiong et al. 2020, arXiv:2002.04745 (pre-norm).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SIZES", "Block", "Encoder", "build", "batch", "loss", "optimizer"]

SIZES = {
    "small": {"vocab": 13, "dim": 8, "heads": 2, "blocks": 2, "classes": 3, "batch": 3, "tokens": 5},
    "1m": {"vocab": 1600, "dim": 128, "heads": 4, "blocks": 4, "classes": 10, "batch": 8, "tokens": 32},
}


class Block(nn.Module):
    """Pre-norm block: x [B, T, D], pad [B, T] bool (True = padding) -> [B, T, D]."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, key_padding_mask=pad, need_weights=False)
        x = x + a
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Encoder(nn.Module):
    """tokens [B, T] int, pad [B, T] bool -> logits [B, K]."""

    def __init__(self, vocab: int, dim: int, heads: int, blocks: int, classes: int, tokens: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(0.02 * torch.randn(tokens, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(blocks))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x, pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)  # [B, T, 1]
        return self.head((self.ln_f(x) * keep).sum(1) / keep.sum(1))  # [B, K]


def build(size: str = "small", seed: int = 0) -> Encoder:
    """A freshly initialised Encoder (torch's default init, seeded locally), float32."""
    s = SIZES[size]
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left as it was
        torch.manual_seed(seed)
        return Encoder(s["vocab"], s["dim"], s["heads"], s["blocks"], s["classes"], s["tokens"])


def batch(size: str = "small", seed: int = 0) -> dict[str, np.ndarray]:
    """{"tokens": [B, T] int64, "pad": [B, T] bool (each row 2..T-1 real tokens, then padding), "label": [B]}."""
    s, rng = SIZES[size], np.random.default_rng(seed)
    lengths = rng.integers(2, s["tokens"], size=s["batch"])
    return {
        "tokens": rng.integers(0, s["vocab"], size=(s["batch"], s["tokens"])),
        "pad": np.arange(s["tokens"])[None, :] >= lengths[:, None],
        "label": rng.integers(0, s["classes"], size=s["batch"]),
    }


def loss(model: Encoder, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of the logits against the labels, a scalar."""
    return F.cross_entropy(model(batch["tokens"], batch["pad"]), batch["label"])


def optimizer(params) -> torch.optim.Optimizer:
    """AdamW, lr 3e-3, weight decay 0.01."""
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)
