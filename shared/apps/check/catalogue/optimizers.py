"""Optimizers and training steps: P10 Adam's decay, P19 a decay on one side only, P17 soft updates, the clip
epsilon, first vs second order."""

from __future__ import annotations

import numpy as np

from .kinds import Diagnosis, Replay, Signature, StepContext

__all__ = ["RECORDS"]


def _soft_update(ctx: StepContext) -> list[tuple[str, str]]:
    """A leaf with no gradient that moves by another rule than torch's: a target update's τ swapped."""
    out = []
    for key, q in ctx.ratios.items():
        if key in ctx.no_grad and abs(q - 1) > 1e-3:
            tau = 1 / (1 + q) if q > -1 else float("nan")
            ev = f"a leaf with no gradient that moves: its update is {q:.6g} × torch's; τ and 1 − τ swapped if τ = {tau:.4g}"
            out.append((ctx.where(key), ev))
    return out


def _clip_epsilon(ctx: StepContext) -> list[tuple[str, str]]:
    """Every trained leaf's update scaled by the one factor (‖g‖ + 1e-6) / ‖g‖: torch's clip adds 1e-6."""
    g = ctx.grad_norm
    trained = [q for key, q in ctx.ratios.items() if key not in ctx.no_grad]
    # each to a thousandth of its distance from 1 (a tolerance, not a rounding grid: equal factors can round apart)
    if len(trained) < 2 or g <= 0 or not all(abs(q - (g + 1e-6) / g) < 1e-3 * 1e-6 / g for q in trained):
        return []
    q = float(np.mean(trained))
    ev = (
        f"every update is {q:.12g} × torch's = (‖g‖ + 1e-6) / ‖g‖ with ‖g‖ = {g:.6g}: torch's clip_grad_norm_ adds 1e-6"
    )
    return [("float64 steps", ev)]


def _decay_one_side(ctx: StepContext) -> list[tuple[str, str]]:
    """Every leaf that parts at step 1 has a gradient and parts by c · w, one c for all: a decoupled weight decay
    (w -= lr·wd·w) that one side's step applies and the other's does not (P19's lost decay)."""
    cs = list(ctx.decay.values())
    if not cs or set(ctx.decay) != ctx.parted:  # a frozen leaf that parts has no entry: not this signature
        return []
    c = float(np.mean(cs))
    if c == 0 or any(abs(x - c) > 1e-3 * abs(c) for x in cs):
        return []
    who, other = ("torch", "the port") if c > 0 else ("the port", "torch")
    ev = (f"on each of the {len(cs)} leaves that part at step 1, the port's update minus torch's is c · w with one "
          f"c = {c:.6g}: {who} shrinks every weight by {abs(c):.6g} · w (a decoupled weight decay, lr · wd = "
          f"{abs(c):.6g}) and {other} does not (torch SGD's or AdamW's weight_decay; optax.sgd / optax.adam have "
          "none: optax.add_decayed_weights); tiny per step, it drifts over many")  # fmt: skip
    return [("float64 steps step 1", ev)]


RECORDS = (
    Diagnosis(
        "P10",
        "Adam weight decay: coupled L2 (torch Adam) vs decoupled (optax.adamw)",
        replays=(
            Replay(
                "torch",
                "adam_swapped",
                "Adam's weight decay coupled <-> decoupled (torch Adam vs optax.adamw)",
                needs_steps=True,
            ),
        ),
    ),
    Diagnosis(
        "P19",
        "weight decay on one side only: every update differs by c · w (lr · wd), a drift over many steps",
        signatures=(Signature("steps", _decay_one_side),),
        in_steps=True,
    ),
    Diagnosis(
        "P17",
        "soft target update, optax.incremental_update argument order",
        signatures=(Signature("steps", _soft_update),),
    ),
    Diagnosis(
        "grad_clipping",
        "clip epsilon: torch divides by ‖g‖ + 1e-6, optax by ‖g‖",
        signatures=(Signature("steps", _clip_epsilon),),
    ),
    Diagnosis(
        "maml",
        "first vs second order: the inner gradient is a constant in one port",
        replays=(
            Replay(
                "torch", "first_order", "torch.autograd.grad never builds a graph (create_graph=False: first order)"
            ),
        ),
    ),
)
