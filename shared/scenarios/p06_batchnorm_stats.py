"""p06_batchnorm_stats: BatchNorm running statistics: momentum meaning and unbiased variance.

Shapes: B batch rows, E eval rows, F features. One training batch, then eval.
torch: new = (1 − m)·old + m·batch, running_var from the unbiased batch variance;
nnx.BatchNorm: new = momentum·old + (1 − momentum)·batch, biased variance.
Handed case (PITFALLS P06): batch [[1, 2], [2, 0], [4, 1], [5, 5]] from fresh statistics,
m = 0.1: torch mean [0.3, 0.2], var [1.2333, 1.3667], eval on [[3, 3]] [2.4312, 2.3951].
The loss weights c are ours (they only make the input gradient visible).
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

EPS = 1e-5  # both defaults agree

SCHEMA = {
    "x": Field(("B", "F"), doc="training batch (B >= 2)"),
    "x_eval": Field(("E", "F"), doc="inputs normalised with the running statistics"),
    "c": Field(("B", "F"), doc="loss weights: loss = sum(c * BN_train(x))"),
    "params/scale": Field(("F",), doc="BatchNorm scale (torch: weight)"),
    "params/bias": Field(("F",), doc="BatchNorm bias"),
    "running_mean": Field(("F",), doc="running mean before the batch"),
    "running_var": Field(("F",), low=0.0, doc="running variance before the batch, >= 0"),
    "momentum": Field((), low=0.0, high=1.0, doc="torch convention: weight of the batch statistic, in [0, 1]"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # PITFALLS P06; c ours
        return {
            "x": np.array([[1.0, 2.0], [2.0, 0.0], [4.0, 1.0], [5.0, 5.0]]),
            "x_eval": np.array([[3.0, 3.0]]),
            "c": np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 2.0]]),
            "params/scale": np.ones(2),
            "params/bias": np.zeros(2),
            "running_mean": np.zeros(2),
            "running_var": np.ones(2),
            "momentum": np.array(0.1),
        }
    b, e, f = 4, 1, 2  # the handed shape: one compile serves both
    return {
        "x": rng.normal(loc=1.0, scale=2.0, size=(b, f)),
        "x_eval": rng.normal(size=(e, f)),
        "c": rng.normal(size=(b, f)),
        "params/scale": 1.0 + 0.1 * rng.normal(size=f),
        "params/bias": 0.1 * rng.normal(size=f),
        "running_mean": 0.5 * rng.normal(size=f),
        "running_var": rng.uniform(0.5, 2.0, size=f),
        "momentum": np.array(0.1),  # torch's default; a module attribute (static), so a new value recompiles
    }


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    x, c, scale, bias, m = a["x"], a["c"], a["params/scale"], a["params/bias"], float(a["momentum"])
    n = x.shape[0]
    mean, var = x.mean(0), x.var(0)  # train mode normalises with the biased batch variance
    s = np.sqrt(var + EPS)
    xhat = (x - mean) / s
    g = c * scale
    dx = (g - g.mean(0) - xhat * (g * xhat).mean(0)) / s
    run_mean = (1 - m) * a["running_mean"] + m * mean
    run_var = (1 - m) * a["running_var"] + m * var * n / (n - 1)  # torch stores the unbiased variance
    eval_out = (a["x_eval"] - run_mean) / np.sqrt(run_var + EPS) * scale + bias
    return {
        "train_out": xhat * scale + bias,
        "grads/x": dx,
        "running_mean": run_mean,
        "running_var": run_var,
        "eval_out": eval_out,
    }


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port `nnx.BatchNorm(momentum=m)`: new = m·old + (1 − m)·batch, the biased batch variance."""
    a = fx.float64()
    x, scale, bias, m = a["x"], a["params/scale"], a["params/bias"], float(a["momentum"])
    run_mean = m * a["running_mean"] + (1 - m) * x.mean(0)
    run_var = m * a["running_var"] + (1 - m) * x.var(0)  # nnx stores the biased variance
    eval_out = (a["x_eval"] - run_mean) / np.sqrt(run_var + EPS) * scale + bias
    return {"running_mean": run_mean, "running_var": run_var, "eval_out": eval_out}


_PATTERN = tuple((k, "nonzero") for k in ("train_out", "grads/x", "running_mean", "running_var", "eval_out"))


def _check_batch(arrays, dims) -> str | None:
    """Training-mode BatchNorm needs two samples (torch refuses B = 1; the unbiased variance divides by B − 1)."""
    b = dims["B"]
    return None if b >= 2 else f"x: expected a batch of B >= 2 (unbiased running variance), got B = {b}"


SPEC = Scenario(
    name="p06_batchnorm_stats",
    title="BatchNorm running statistics: momentum 0.1 in torch is momentum 0.9 in nnx, plus N/(N−1)",
    family="pitfalls",
    claims=(),
    source="P06",
    lesson=(
        "Running statistics are buffers updated outside the gradient, with opposite momentum "
        "conventions and an unbiased variance in torch: copying momentum=0.1 into nnx.BatchNorm "
        "makes the running mean [2.7, 1.8] instead of [0.3, 0.2] and every eval output wrong."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"ported": _PATTERN, "naive": _PATTERN},
    porting=Porting(
        torch="`nn.BatchNorm1d(F, momentum=m)`: new = (1 − m)·old + m·batch, unbiased batch var",
        jax="`momentum=1 − m` and the var update scaled by N/(N−1) (or load torch's running stats)",
        trap="`nnx.BatchNorm(momentum=0.1)` keeps 10 % of the old value, and stores the biased var",
    ),
    diverges={"naive": ("running_mean", "running_var", "eval_out")},
    naive_oracle=naive_oracle,
    checks=(_check_batch,),
)
