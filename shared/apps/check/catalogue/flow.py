"""Gradient flow: a stop missing or extra (basics), a freeze that is not one (frozen_backbone)."""

from __future__ import annotations

from .kinds import Diagnosis, Signature

__all__ = ["RECORDS"]


def _freezing(line) -> str | None:
    return line.text if ("frozen" in line.text or "freezes" in line.text) else None


def _stop(line) -> str | None:
    return None if _freezing(line) else line.text


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
        signatures=(Signature("flow", _stop),),
    ),
)
