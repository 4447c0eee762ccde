"""p19_drift: one step matches, a thousand do not: float noise against a real porting bug over 1,000 steps.

Shapes: B samples, D inputs, H hidden units; a scalar output.
  pred = tanh(x W1 + b1) W2 + b2 [B, 1], loss = mean((pred − y)²)
  `steps` = 1,000 full-batch steps of torch.optim.SGD(lr, weight_decay=wd): θ ← θ − lr·(∇loss + wd·θ).
ported: optax.chain(optax.add_decayed_weights(wd), optax.sgd(lr)), the same update. naive: optax.sgd(lr),
the straightforward port (optax.sgd has no weight_decay argument): the decay is lost, a relative change
of lr·wd = 5e-6 per step: invisible after one step in float32, about 1e-2 after a thousand.
The oracle is closed-form backpropagation (checked against fd_grad in tests/test_pitfalls_p18_p19.py).
The drift rule (measured there): a difference is float noise when (1) a same-framework run whose
summation order differs (the batch permuted) drifts as much, within 10×, and (2) in float64 it shrinks
below 1e-12 relative; a porting bug is ≥ 100× the reordered drift in float32 and as large in float64.
The learning rate is small enough that SGD contracts: rounding differences stay at rounding size.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {"l1/kernel": ("D", "H"), "l1/bias": ("H",), "l2/kernel": ("H", 1), "l2/bias": (1,)}

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "y": Field(("B", 1), doc="regression targets"),
    **{
        f"params/{k}": Field(shape, doc="initial parameter, canonical layout (the same on both sides)")
        for k, shape in PARAMS.items()
    },
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate"),
    "weight_decay": Field((), low=0.0, low_open=True, doc="torch SGD's (coupled) weight decay"),
    "steps": Field((), kind="int", low=1, doc="SGD steps"),
}


def grads_and_loss(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[dict[str, np.ndarray], float]:
    """(∇loss by backpropagation in closed form, loss) at p."""
    h = np.tanh(x @ p["l1/kernel"] + p["l1/bias"])
    r = h @ p["l2/kernel"] + p["l2/bias"] - y  # [B, 1]
    d_pred = 2.0 * r / r.size
    dz = (d_pred @ p["l2/kernel"].T) * (1.0 - h**2)
    grads = {"l1/kernel": x.T @ dz, "l1/bias": dz.sum(axis=0), "l2/kernel": h.T @ d_pred, "l2/bias": d_pred.sum(axis=0)}
    return grads, float(np.mean(r**2))


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(12, 17)), "D": int(rng.integers(2, 4)), "H": int(rng.integers(3, 5))}
    out = {"x": rng.normal(size=(sizes["B"], sizes["D"])), "y": rng.normal(size=(sizes["B"], 1))}
    scales = {"l1/kernel": 0.8, "l1/bias": 0.3, "l2/kernel": 0.8, "l2/bias": 0.1}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = scales[key] * rng.normal(size=tuple(sizes.get(d, d) for d in shape))
    out.update(lr=np.array(0.05), weight_decay=np.array(1e-4), steps=np.array(1000))
    return out


def train(fx, weight_decay: float) -> dict[str, np.ndarray]:
    """losses [steps] (before each step) and the parameters after `steps` SGD steps, in float64."""
    a = fx.float64()
    p = {k: a[f"params/{k}"] for k in PARAMS}
    losses = np.zeros(int(a["steps"]))
    for t in range(len(losses)):
        g, losses[t] = grads_and_loss(p, a["x"], a["y"])
        p = {k: p[k] - a["lr"] * (g[k] + weight_decay * p[k]) for k in PARAMS}
    return {"losses": losses, **{f"params/{k}": v for k, v in p.items()}}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    return train(fx, float(fx["weight_decay"]))


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """What the naive port computes: the same 1,000 steps without the weight decay."""
    return train(fx, 0.0)


_PATTERN = (("losses", "nonzero"), ("params/*", "nonzero"))

SPEC = Scenario(
    name="p19_drift",
    title="drift over many steps: float32 noise vs a porting bug after 1,000 SGD steps",
    family="pitfalls",
    claims=(),
    source="P19",
    lesson=(
        "After one step a faithful port and a subtly wrong one (SGD's weight_decay=1e-4 dropped) both match "
        "torch in float32; after a thousand only the faithful one does. The rule: float noise is as large as a "
        "reordered same-framework run's drift and vanishes in float64; a bug is orders of magnitude larger "
        "and stays in float64."
    ),
    variants=("ported", "naive"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    naive_oracle=naive_oracle,
    pattern={"ported": _PATTERN, "naive": _PATTERN},
    diverges={"naive": ("losses", "params/*")},
    tolerance_note=(
        "The default tolerances hold after 1,000 steps because SGD contracts here: float32 torch vs JAX drifts "
        "about 5e-7 of the leaf's scale (as much as torch vs torch with the batch permuted), float64 about 1e-15; "
        "the drift bound the tests assert: within 10× the reordered run's drift in float32, below 1e-12 in float64."
    ),
    porting=Porting(
        torch="`torch.optim.SGD(params, lr, weight_decay=wd)` (coupled: the gradient gets + wd·θ), 1,000 steps",
        jax="`optax.chain(optax.add_decayed_weights(wd), optax.sgd(lr))`; the 1,000 steps as one jitted `jax.lax.scan`",
        trap=(
            "One matching step proves little: `optax.sgd(lr)` alone drops the decay, 5e-6 per step, and is ~1e-2 away "
            "after 1,000. Tell a bug from float noise: rerun in float64 (noise vanishes, a bug stays) and compare with "
            "a same-framework run in another summation order (noise is that size, a bug ≥ 100× it)."
        ),
    ),
)
