"""Claims about truncation through time and clipping, each record above its verifier.

The checks: `torch_impl/backend/claims/recurrence.py` and `jax_impl/backend/claims/recurrence.py`. Which steps a
truncated gradient reaches, what truncation saves in memory, clipping against truncation.
"""

from __future__ import annotations

from .record import Facts, Theme, close, fmt

__all__ = ["THEME"]

THEME = Theme(module="recurrence", title="truncation through time and gradient clipping")


@THEME.claim(
    id="C10",
    article="A1",
    section="§5.1",
    scenario="tbptt",
    verdict="correct",
    claim="Detaching the RNN hidden state stops gradient flow across time.",
    right="Right: with T = 40 the last output's gradient reaches steps 0..39, 30..39 and 39 for no detach, every 10 and every step.",
)
def detach_truncates_through_time(t: dict, j: dict, f: Facts) -> None:
    want = {"none": list(range(40)), "every_10": list(range(30, 40)), "every_1": [39]}
    f.need(t == want, "T=40: grad reaches steps 0..39 / 30..39 / 39 (none / every 10 / every step)")
    f.need(j == want, "JAX the same")


@THEME.claim(
    id="C11",
    article="A1",
    section="§5.2",
    scenario="tbptt",
    verdict="misleading",
    claim="Detaching the hidden state every 10 steps saves memory.",
    right="Only with a backward per chunk: with one loss summed over all steps the saved activations are the same while the gradient is truncated. Dropping references saves memory, not detach itself.",
)
def truncation_alone_saves_no_memory(t: dict, j: dict, f: Facts) -> None:
    b0, b10, bc = t["saved_bytes_none"], t["saved_bytes_every_10"], t["max_saved_bytes_per_chunk_backward"]
    f.need(b0 == b10, f"summed loss: saved {b0} B without vs {b10} B with detach every 10")
    f.need(t["grad_max_abs_diff"] > 0, "while the gradient is truncated")
    f.need(bc < b0, f"backward per 10-step chunk: at most {bc} B held")
    f.need(
        j["residuals_every_10"]["bytes"] >= j["residuals_none"]["bytes"],
        f"JAX residuals {j['residuals_none']['bytes']} vs {j['residuals_every_10']['bytes']} B",
    )


@THEME.claim(
    id="C18",
    article="A2",
    section="§3",
    scenario="grad_clipping",
    verdict="wrong",
    claim="detach helps gradient clipping and prevents gradient explosion.",
    right="Clipping needs no detach (clip_grad_norm_ bounds the norm and keeps the direction); detaching every step is one-step truncation: it changes the direction and does not bound the norm.",
)
def clipping_needs_no_detach(t: dict, j: dict, f: Facts) -> None:
    full = t["full_norm"]
    f.need(full > 1e6 and close(t["clip_reported_norm"], full), f"norm {fmt(full)}")
    f.need(
        abs(t["clipped_norm"] - 1) < 1e-9 and abs(t["clipped_cosine"] - 1) < 1e-9,
        "clip_grad_norm_ → 1.0, direction kept",
    )
    f.need(
        t["detach_every_step_norm"] > 1 and t["detach_every_step_cosine"] < 0.99,
        f"detach every step: norm {fmt(t['detach_every_step_norm'])}, cosine {t['detach_every_step_cosine']:.2f}",
    )
    f.need(
        abs(j["clipped_norm"] - 1) < 1e-9
        and abs(j["clipped_cosine"] - 1) < 1e-9
        and close(j["full_norm"], full, 1e-9)
        and close(j["detach_every_step_cosine"], t["detach_every_step_cosine"], 1e-9),
        "JAX (optax.clip_by_global_norm) the same",
    )
