"""Worked port 5, torch side: transformers' BertForMaskedLM, unmodified, from a tiny config (random init).

The model: word + token-type + position embeddings -> LayerNorm -> post-norm encoder layers
(LN(x + attention(x, padding mask)), LN(x + W2 GELU(W1 x))) -> the MLM head (dense, GELU, LN,
the decoder tied to the word table plus its own bias); masked-token cross-entropy; AdamW.
Port note: LayerNorm's eps is 1e-12 (nnx.LayerNorm's default is 1e-6); GELU is exact (erf);
attention_mask is 1 where a token is real (HF: 1 = attend); the decoder's weight is the word
table and its bias is cls.predictions.bias (one tensor each). Dropout is off (eval mode).
Shapes: B batch, T tokens, V vocabulary, D model width.
Reference: Devlin et al. 2019, arXiv:1810.04805; transformers, models/bert/modeling_bert.py.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM

__all__ = ["SIZES", "BertForMaskedLM", "build", "batch", "loss", "optimizer"]

SIZES = {"small": {"vocab": 97, "dim": 32, "heads": 4, "hidden": 64, "layers": 1, "batch": 2, "tokens": 6}}


def build(size: str = "small", seed: int = 0) -> BertForMaskedLM:
    """BertForMaskedLM from a tiny BertConfig (2 token types, 16 positions), HF's init seeded locally, float32,
    in eval mode (no dropout)."""
    s = SIZES[size]
    config = BertConfig(
        vocab_size=s["vocab"],
        hidden_size=s["dim"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        intermediate_size=s["hidden"],
        max_position_embeddings=16,
        type_vocab_size=2,
    )
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left as it was
        torch.manual_seed(seed)
        return BertForMaskedLM(config).eval()


def batch(size: str = "small", seed: int = 0) -> dict[str, np.ndarray]:
    """{"input_ids", "token_type_ids" (0 then 1: two segments), "attention_mask" (1 real, 0 padding: the last
    row ends in 2 pads), "labels" (the token at 2 positions per row, -100 elsewhere)}, each [B, T] int64."""
    s, rng = SIZES[size], np.random.default_rng(seed)
    b, t = s["batch"], s["tokens"]
    mask = np.ones((b, t), np.int64)
    mask[-1, -2:] = 0
    labels = np.full((b, t), -100)
    ids = rng.integers(1, s["vocab"], size=(b, t))
    for row in range(b):
        at = rng.choice(int(mask[row].sum()), size=2, replace=False)
        labels[row, at] = ids[row, at]
    return {
        "input_ids": ids,
        "token_type_ids": (np.arange(t)[None, :] >= t // 2).astype(np.int64).repeat(b, 0),
        "attention_mask": mask,
        "labels": labels,
    }


def loss(model: BertForMaskedLM, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean cross-entropy of the logits at the labelled positions (-100 ignored), a scalar."""
    logits = model(
        input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"], attention_mask=batch["attention_mask"]
    ).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1), ignore_index=-100)


def optimizer(params) -> torch.optim.Optimizer:
    """AdamW, lr 1e-3, weight decay 0.01."""
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
