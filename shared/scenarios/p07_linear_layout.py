"""p07_linear_layout: nn.Linear.weight is [out, in]; a Flax kernel is [in, out].

Shapes: B samples, I inputs, O outputs (I = O: a square layer loads either way).
The fixture is a torch checkpoint (`state_dict/weight` [O, I], as nn.Linear stores it);
loss = mean((x Wᵀ + b − y)²). Outputs are canonical: grads/kernel is [I, O].
Handed case: PITFALLS P07 names a 3×3 layer and its two losses but not the numbers;
the 3×3 numbers below are ours (loss 3.9969 right vs 2.1681 without the transpose).
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "x": Field(("B", "I"), doc="inputs"),
    "y": Field(("B", "O"), doc="regression targets"),
    "state_dict/weight": Field(("O", "I"), doc="torch nn.Linear.weight, [out, in]"),
    "state_dict/bias": Field(("O",), doc="torch nn.Linear.bias"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # a 3×3 layer (PITFALLS P07); numbers ours
        return {
            "x": np.array([[1.0, 2.0, 0.5], [-1.0, 0.0, 2.0], [0.5, -1.5, 1.0]]),
            "y": np.array([[1.0, 0.0, -1.0], [0.5, 2.0, 0.0], [-1.0, 1.0, 1.5]]),
            "state_dict/weight": np.array([[0.5, -0.3, 0.8], [0.1, 0.9, -0.4], [-0.7, 0.2, 0.6]]),
            "state_dict/bias": np.array([0.1, -0.2, 0.3]),
        }
    b, d = 3, 3  # the handed shape: one compile serves both
    return {
        "x": rng.normal(size=(b, d)),
        "y": rng.normal(size=(b, d)),
        "state_dict/weight": 0.5 * rng.normal(size=(d, d)),
        "state_dict/bias": 0.1 * rng.normal(size=d),
    }


def dense_mse(x: np.ndarray, y: np.ndarray, kernel: np.ndarray, bias: np.ndarray) -> dict[str, np.ndarray]:
    """Loss mean((x K + b − y)²), pred, and its gradients with respect to the kernel K [I, O] and b [O]."""
    pred = x @ kernel + bias
    dpred = 2.0 * (pred - y) / pred.size
    return {
        "loss": np.array(np.mean((pred - y) ** 2)),
        "pred": pred,
        "grads/kernel": x.T @ dpred,  # canonical [I, O]
        "grads/bias": dpred.sum(0),
    }


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    return dense_mse(a["x"], a["y"], a["state_dict/weight"].T, a["state_dict/bias"])  # torch: kernel = weight.T


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port loads weight [O, I] as the kernel: the layer x W + b, differentiated in that kernel."""
    a = fx.float64()
    return dense_mse(a["x"], a["y"], a["state_dict/weight"], a["state_dict/bias"])


_PATTERN = (("loss", "nonzero"), ("pred", "nonzero"), ("grads/*", "nonzero"))

SPEC = Scenario(
    name="p07_linear_layout",
    title="Linear layout: torch weight [out, in] vs Flax kernel [in, out]",
    family="pitfalls",
    claims=(),
    source="P07",
    lesson=(
        "Loading nn.Linear.weight into a Flax kernel without the transpose fails loudly only for a "
        "non-square layer; a square one runs and computes x W instead of x Wᵀ: a wrong loss, no error."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"ported": _PATTERN, "naive": _PATTERN},
    porting=Porting(
        torch="`nn.Linear(I, O).weight` is `[O, I]`: y = x @ weight.T + bias",
        jax="`nnx.Linear` kernel = `weight.T` (`[I, O]`); compare kernel grads transposed",
        trap="a square layer loaded without `.T` runs without error and computes the wrong function",
    ),
    diverges={"naive": ("pred", "loss", "grads/*")},
    naive_oracle=naive_oracle,
)
