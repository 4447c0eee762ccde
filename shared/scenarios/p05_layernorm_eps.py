"""p05_layernorm_eps: LayerNorm epsilon defaults: torch 1e-5, nnx.LayerNorm 1e-6.

Shapes: B rows, D features; normalisation over D, loss = sum(c ⊙ LN(x)).
Handed case: PITFALLS P05 gives no input, only "std ≈ 0.01: outputs differ by about
0.1, gradients by 23 % relative"; x below (std 0.0077) reproduces both (0.116, 22.5 %).
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

TORCH_EPS = 1e-5  # torch.nn.LayerNorm default
NNX_EPS = 1e-6  # nnx.LayerNorm default

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs with a small spread (std ≈ 0.01)"),
    "c": Field(("B", "D"), doc="loss weights: loss = sum(c * LN(x))"),
    "params/scale": Field(("D",), doc="LayerNorm scale (torch: weight)"),
    "params/bias": Field(("D",), doc="LayerNorm bias"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":
        return {
            "x": np.array([[-0.005, -0.006, -0.006, 0.012]]),
            "c": np.array([[-0.2, -0.6, -0.4, -1.0]]),
            "params/scale": np.ones(4),
            "params/bias": np.zeros(4),
        }
    b, d = 1, 4  # the handed shape: one compile serves both
    return {
        "x": 0.01 * rng.normal(size=(b, d)),
        "c": rng.normal(size=(b, d)),
        "params/scale": 1.0 + 0.1 * rng.normal(size=d),
        "params/bias": 0.1 * rng.normal(size=d),
    }


def layer_norm(x: np.ndarray, c: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float) -> dict:
    """Forward LN(x) [B, D] and the closed-form gradients of sum(c * LN(x))."""
    xc = x - x.mean(axis=-1, keepdims=True)
    s = np.sqrt((xc**2).mean(axis=-1, keepdims=True) + eps)
    xhat = xc / s
    g = c * scale  # d loss / d xhat
    dx = (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True)) / s
    return {"y": xhat * scale + bias, "grads/x": dx, "grads/scale": (c * xhat).sum(0), "grads/bias": c.sum(0)}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    return layer_norm(a["x"], a["c"], a["params/scale"], a["params/bias"], TORCH_EPS)


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port `nnx.LayerNorm(D)`: the same layer with the nnx default epsilon 1e-6."""
    a = fx.float64()
    return layer_norm(a["x"], a["c"], a["params/scale"], a["params/bias"], NNX_EPS)


_PATTERN = (("y", "nonzero"), ("grads/*", "nonzero"))

SPEC = Scenario(
    name="p05_layernorm_eps",
    title="LayerNorm epsilon: torch 1e-5, nnx.LayerNorm 1e-6",
    family="pitfalls",
    claims=(),
    source="P05",
    lesson=(
        "The defaults differ tenfold; on features with std ≈ 0.01 the variance is comparable to eps, "
        "so outputs differ by ~0.1 and input gradients by ~23 % relative."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"ported": _PATTERN, "naive": _PATTERN},
    porting=Porting(
        torch="`nn.LayerNorm(D)` (eps=1e-5; `weight` ↔ Flax `scale`)",
        jax="`nnx.LayerNorm(D, epsilon=1e-5, rngs=...)`",
        trap="`nnx.LayerNorm` defaults to `epsilon=1e-6`: small-variance features normalise differently",
    ),
    diverges={"naive": ("y", "grads/x", "grads/scale")},
    naive_oracle=naive_oracle,
)
