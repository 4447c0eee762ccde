"""Claims about computing without a gradient, each record above its verifier.

The checks: `torch_impl/backend/claims/modes.py` and `jax_impl/backend/claims/modes.py`. inference_mode, mixed
precision, statistics of detached features.
"""

from __future__ import annotations

import math

from .record import NO_GRAD_FN, Facts, Theme, close, raised

__all__ = ["THEME"]

THEME = Theme(module="modes", title="computing without a gradient: inference mode, mixed precision, statistics")


@THEME.claim(
    id="C09",
    article="A1",
    section="§4.2",
    scenario="no_grad_inference",
    verdict="incomplete",
    claim="inference_mode is faster and fully disables autograd.",
    right="True, but its tensors cannot later be saved for backward, and the speed-up is small except on overhead-bound code (ratios: detach-parity bench).",
)
def inference_tensors_cannot_be_saved(t: dict, j: dict, f: Facts) -> None:
    f.need(t["is_inference"] and not t["requires_grad"], "inference_mode output: inference tensor, no grad")
    f.need(
        raised(t["error"], "RuntimeError", "Inference tensors cannot be saved for backward"),
        "RuntimeError 'Inference tensors cannot be saved for backward'",
    )
    f.need(
        t["no_grad_tensor_grad"] == [2.0, 2.0, 2.0] and not t["no_grad_tensor_requires_grad"],
        "a no_grad tensor g = 2·w is a constant that can be used later: d/dw Σ g·w = 2",
    )
    f.need(j.get("applies") is False, "JAX: no inference mode")
    f.note("speed ratios: detach-parity bench")


@THEME.claim(
    id="C15",
    article="A1",
    section="§7.2",
    scenario="mixed_precision",
    verdict="wrong",
    claim="detach helps precision in mixed-precision training.",
    right="Mixed precision involves no detach (autocast + float32 master weights / loss scaling); detaching the loss breaks backward.",
)
def mixed_precision_needs_no_detach(t: dict, j: dict, f: Facts) -> None:
    f.need(
        t["autocast_dtype"] == "torch.bfloat16" and t["grad_dtype"] == "torch.float32" and t["grad_nonzero"],
        "autocast bf16 forward, float32 grads, no detach",
    )
    f.need(raised(t["detached_loss_backward"], "RuntimeError", NO_GRAD_FN), "detached loss: backward raises")
    f.need(
        j["compute_dtype"] == "bfloat16" and j["grad_dtype"] == "float32" and j["grad_state"] == "nonzero",
        "JAX bf16 compute, float32 grads",
    )
    f.need(j["stopped_loss_grad_state"] == "zero", "JAX stopped loss: zero gradients, silently")


@THEME.claim(
    id="C19",
    article="A3",
    section="§2.2 scenario 2",
    scenario="feature_stats",
    verdict="incomplete",
    claim="Compute feature statistics on detached features.",
    right="Runs; torch .std() is unbiased while jnp.std is not (ratio sqrt(N/(N−1))); no_grad is cheaper.",
)
def statistics_ddof_and_no_grad(t: dict, j: dict, f: Facts) -> None:
    n = t["n"]
    ratio = [a / b for a, b in zip(t["std"], t["std_biased"], strict=True)]
    f.need(
        close(ratio, [math.sqrt(n / (n - 1))] * len(ratio)),
        f"torch .std() / biased = sqrt(N/(N−1)) = {math.sqrt(n / (n - 1)):.4f}",
    )
    f.need(
        close(j["std"], t["std_biased"]) and close(j["std_ddof1"], t["std"]),
        "jnp.std is ddof=0 (ddof=1 matches torch)",
    )
    f.need(not t["std_requires_grad"], "statistics of detached features carry no graph")
    f.need(
        t["saved_bytes_grad"] > 0 == t["saved_bytes_no_grad"],
        f"no_grad saves {t['saved_bytes_no_grad']} B vs {t['saved_bytes_grad']} B",
    )
