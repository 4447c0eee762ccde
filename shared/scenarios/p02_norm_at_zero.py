"""p02_norm_at_zero: the gradient of ‖x‖₂ at the zero vector: torch 0, jnp.linalg.norm NaN.

Shapes: N elements. The point x is the zero vector (PITFALLS P02: x = [0, 0, 0]);
a norm penalty on top of a data term, f(x) = 0.5·‖x − t‖² + λ‖x‖, shows the NaN
spreading into a real gradient (t and λ are ours: the handed case gives only x).
Convention pinned: the gradient of ‖x‖ at 0 is 0 (torch's, and optax.safe_norm's).
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "x": Field(("N",), doc="the point where the norm is differentiated: the zero vector"),
    "t": Field(("N",), doc="target of the data term 0.5·‖x − t‖²"),
    "lam": Field((), low=0.0, doc="weight λ of the norm penalty, >= 0"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # PITFALLS P02: x = [0, 0, 0]; t and λ are ours
        return {"x": np.zeros(3), "t": np.array([1.0, -2.0, 0.5]), "lam": np.array(0.1)}
    n = 3  # the handed shape: one compile serves both
    return {"x": np.zeros(n), "t": rng.normal(size=n), "lam": np.array(rng.uniform(0.05, 1.0))}


def norm_grad(x: np.ndarray) -> np.ndarray:
    """d‖x‖/dx = x / ‖x‖, and 0 at the zero vector (the pinned subgradient)."""
    n = np.linalg.norm(x)
    return x / n if n > 0 else np.zeros_like(x)


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    x, t, lam = a["x"], a["t"], float(a["lam"])
    return {
        "norm": np.array(np.linalg.norm(x)),
        "grads/norm": norm_grad(x),
        "grads/sq_norm": 2.0 * x,
        "grads/penalized": (x - t) + lam * norm_grad(x),
    }


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port `jnp.linalg.norm`: d‖x‖/dx = x / ‖x‖, which is 0 / 0 = NaN at the zero vector;
    d(‖x‖²)/dx = 2‖x‖ · NaN = NaN, and the penalised gradient (x − t) + λ · NaN is NaN too."""
    a = fx.float64()
    x, t, lam = a["x"], a["t"], float(a["lam"])
    with np.errstate(invalid="ignore", divide="ignore"):
        d_norm = x / np.linalg.norm(x)  # no pinned subgradient: NaN at 0
        return {
            "grads/norm": d_norm,
            "grads/sq_norm": 2.0 * np.linalg.norm(x) * d_norm,
            "grads/penalized": (x - t) + lam * d_norm,
        }


SPEC = Scenario(
    name="p02_norm_at_zero",
    title="gradient of a norm at the zero vector: torch 0, jnp.linalg.norm NaN",
    family="pitfalls",
    claims=(),
    source="P02",
    lesson=(
        "torch defines d‖x‖/dx = 0 at x = 0; jnp.linalg.norm differentiates sqrt at 0 and gives NaN, "
        "also for ‖x‖², and the NaN spreads into every gradient the norm is added to."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "ported": (
            ("norm", "zero"),
            ("grads/norm", "zero"),
            ("grads/sq_norm", "zero"),
            ("grads/penalized", "nonzero"),
        ),
        "naive": (("norm", "zero"),),  # the naive JAX gradients are NaN: no zero / non-zero claim holds
    },
    porting=Porting(
        torch="`torch.linalg.vector_norm(x)` (gradient 0 at x = 0)",
        jax="`optax.safe_norm(x, 0.0)`; `jnp.sum(x**2)` for ‖x‖², never `norm(x)**2`",
        trap="`jnp.linalg.norm` / `optax.global_norm` give a NaN gradient at the zero vector",
    ),
    diverges={"naive": ("grads/*",)},
    naive_oracle=naive_oracle,
    nonfinite_ok=("grads/*",),  # the naive gradients are NaN (the lesson); "ported" asserts them zero / finite
)
