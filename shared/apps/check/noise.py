"""What rounding looks like in a check: the gradient entries a step cannot resolve, and the sentences that
explain the differences they drive (compare.Judge judges by them).

Adam scales any gradient to steps of about lr, whatever its size: an entry whose true gradient is zero (a
bias before a train-mode BatchNorm, attention's key bias) gets each side's rounding noise scaled to lr.
Those entries are found on the float64 gradients of both sides and their steps explained, within bounds.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NOISE_BOUND", "NOISE", "NOISE64_GAP", "ROUNDING_BOUND", "NOISE64", "DRIFT", "OWN_STEP", "noise_entries"]


NOISE_BOUND = 1e-6  # a float64 gradient entry below this fraction of the model's largest: float32 cannot resolve it
NOISE = (
    "float32 steps: Adam's updates of entries whose float64 gradient is below float32's resolution "
    f"(≤ {NOISE_BOUND:g} of the largest: zero in exact arithmetic, as attention's key bias) are rounding noise "
    "scaled to the learning rate; the rest of the leaf matches"
)


NOISE64_GAP = 1e-6  # float64: the most two sides' noise-driven steps may differ, as a fraction of the model's scale
ROUNDING_BOUND = (
    1e-12  # a float64 gradient entry at most this fraction of the largest, on both sides: a zero's rounding
)
NOISE64 = (
    "float64 steps: the updates of entries whose float64 gradient is rounding on both sides "
    f"(≤ {ROUNDING_BOUND:g} of the largest: zero in exact arithmetic, as a bias before a train-mode BatchNorm) "
    "are that rounding, which Adam scales to the learning rate; the rest of the leaf matches"
)


DRIFT = (
    "steps: a running statistic (a buffer, no gradient) fed by the noise-driven entries explained above: "
    "within their drift"
)


OWN_STEP = (
    "float64 pass: the port's own jax_step computes its loss in float32, and a step of the user's own is run as "
    "written (its float32 casts not widened; give jax_optimizer instead to have them widened)"
)


def noise_entries(grads: dict, other: dict | None = None, bound: float = NOISE_BOUND) -> dict[str, np.ndarray]:
    """{NNX key: bool mask} of the float64 gradient entries a step cannot resolve: at most `bound` of the largest
    |g| (NOISE_BOUND: float32's resolution; ROUNDING_BOUND: float64's own rounding) on both sides (`grads`
    torch's, `other` JAX's), and not exactly zero on both (a zero both sides agree on stays zero, and Adam
    leaves it: decay on a frozen leaf must still show)."""
    other = other or {}
    top = max((float(np.max(np.abs(g))) for g in grads.values() if np.size(g)), default=0.0)
    out = {}
    for key, g in grads.items():
        a = np.abs(np.asarray(g))
        o = np.asarray(other.get(key, g))
        b = np.abs(o) if o.shape == a.shape else a
        mask = (np.maximum(a, b) <= bound * top) & ((a > 0) | (b > 0))
        if mask.any():
            out[key] = mask
    return out
