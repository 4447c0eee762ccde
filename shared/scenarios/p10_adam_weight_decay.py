"""p10_adam_weight_decay (pitfall P10): torch Adam(weight_decay) is coupled L2, optax.adamw is decoupled.

Shapes: B samples, D features. Linear regression loss 0.5 * mean((x w - y)**2),
`steps` Adam steps with weight decay wd.
torch.optim.Adam(weight_decay=wd) adds wd * w to the gradient before the Adam
moments (L2 regularisation); optax.adamw subtracts lr * wd * w after the Adam
direction (decoupled, Loshchilov & Hutter). The port of Adam(wd) is
optax.chain(optax.add_decayed_weights(wd), optax.adam(...)); the naive port
(optax.adamw) diverges: 3 steps with wd = 0.1, lr = 0.1 differ by about 3e-2.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import adamw
from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "y": Field(("B",), doc="regression targets"),
    "w": Field(("D",), doc="initial weights"),
    "lr": Field((), low=0.0, low_open=True, doc="Adam learning rate, > 0"),
    "weight_decay": Field((), low=0.0, doc="wd: torch Adam(weight_decay=wd), >= 0"),
    "b1": Field((), low=0.0, high=1.0, high_open=True, doc="Adam beta1, in [0, 1)"),
    "b2": Field((), low=0.0, high=1.0, high_open=True, doc="Adam beta2, in [0, 1)"),
    "eps": Field((), low=0.0, low_open=True, doc="Adam epsilon, > 0"),
    "steps": Field((), kind="int", low=1, doc="optimizer steps, >= 1"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # P10: 3 steps with wd = 0.1 (inputs hand-written: P10 states only the difference)
        data = {"x": np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]]), "y": np.array([1.0, 0.0, 2.0])}
        data["w"] = np.array([1.0, -1.0])
    else:
        data = {"x": rng.normal(size=(3, 2)), "y": rng.normal(size=3), "w": rng.normal(size=2)}
    data.update(lr=np.array(0.1), weight_decay=np.array(0.1), b1=np.array(0.9), b2=np.array(0.999))
    data.update(eps=np.array(1e-8), steps=np.array(3))
    return data


def loss_grad(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """0.5 * mean((x w - y)**2) and its gradient x^T r / B."""
    r = x @ w - y
    return 0.5 * float(np.mean(r**2)), x.T @ r / len(y)


def _train(a: dict[str, np.ndarray], coupled: float, decoupled: float) -> dict[str, np.ndarray]:
    """`steps` Adam steps on loss + coupled/2 ‖w‖² (L2 in the gradient), with decoupled decay `decoupled`."""
    x, y = a["x"], a["y"]
    loss, g0 = loss_grad(a["w"], x, y)
    after = adamw(
        lambda p: {"w": loss_grad(p["w"], x, y)[1] + coupled * p["w"]},
        {"w": a["w"]},
        int(a["steps"]),
        lr=float(a["lr"]),
        b1=float(a["b1"]),
        b2=float(a["b2"]),
        eps=float(a["eps"]),
        weight_decay=decoupled,
    )["w"]
    return {"loss": np.array(loss), "grads/w": g0, "params/w": after, "moved/w": after - a["w"]}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    # torch's reference in both variants: coupled L2 = Adam on (gradient + wd * w), no decoupled decay
    a = fx.float64()
    return _train(a, coupled=float(a["weight_decay"]), decoupled=0.0)


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port `optax.adamw(lr, weight_decay=wd)`: Adam on the plain gradient, then θ −= lr·wd·θ."""
    a = fx.float64()
    return _train(a, coupled=0.0, decoupled=float(a["weight_decay"]))


SPEC = Scenario(
    name="p10_adam_weight_decay",
    title="Adam weight decay, coupled (torch Adam) vs decoupled (optax.adamw)",
    family="pitfalls",
    claims=(),
    source="P10",
    lesson=(
        "torch Adam(weight_decay=wd) is L2 added to the gradient; optax.adamw decays the weights after "
        "the Adam step. Port Adam(wd) as chain(add_decayed_weights(wd), adam); AdamW as adamw with wd explicit."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "ported": (("grads/w", "nonzero"), ("moved/w", "nonzero")),
        "naive": (("grads/w", "nonzero"), ("moved/w", "nonzero")),
    },
    porting=Porting(
        torch="`torch.optim.Adam(params, lr, weight_decay=wd)` (coupled L2)",
        jax="`optax.chain(optax.add_decayed_weights(wd), optax.adam(lr))`",
        trap="`optax.adamw(lr, weight_decay=wd)` is decoupled: not Adam(wd); AdamW defaults differ (torch 1e-2, optax 1e-4)",
    ),
    diverges={"naive": ("params/w", "moved/w")},
    naive_oracle=naive_oracle,
)
