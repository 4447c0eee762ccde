"""Worked port 7, torch side: transformers' GPT2LMHeadModel, unmodified, from a tiny config (random init).

The model: token + learned position embeddings -> pre-norm blocks (x + causal attention(LN(x)),
x + W2 GELU_tanh(W1 LN(x))) -> LayerNorm -> lm_head, which is the token table (tied); next-token
cross-entropy on the logits; AdamW.
Port note: every projection is HF's Conv1D, whose weight is stored [in, out] (a dense kernel as
it is, not transposed as nn.Linear's); c_attn packs q | k | v along its output; the activation
is gelu_new (the tanh approximation); LayerNorm's eps is 1e-5; lm_head.weight is wte.weight.
Dropout is off (eval mode).
Shapes: B batch, T tokens, V vocabulary, D model width.
Reference: Radford et al. 2019 (GPT-2); transformers, models/gpt2/modeling_gpt2.py, pytorch_utils.Conv1D.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

__all__ = ["SIZES", "GPT2LMHeadModel", "build", "batch", "loss", "optimizer"]

SIZES = {
    "small": {"vocab": 97, "dim": 32, "heads": 4, "layers": 1, "positions": 16, "batch": 2, "tokens": 6},
    # transformers' default GPT2Config: GPT-2 small, 124 M parameters (`detach-parity bench --port-check gpt2:base`)
    "base": {"vocab": 50257, "dim": 768, "heads": 12, "layers": 12, "positions": 1024, "batch": 2, "tokens": 16},
}


def build(size: str = "small", seed: int = 0) -> GPT2LMHeadModel:
    """GPT2LMHeadModel from a tiny GPT2Config (MLP width 4 D), HF's init seeded locally, float32, in eval mode."""
    s = SIZES[size]
    config = GPT2Config(
        vocab_size=s["vocab"],
        n_embd=s["dim"],
        n_head=s["heads"],
        n_layer=s["layers"],
        n_positions=s["positions"],
        use_cache=False,
    )
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left as it was
        torch.manual_seed(seed)
        return GPT2LMHeadModel(config).eval()


def batch(size: str = "small", seed: int = 0) -> dict[str, np.ndarray]:
    """{"input_ids": [B, T] int64, "labels": [B, T] int64 (the same tokens: the loss shifts them by one)}."""
    s, rng = SIZES[size], np.random.default_rng(seed)
    ids = rng.integers(0, s["vocab"], size=(s["batch"], s["tokens"]))
    return {"input_ids": ids, "labels": ids.copy()}


def loss(model: GPT2LMHeadModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy on the logits (position t predicts label t+1), a scalar."""
    logits = model(input_ids=batch["input_ids"]).logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1))


def optimizer(params) -> torch.optim.Optimizer:
    """AdamW, lr 1e-3, weight decay 0.01."""
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
