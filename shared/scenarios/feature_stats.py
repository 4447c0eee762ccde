"""feature_stats: mean and std of stopped features for monitoring, inside a training step.

Shapes: B samples, D inputs, H features, O outputs. features = tanh(x W1 + b1) [B, H],
pred = features W2 + b2 [B, O], loss = mean((pred - y)²). The monitor reads
stop(features) and returns per-feature mean and std over the batch [H].
The trap (P01, C19): torch.std is unbiased (correction=1, divide by B - 1), jnp.std
divides by B (ddof=0); the two differ by exactly sqrt(B / (B - 1)). With B = 1 the
unbiased std is NaN in both frameworks (0 / 0), the ddof=0 std is 0: the port keeps
torch's NaN (tests/test_feature_stats.py asserts it); the training gradient stays finite.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "encoder/kernel": ("D", "H"),
    "encoder/bias": ("H",),
    "head/kernel": ("H", "O"),
    "head/bias": ("O",),
}

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "y": Field(("B", "O"), doc="regression targets"),
    **{f"params/{k}": Field(shape, doc="parameter, canonical layout") for k, shape in PARAMS.items()},
}

# ddof of the monitored std, per variant and framework: (torch, jax)
DDOF = {"ported": (1, 1), "population": (0, 0), "naive_ddof0": (1, 0), "detach_features": (1, 1)}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": 5, "D": 3, "H": 4, "O": 2}
    out = {"x": rng.normal(size=(sizes["B"], sizes["D"])), "y": rng.normal(size=(sizes["B"], sizes["O"]))}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.7 * rng.normal(size=tuple(sizes[d] for d in shape))
    return out


def std(h: np.ndarray, ddof: int) -> np.ndarray:
    """Per-column std of h [B, H] with divisor B - ddof (NaN for B - ddof = 0, as both frameworks)."""
    dev2 = ((h - h.mean(axis=0)) ** 2).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(dev2 / (h.shape[0] - ddof))


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """Closed form. r = pred - y, g = 2 r / (B·O); dW2 = hᵀg, db2 = Σg, dz = g W2ᵀ (1 - h²), dW1 = xᵀdz, db1 = Σdz.

    For `detach_features` the head reads stopped features: dW1 = db1 = 0. The std
    oracle is torch's (ddof of the torch column of DDOF): the reference of `naive_ddof0`.
    """
    a = fx.float64()
    x, y = a["x"], a["y"]
    w1, b1, w2, b2 = (a[f"params/{k}"] for k in PARAMS)
    h = np.tanh(x @ w1 + b1)
    r = h @ w2 + b2 - y
    g = 2.0 * r / r.size
    dz = (g @ w2.T) * (1.0 - h**2)
    if variant == "detach_features":
        dz = np.zeros_like(dz)  # the head's input is a constant: nothing reaches the encoder
    return {
        "loss": np.array(np.mean(r**2)),
        "grads/encoder/kernel": x.T @ dz,
        "grads/encoder/bias": dz.sum(axis=0),
        "grads/head/kernel": h.T @ g,
        "grads/head/bias": g.sum(axis=0),
        "stats/mean": h.mean(axis=0),
        "stats/std": std(h, DDOF[variant][0]),
    }


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port `jnp.std(h, 0)`: the population std of the features (divisor B, ddof=0)."""
    a = fx.float64()
    h = np.tanh(a["x"] @ a["params/encoder/kernel"] + a["params/encoder/bias"])
    return {"stats/std": std(h, DDOF[variant][1])}


def _pattern(encoder: str) -> tuple[tuple[str, str], ...]:
    return (
        ("grads/encoder/*", encoder),
        ("grads/head/*", "nonzero"),
        ("stats/mean", "nonzero"),
        ("stats/std", "nonzero"),
    )


SPEC = Scenario(
    name="feature_stats",
    title="Monitoring feature statistics inside a training step: stopped, and the std convention",
    family="scenarios",
    order=13,
    step_loss=lambda o, a: o["loss"],
    claims=("C19", "C22"),
    source="A3 §2.2 scenario 2, A3 §3.1, P01",
    lesson=(
        "Statistics of stopped features leave the training gradient bit-for-bit unchanged; stopping "
        "the features the loss itself reads (detach_features) stops the encoder's training. "
        "torch.std is unbiased, jnp.std is not: parity needs jnp.std(ddof=1)."
    ),
    variants=("ported", "population", "naive_ddof0", "detach_features"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "ported": _pattern("nonzero"),
        "population": _pattern("nonzero"),
        "naive_ddof0": _pattern("nonzero"),
        "detach_features": _pattern("zero"),
    },
    porting=Porting(
        torch="stats = (h.detach().mean(0), h.detach().std(0))  # std: correction=1 by default",
        jax="value_and_grad(..., has_aux=True); aux = (mean(stop(h), 0), jnp.std(stop(h), 0, ddof=1))",
        trap=(
            "jnp.std defaults to ddof=0, torch.std to correction=1: the naive port is smaller by "
            "sqrt((B-1)/B) (0.894 at B = 5). Port x.std() as jnp.std(x, ddof=1), x.std(correction=0) "
            "as jnp.std(x). One sample: torch NaN, jnp ddof=0 gives 0."
        ),
    ),
    diverges={"naive_ddof0": ("stats/std",)},
    naive_oracle=naive_oracle,
)
