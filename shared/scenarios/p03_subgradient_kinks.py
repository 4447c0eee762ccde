"""p03_subgradient_kinks: which subgradient at a kink: abs at 0, clamp at a bound.

Shapes: N elements; bounds lo < hi are scalars.
Handed case (PITFALLS P03): x = [0, 0.5, −0.5, 0]; the clamp bounds ±0.5 are ours so
that the same x sits on both kinds of kink. Pinned convention: torch's, in both ports:
abs'(0) = 0 (sign), clamp'(x) = 1 for lo <= x <= hi (bounds included), 0 outside.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "x": Field(("N",), doc="points, some exactly on a kink (0, lo, hi)"),
    "lo": Field((), doc="lower clamp bound"),
    "hi": Field((), doc="upper clamp bound"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # PITFALLS P03: the L1 example; bounds ours
        return {"x": np.array([0.0, 0.5, -0.5, 0.0]), "lo": np.array(-0.5), "hi": np.array(0.5)}
    lo, hi = -rng.uniform(0.2, 1.0), rng.uniform(0.2, 1.0)
    x = rng.permutation([0.0, lo, hi, rng.normal()])  # the handed shape: one compile serves both
    return {"x": x, "lo": np.array(lo), "hi": np.array(hi)}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    x, lo, hi = a["x"], float(a["lo"]), float(a["hi"])
    return {
        "l1": np.array(np.abs(x).sum()),
        "clamped": np.clip(x, lo, hi),
        "grads/l1": np.sign(x),  # torch: sign(0) = 0
        "grads/clamp": ((x >= lo) & (x <= hi)).astype(np.float64),  # torch: 1 on the bounds
    }


def _tie_split(a: np.ndarray, b: float) -> np.ndarray:
    """d max(a, b) / da as JAX defines it: 1 above b, 0.5 on a tie, 0 below."""
    return np.where(a > b, 1.0, np.where(a == b, 0.5, 0.0))


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port `jnp.abs`, `jnp.clip`: abs'(x) = 1 for x >= 0 (so 1 at 0), −1 below; jnp.clip is
    min(max(x, lo), hi), whose derivative splits every tie in half: 0.5 on a bound, 1 inside, 0 outside."""
    a = fx.float64()
    x, lo, hi = a["x"], float(a["lo"]), float(a["hi"])
    lifted = np.maximum(x, lo)
    return {
        "grads/l1": np.where(x >= 0, 1.0, -1.0),
        "grads/clamp": _tie_split(x, lo) * _tie_split(-lifted, -hi),  # d min(m, hi)/dm = d max(−m, −hi)/d(−m)
    }


_PATTERN = (("l1", "nonzero"), ("clamped", "nonzero"), ("grads/l1", "nonzero"), ("grads/clamp", "nonzero"))


def _check_bounds(arrays, dims) -> str | None:
    """The clamp interval must not be empty."""
    lo, hi = float(arrays["lo"]), float(arrays["hi"])
    return None if lo <= hi else f"lo, hi: expected lo <= hi, got lo = {lo:g} > hi = {hi:g}"


SPEC = Scenario(
    name="p03_subgradient_kinks",
    title="subgradients at kinks: abs'(0) and clamp at a bound differ between torch and JAX",
    family="pitfalls",
    claims=(),
    source="P03",
    lesson=(
        "Any subgradient is valid at a kink, but the frameworks pick different ones: abs'(0) is 0 in "
        "torch and 1 in JAX; clamp at a bound is 1 in torch and 0.5 in jnp.clip. The port pins torch's."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"ported": _PATTERN, "naive": _PATTERN},
    porting=Porting(
        torch="`x.abs()`, `x.clamp(lo, hi)` (abs'(0) = 0, clamp' = 1 on the bounds)",
        jax="`jax.custom_jvp` abs with tangent `sign(x)`; clamp as `jnp.where(inside, x, bound)`",
        trap="`jnp.abs`'(0) = 1 and `jnp.clip`' = 0.5 on a bound: L1 gradient [1, 1, −1, 1], not [0, 1, −1, 0]",
    ),
    diverges={"naive": ("grads/*",)},
    naive_oracle=naive_oracle,
    checks=(_check_bounds,),
)
