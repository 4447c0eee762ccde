"""Numerics and conventions of the forward: P03 ties at kinks, P04 GELU, P12 mask polarity and fully masked rows,
P13 where, P14 a loss broadcast, P15 a skipped step, P16 precision."""

from __future__ import annotations

import numpy as np

from .kinds import Diagnosis, Replay, Signature
from .norms import nan_where_torch_is_finite

__all__ = ["RECORDS"]


def _tie_split(row, j: np.ndarray, t: np.ndarray) -> str | None:
    """Entries differ but carry the same total gradient: a subgradient redistributed over ties.

    A kink's subgradient goes to one of the tied entries on one side and is shared (or withheld) on the
    other: some differing entries are exactly zero on one side. Without such zeros, equal totals are a
    redistribution of another kind (a loss broadcast, a layout), not a tie split.
    """
    d = j != t
    if row.section != "grads" or d.sum() < 2:
        return None
    if not (np.any(j[d] == 0) or np.any(t[d] == 0)):
        return None
    total, mass = float(t[d].sum()), float(np.abs(t[d]).sum())
    if abs(total) <= 1e-3 * mass or not np.isclose(j[d].sum(), total, rtol=1e-9, atol=0):
        return None
    return f"{int(d.sum())} entries differ but carry the same total gradient {total:.6g}: redistributed over ties"


def _skips(report, dtype: str = "float32") -> list[tuple[int, str]]:
    """The steps one side skipped (moved no leaf) and the other did not: (step, the side that skipped)."""
    sk = report.skipped.get(dtype, {})
    t, j = set(sk.get("torch", [])), set(sk.get("jax", []))
    return sorted((s, "torch" if s in t else "jax") for s in t ^ j)


def _skipped_step(report) -> tuple[str, str] | None:
    """A step one side skipped and the other applied, in float32 only: an overflow of a scaled loss (GradScaler
    skips a step whose gradients are inf / nan and halves its scale; a port that keeps a fixed scale applies it)."""
    found = _skips(report)
    if not found:
        return None
    s, side = found[0]
    skipper, other = ("torch", "the port") if side == "torch" else ("the port", "torch")
    return f"float32 steps step {s}", (
        f"at step {s} {skipper} moved no parameter (a skipped update) and {other} applied one; float64 matches: "
        "float32 overflowed a scaled loss's gradients, skipped on one side only (torch.amp.GradScaler skips and "
        "halves its scale; optax.apply_if_finite does the same in JAX)"
    )


def _float32_only(report) -> tuple[str, str] | None:
    if _skips(report):  # a step skipped on one side says more than rounding: P15's
        return None
    worst = max(report.failed("float32"), key=lambda r: r.max_rel)
    return worst.where, (
        f"float64 matches everywhere; float32 differs by up to {worst.max_rel:.1e} relative: "
        "rounding, or reduced-precision matmuls"
    )


RECORDS = (
    Diagnosis(
        "P03",
        "a tie split: max / abs / clamp subgradients at kinks differ",
        signatures=(Signature("values", _tie_split),),
    ),
    Diagnosis(
        "P04",
        "GELU: jax.nn.gelu defaults to the tanh approximation, torch to erf",
        replays=(
            Replay("torch", "gelu_tanh", "every GELU uses the tanh approximation, jax.nn.gelu's default"),
            Replay(
                "torch",
                "gelu_exact",
                "every tanh GELU (nn.GELU(approximate='tanh'), HF's gelu_new / NewGELUActivation) computes exact erf",
                title="GELU the other way round: torch's tanh approximation ported as exact erf "
                "(jax.nn.gelu(approximate=False))",
                modules=frozenset({"gelu_tanh"}),  # a torch module computing the tanh GELU, by what it computes
            ),
        ),
    ),
    Diagnosis(
        "P12",
        "attention mask polarity: torch True = masked out, Flax True = attend",
        replays=(
            Replay(
                "torch",
                "mask_inverted",
                "boolean attention masks inverted (torch True = masked, Flax True = attend)",
                modules=frozenset({"MultiheadAttention"}),
            ),
            Replay(
                "torch",
                "padding_mask_inverted",
                "the padding mask inverted in every HF attention (1 = attend read as 1 = masked)",
                title="padding mask polarity inverted",
                modules=frozenset({"attention"}),
            ),
            Replay(
                "torch",
                "sdpa_mask_inverted",
                "every boolean mask given to F.scaled_dot_product_attention inverted (True = attend, as "
                "jax.nn.dot_product_attention reads it: the port passes the mask's complement)",
                title="the attention mask's complement passed to jax.nn.dot_product_attention",
            ),
            Replay(
                "torch",
                "masked_rows_uniform",
                "every fully masked attention row (a query that sees no key) averages the values uniformly, as "
                "jax.nn.dot_product_attention's large negative fill does (torch's scaled_dot_product_attention "
                "returns zeros there)",
                title="a fully masked attention row: torch's scaled_dot_product_attention returns zeros, "
                "jax.nn.dot_product_attention a uniform average over the keys",
                unread=True,
            ),
        ),
    ),
    Diagnosis(
        "P13",
        "NaN through the untaken branch of a where",
        signatures=(Signature("values", nan_where_torch_is_finite),),
    ),
    Diagnosis(
        "P14",
        "TD loss broadcast: a [B, 1] prediction against a [B] target compares every pair ([B, B])",
        replays=(
            Replay(
                "torch",
                "loss_broadcast",
                "each [B] prediction against its [B] target compared as [B, 1] against [B] (F.mse_loss / "
                "smooth_l1 / huber / l1, or q - target)",
            ),
        ),
    ),
    Diagnosis(
        "P15",
        "loss-scale overflow: a step skipped on one side (non-finite scaled gradients), applied on the other",
        signatures=(Signature("float32", _skipped_step, title="a step skipped on one side only: loss-scale overflow"),),
        in_steps=True,
    ),
    Diagnosis(
        "P16",
        "float32 matmul precision",
        replays=(
            Replay(
                "jax",
                "matmul_default",
                "JAX's default matmul precision instead of 'highest' (bfloat16 / TF32 passes)",
                near_rounding=True,
            ),
        ),
        signatures=(Signature("float32", _float32_only, title="a float32-only difference"),),
    ),
)
