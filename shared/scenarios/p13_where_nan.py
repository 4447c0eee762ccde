"""p13_where_nan (pitfall P13): NaN through the branch `where` did not take.

Shapes: N elements. f(x) = sum(where(x > 0, sqrt(x), 0)).
Both frameworks differentiate both branches of `where` and multiply the untaken
one by zero: sqrt'(0) = inf and sqrt(-1) = nan give 0 * inf = nan. On the handed
input x = [-1, 0, 4] the naive gradient is [nan, nan, 0.25] in torch and in JAX;
the double-where pattern (make the argument safe before sqrt, then select) gives
[0, 0, 0.25] in both. Neither variant diverges: the trap is on both sides, and
the oracle reproduces the NaN of the naive chain rule.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {"x": Field(("N",), doc="input; entries <= 0 take the constant branch")}

HANDED_X = (-1.0, 0.0, 4.0)  # PITFALLS.md P13


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":
        return {"x": np.array(HANDED_X)}
    x = np.abs(rng.normal(size=3)) + 0.1  # the handed kind: one negative, one zero, one positive entry
    x[0] *= -1.0
    x[1] = 0.0
    return {"x": x}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    x = fx.float64()["x"]
    pos = x > 0
    f = np.sum(np.sqrt(np.where(pos, x, 1.0)) * pos)
    with np.errstate(divide="ignore", invalid="ignore"):
        if variant == "naive":  # the chain rule through both branches: 1·sqrt'(x) or 0·sqrt'(x)
            grad = pos * (0.5 / np.sqrt(x))
        else:  # sqrt'(x) is only ever evaluated at a safe argument
            grad = np.where(pos, 0.5 / np.sqrt(np.where(pos, x, 1.0)), 0.0)
    return {"f": np.array(f), "grads/x": grad}


SPEC = Scenario(
    name="p13_where_nan",
    title="NaN through the untaken branch of where",
    family="pitfalls",
    claims=(),
    source="P13",
    lesson=(
        "where(c, sqrt(x), 0) has a NaN gradient wherever sqrt'(x) is inf or nan, even though that "
        "branch is not selected: guard the argument first (double where), in both frameworks."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "ported": (("f", "nonzero"), ("grads/x", "nonzero")),
        "naive": (("f", "nonzero"),),  # grads/x holds NaN by design (nonfinite_ok, asserted in tests)
    },
    porting=Porting(
        torch="`torch.where(x > 0, torch.sqrt(torch.where(x > 0, x, 1)), 0)`",
        jax="`jnp.where(x > 0, jnp.sqrt(jnp.where(x > 0, x, 1.0)), 0.0)`",
        trap="`where(c, sqrt(x), 0)` is NaN-free forward but its gradient is `0 * inf = nan` in both frameworks",
    ),
    nonfinite_ok=("grads/x",),
)
