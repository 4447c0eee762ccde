"""Worked port 4, torch side: transformers' LlamaForCausalLM, unmodified, from a tiny config (random init).

The model: token embedding -> decoder layers of x + attention(RMSNorm(x)) with rotary positions
and grouped-query attention (4 query heads share 2 key / value heads), x + SwiGLU MLP(RMSNorm(x))
-> RMSNorm -> lm_head; next-token cross-entropy on its logits; AdamW.
Port note: HF computes RMSNorm and the rotary cos / sin in float32 even in a float64 model: a
float32 island the checker reports (verdict "match, explained"). rotate_half pairs dimension i
with i + head_dim/2 (not i with i+1); repeat_kv repeats each key / value head for its group
(head h reads kv head h // groups); lm_head is untied (tie_word_embeddings False).
Shapes: B batch, T tokens, V vocabulary, D model width.
Reference: Touvron et al. 2023, arXiv:2302.13971; Su et al. 2021, arXiv:2104.09864 (RoPE);
Ainslie et al. 2023, arXiv:2305.13245 (GQA); transformers, models/llama/modeling_llama.py.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

__all__ = ["SIZES", "LlamaForCausalLM", "build", "batch", "loss", "optimizer"]

SIZES = {
    "small": {"vocab": 97, "dim": 32, "heads": 4, "kv_heads": 2, "hidden": 64, "layers": 1, "batch": 2, "tokens": 6},
}


def build(size: str = "small", seed: int = 0) -> LlamaForCausalLM:
    """LlamaForCausalLM from a tiny LlamaConfig (rope_theta 1e4, rms_norm_eps 1e-6), HF's init seeded locally,
    float32, in eval mode."""
    s = SIZES[size]
    config = LlamaConfig(
        vocab_size=s["vocab"],
        hidden_size=s["dim"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"],
        intermediate_size=s["hidden"],
        num_hidden_layers=s["layers"],
        max_position_embeddings=4 * s["tokens"],
        rms_norm_eps=1e-6,
        use_cache=False,
    )
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left as it was
        torch.manual_seed(seed)
        return LlamaForCausalLM(config).eval()


def batch(size: str = "small", seed: int = 0) -> dict[str, np.ndarray]:
    """{"input_ids": [B, T] int64, "labels": [B, T] int64 (the same tokens: the loss shifts them by one)}."""
    s, rng = SIZES[size], np.random.default_rng(seed)
    ids = rng.integers(0, s["vocab"], size=(s["batch"], s["tokens"]))
    return {"input_ids": ids, "labels": ids.copy()}


def loss(model: LlamaForCausalLM, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy on the logits (position t predicts label t+1), a scalar.

    Not the model's labels= loss: that casts the logits to float32, and a float32 loss in the
    float64 pass has a dtype the check refuses to compare.
    """
    logits = model(input_ids=batch["input_ids"]).logits[:, :-1].float()  # as HF's labels= loss: in float32
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1))


def optimizer(params) -> torch.optim.Optimizer:
    """AdamW, lr 1e-3, weight decay 0.01."""
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
