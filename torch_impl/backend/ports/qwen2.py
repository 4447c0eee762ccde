"""Worked port 8, torch side: transformers' Qwen2ForCausalLM, unmodified, from a tiny config (random init).

The model: Llama's shape (token embedding -> decoder layers of x + attention(RMSNorm(x)) with rotary positions
and grouped-query attention, x + SwiGLU MLP(RMSNorm(x)) -> RMSNorm -> lm_head) with biases on q / k / v;
next-token cross-entropy on its logits, taken in float32 as HF's labels= loss does; AdamW.
Port note: an island family. HF computes the RMSNorm statistics and the rotary cos / sin in float32 even in
a float64 or bfloat16 model, and the loss upcasts the logits: the check's float64 pass runs those in
float64 on both sides, its bfloat16 pass asks the port to keep them in float32. The q / k / v biases are
initialised to zero by HF: `build` draws them, or a port that drops one would still match.
Shapes: B batch, T tokens, V vocabulary, D model width.
Reference: Yang et al. 2024, arXiv:2407.10671 (Qwen2); transformers, models/qwen2/modeling_qwen2.py.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from transformers import Qwen2Config, Qwen2ForCausalLM

__all__ = ["SIZES", "Qwen2ForCausalLM", "build", "batch", "loss", "optimizer"]

SIZES = {
    "small": {"vocab": 97, "dim": 32, "heads": 4, "kv_heads": 2, "hidden": 64, "layers": 2, "batch": 2, "tokens": 6},
}


def build(size: str = "small", seed: int = 0) -> Qwen2ForCausalLM:
    """Qwen2ForCausalLM from a tiny Qwen2Config (rope_theta 1e4, rms_norm_eps 1e-6), HF's init seeded locally, the
    q / k / v biases and the norm gains drawn away from HF's zeros and ones; float32, in eval mode."""
    s = SIZES[size]
    config = Qwen2Config(
        vocab_size=s["vocab"],
        hidden_size=s["dim"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"],
        intermediate_size=s["hidden"],
        num_hidden_layers=s["layers"],
        max_position_embeddings=4 * s["tokens"],
        rms_norm_eps=1e-6,
        rope_theta=1e4,
        use_cache=False,
    )
    with torch.random.fork_rng(devices=[]):  # the caller's RNG stream is left as it was
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).eval()
        with torch.no_grad():  # zero biases and unit gains would hide a dropped bias or a gain read as 1 + w
            for name, p in model.named_parameters():
                if name.endswith("_proj.bias"):
                    p.normal_(0.0, 0.02)
                elif name.endswith("norm.weight"):
                    p.uniform_(0.8, 1.2)
    return model


def batch(size: str = "small", seed: int = 0) -> dict[str, np.ndarray]:
    """{"input_ids": [B, T] int64, "labels": [B, T] int64 (the same tokens: the loss shifts them by one)}."""
    s, rng = SIZES[size], np.random.default_rng(seed)
    ids = rng.integers(0, s["vocab"], size=(s["batch"], s["tokens"]))
    return {"input_ids": ids, "labels": ids.copy()}


def loss(model: Qwen2ForCausalLM, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy on the logits, in float32 as HF's labels= loss takes it (a scalar)."""
    logits = model(input_ids=batch["input_ids"]).logits[:, :-1].float()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1))


def optimizer(params) -> torch.optim.Optimizer:
    """AdamW, lr 1e-3, weight decay 0.01."""
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
