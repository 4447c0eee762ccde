"""Gradient flow: a stop missing or extra (basics: by the flow diff, or where the backward parts while the forward
matches), a freeze that is not one (frozen_backbone)."""

from __future__ import annotations

import numpy as np

from .kinds import Diagnosis, Signature

__all__ = ["RECORDS"]


def _freezing(line, report) -> str | None:
    return line.text if ("frozen" in line.text or "freezes" in line.text) else None


def _stop(line, report) -> str | None:
    # a stop leaves the forward as it is: where the forward differs, a leaf with no gradient on one side is
    # more likely one that side's forward does not use (a dropped position embedding), not a stop
    forward = report.failed("float64", "outputs") + report.failed("float64", "loss")
    return None if _freezing(line, report) or forward else line.text


def _inside(row, j: np.ndarray | None, t: np.ndarray | None) -> str:
    """Which side stops the gradient arriving at the backward parting, by the incoming gradients themselves."""
    if j is not None and t is not None and not np.any(j) and np.any(t):
        what = "the port stops it there (a stop_gradient) where torch lets it through"
    elif j is not None and t is not None and not np.any(t) and np.any(j):
        what = "torch stops it there (detach, no_grad) where the port lets it through"
    else:
        what = "it arrives changed: a stop on part of it (one branch, some entries), or a custom VJP"
    return (
        f"the forward matches; the gradient arriving at {row.torch}'s output differs (max |jax-torch| "
        f"{row.max_abs:.3g}) while the modules downstream get torch's: {what}"
    )


RECORDS = (
    Diagnosis(
        "frozen_backbone",
        "gradient flow differs",
        signatures=(Signature("flow", _freezing),),
        in_steps=True,
    ),
    Diagnosis(
        "basics",
        "gradient flow differs",
        signatures=(Signature("flow", _stop), Signature("backward", _inside)),
    ),
)
