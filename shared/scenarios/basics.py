"""basics: y = 2x, z = stop(y): same values, no gradient through z.

Shapes: N elements. Loss weights c (on z) and d (on y) make the two paths visible:
  d/dx sum(c·z)           = 0 with the stop, 2c without;
  d/dx sum(d·y + c·z)     = 2d with the stop, 2d + 2c without.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "x": Field(("N",), doc="input"),
    "c": Field(("N",), doc="loss weight on the stopped copy z"),
    "d": Field(("N",), doc="loss weight on y"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "article":  # A1 §2.2 / C01: y = [2, 4, 6]
        return {"x": np.array([1.0, 2.0, 3.0]), "c": np.ones(3), "d": np.ones(3)}
    n = int(rng.integers(2, 7))  # a small random size: property tests vary shapes through the seed
    return {"x": rng.normal(size=n), "c": rng.normal(size=n), "d": rng.normal(size=n)}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    p = fx.float64()
    y = 2.0 * p["x"]
    via_z = np.zeros_like(y) if variant == "z_stopped" else 2.0 * p["c"]
    return {"y": y, "z": y.copy(), "grads/x_via_z": via_z, "grads/x_total": 2.0 * p["d"] + via_z}


SPEC = Scenario(
    name="basics",
    title="detach / stop_gradient: same value, no gradient",
    family="scenarios",
    order=1,
    step_loss=lambda o, a: (a["d"] * o["y"] + a["c"] * o["z"]).sum(),  # loss_total
    claims=("C01", "C02", "C04"),
    source="A1 §2.1–2.2, A2 intro, A3 §2.1",
    lesson=(
        "z = detach(y) has y's values but is a constant for autograd: the gradient of anything "
        "computed from z alone is zero, and y's own path is untouched."
    ),
    variants=("z_stopped", "none"),
    cases=("random", "article"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "z_stopped": (("grads/x_via_z", "zero"), ("grads/x_total", "nonzero"), ("z", "nonzero")),
        "none": (("grads/x_via_z", "nonzero"), ("grads/x_total", "nonzero"), ("z", "nonzero")),
    },
    porting=Porting(
        torch="`z = y.detach()` (shares storage with y; `requires_grad` False, `grad_fn` None)",
        jax="`z = jax.lax.stop_gradient(y)` (a new immutable array)",
        trap=(
            "`backward()` through a detached result raises in torch ('element 0 of tensors does not "
            "require grad'); the same program in JAX silently returns a zero gradient."
        ),
    ),
)
