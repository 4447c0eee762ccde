"""The tolerances of a comparison: the `Tolerance` record and the per-dtype table.

`TOLERANCES` holds the defaults per dtype and comparison kind; a scenario that needs
looser bounds sets them in its registry row (`Scenario.tolerances`), and `tolerance_for`
looks them up, overrides first. How a bound is applied (element-wise in float64,
leaf-scaled below, and the measurements behind that rule) is in shared/core/parity.py's
docstring, next to the comparator that applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["Tolerance", "TOLERANCES", "tolerance_for"]


@dataclass(frozen=True)
class Tolerance:
    """Bounds of one comparison (b: the reference).

    A float64 leaf passes when |a_i - b_i| <= atol + rtol * |b_i| for every element; any
    other leaf when max|a - b| <= atol + rtol * max|b| (see shared/core/parity.py's docstring).
    """

    rtol: float
    atol: float

    def __post_init__(self) -> None:
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and np.isfinite(value) and value >= 0):
                raise ValueError(f"Tolerance.{name}: expected a finite number >= 0, got {value!r}")

    def bound(self, scale: float) -> float:
        return self.atol + self.rtol * scale

    def __str__(self) -> str:
        return f"rtol={self.rtol:.0e} atol={self.atol:.0e}"


# Default tolerances per dtype. "parity": torch vs JAX (same algorithm, same
# inputs: only rounding order differs). "oracle": either framework vs the float64
# numpy oracle (float32 rounding, or the truncation error of finite differences).
TOLERANCES: dict[str, dict[str, Tolerance]] = {
    "float32": {"parity": Tolerance(rtol=2e-5, atol=1e-6), "oracle": Tolerance(rtol=2e-4, atol=1e-5)},
    "float64": {"parity": Tolerance(rtol=1e-10, atol=1e-12), "oracle": Tolerance(rtol=1e-7, atol=1e-9)},
}


def tolerance_for(dtype: str, kind: str, overrides: Mapping[str, Mapping[str, Tolerance]] | None = None) -> Tolerance:
    """The tolerance of a comparison kind ("parity" | "oracle") for a dtype, registry overrides first."""
    if overrides and kind in overrides.get(dtype, {}):
        return overrides[dtype][kind]
    try:
        return TOLERANCES[dtype][kind]
    except KeyError:
        raise ValueError(
            f"tolerance: no entry for dtype {dtype!r} kind {kind!r}; dtypes {sorted(TOLERANCES)}"
        ) from None
