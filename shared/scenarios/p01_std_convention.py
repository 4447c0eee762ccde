"""p01_std_convention: torch's std is unbiased (N−1), jnp.std is the population std (N).

Shapes: R rows, N elements per row; std over the last axis.
Handed case (PITFALLS P01): x = [[3.4, 5.6, 7.8], [2, 3, 4], [0.1, 0.2, 0.3]]:
torch [2.2, 1.0, 0.1], naive jnp.std [1.7963, 0.8165, 0.0816], ratio sqrt(N/(N−1)).
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {"x": Field(("R", "N"), doc="rows of samples; std over the last axis (N >= 2)")}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # PITFALLS P01
        return {"x": np.array([[3.4, 5.6, 7.8], [2.0, 3.0, 4.0], [0.1, 0.2, 0.3]])}
    return {"x": rng.normal(loc=1.0, scale=2.0, size=(3, 3))}  # the handed shape: one compile serves both


def row_std(x: np.ndarray, ddof: int) -> dict[str, np.ndarray]:
    """Std over the last axis with divisor N − ddof, and d sum(std) / dx = (x − mean) / ((N − ddof) std)."""
    std = x.std(axis=-1, ddof=ddof)
    grad = (x - x.mean(axis=-1, keepdims=True)) / ((x.shape[-1] - ddof) * std[:, None])
    return {"std": std, "grads/x": grad}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    return row_std(fx.float64()["x"], ddof=1)  # torch's unbiased std in both variants


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port `jnp.std(x, -1)`: the population std (ddof=0) and its gradient."""
    return row_std(fx.float64()["x"], ddof=0)


_PATTERN = (("std", "nonzero"), ("grads/x", "nonzero"))


def _check_samples(arrays, dims) -> str | None:
    """N >= 2 and no constant row: the unbiased std divides by N − 1 and its gradient by std."""
    if dims["N"] < 2:
        return f"x: expected N >= 2 samples per row (the unbiased std divides by N − 1), got N = {dims['N']}"
    x = np.asarray(arrays["x"], dtype=np.float64)
    flat_rows = np.flatnonzero(np.ptp(x, axis=-1) == 0)
    if flat_rows.size:
        r = int(flat_rows[0])
        return (
            f"x: expected every row to vary (the std gradient divides by std), got a constant row {r}: {x[r].tolist()}"
        )
    return None


SPEC = Scenario(
    name="p01_std_convention",
    title="std convention: torch divides by N−1, jnp.std by N",
    family="pitfalls",
    claims=(),
    source="P01",
    lesson=(
        "x.std() in torch is the unbiased estimate (correction=1); jnp.std defaults to ddof=0. "
        "A straightforward port shrinks every std by sqrt((N−1)/N) with no error."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"ported": _PATTERN, "naive": _PATTERN},
    porting=Porting(
        torch="`x.std(dim)` (unbiased, `correction=1`)",
        jax="`jnp.std(x, axis, ddof=1)`; torch `correction=0` ↔ jnp default",
        trap="`jnp.std` defaults to `ddof=0`: values shrink by sqrt((N−1)/N), silently",
    ),
    diverges={"naive": ("std", "grads/x")},
    naive_oracle=naive_oracle,
    checks=(_check_samples,),
)
