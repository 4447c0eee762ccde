"""p04_gelu: torch's GELU is exact (erf); jax.nn.gelu defaults to the tanh approximation.

Shapes: N elements. Handed case (PITFALLS P04): x = [1]: torch 0.841345, naive JAX 0.841192.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.parity import Tolerance
from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {"x": Field(("N",), doc="pre-activations")}

_erf = np.vectorize(math.erf, otypes=[np.float64])


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # PITFALLS P04
        return {"x": np.array([1.0])}
    return {"x": rng.normal(scale=2.0, size=6)}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    x = fx.float64()["x"]
    cdf = 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))  # Φ(x)
    pdf = np.exp(-0.5 * x**2) / math.sqrt(2.0 * math.pi)  # φ(x)
    return {"y": x * cdf, "grads/x": cdf + x * pdf}  # exact GELU and its derivative


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port `jax.nn.gelu(x)` (approximate=True): 0.5·x·(1 + tanh(u)), u = sqrt(2/π)(x + 0.044715 x³),
    and its derivative 0.5(1 + tanh u) + 0.5·x·(1 − tanh² u)·du/dx."""
    x = fx.float64()["x"]
    c = math.sqrt(2.0 / math.pi)
    th = np.tanh(c * (x + 0.044715 * x**3))
    du = c * (1.0 + 3.0 * 0.044715 * x**2)
    return {"y": 0.5 * x * (1.0 + th), "grads/x": 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th**2) * du}


_PATTERN = (("y", "nonzero"), ("grads/x", "nonzero"))

SPEC = Scenario(
    name="p04_gelu",
    title="GELU: torch exact (erf), jax.nn.gelu tanh approximation by default",
    family="pitfalls",
    claims=(),
    source="P04",
    lesson=(
        "F.gelu is x·Φ(x) with erf; jax.nn.gelu defaults to approximate=True (the tanh formula): "
        "values differ by ~1e-4, gradients by ~1e-3, silently."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"ported": _PATTERN, "naive": _PATTERN},
    porting=Porting(
        torch="`F.gelu(x)` / `nn.GELU()` (exact; `approximate='tanh'` opts in)",
        jax="`jax.nn.gelu(x, approximate=False)`",
        trap="`jax.nn.gelu` defaults to `approximate=True`: 0.841192 vs 0.841345 at x = 1",
    ),
    tolerances={"float32": {"oracle": Tolerance(rtol=2e-5, atol=1e-6)}},
    tolerance_note=(
        "float32 oracle bound tightened to the parity one: GELU is one elementwise op (rounding ~1e-7); "
        "the default 2e-4 would accept the 1.5e-4 gap of the tanh approximation"
    ),
    diverges={"naive": ("y", "grads/x")},
    naive_oracle=naive_oracle,
)
