"""linear_regression: y_hat = x @ w + b, loss = mean((y_hat - y)²), with and without x stopped.

Shapes: B samples, D features. The "article" case is A3 §1.2 (C03): w = 3,
x = 2, b = 1, y = 5, so y_hat = 7, loss = 4, dL/dw = 8, dL/dx = 12, dL/db = 4.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "y": Field(("B",), doc="targets"),
    "w": Field(("D",), doc="weights"),
    "b": Field((), doc="bias"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "article":
        return {"x": np.array([[2.0]]), "y": np.array([5.0]), "w": np.array([3.0]), "b": np.array(1.0)}
    bsz, d = (int(v) for v in rng.integers(2, 7, size=2))  # small random shapes, drawn from the seed
    return {
        "x": rng.normal(size=(bsz, d)),
        "y": rng.normal(size=bsz),
        "w": rng.normal(size=d),
        "b": np.array(rng.normal()),
    }


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """Closed form: r = x w + b - y; dL/dw = 2/B xᵀr, dL/db = 2/B Σr, dL/dx = 2/B r wᵀ."""
    p = fx.float64()
    x, y, w, b = p["x"], p["y"], p["w"], p["b"]
    r = x @ w + b - y
    n = r.shape[0]
    grad_x = np.zeros_like(x) if variant == "x_stopped" else 2.0 / n * np.outer(r, w)
    return {
        "loss": np.array(np.mean(r**2)),
        "grads/w": 2.0 / n * x.T @ r,
        "grads/b": np.array(2.0 / n * r.sum()),
        "grads/x": grad_x,
    }


SPEC = Scenario(
    name="linear_regression",
    title="y = w·x + b: gradients by hand, and x stopped",
    family="scenarios",
    order=2,
    step_loss=lambda o, a: o["loss"],
    claims=("C03",),
    source="A3 §1.2",
    lesson=(
        "Autograd gives dL/dw = 8, dL/dx = 12, dL/db = 4 for w = 3, x = 2, b = 1, target 5; "
        "stopping x zeroes dL/dx and leaves dL/dw and dL/db unchanged."
    ),
    variants=("full", "x_stopped"),
    cases=("article", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "full": (("grads/w", "nonzero"), ("grads/b", "nonzero"), ("grads/x", "nonzero")),
        "x_stopped": (("grads/w", "nonzero"), ("grads/b", "nonzero"), ("grads/x", "zero")),
    },
    porting=Porting(
        torch="`x = x.detach()`; `loss.backward()`; read `w.grad`, `b.grad` (`x.grad` stays None)",
        jax="`jax.grad(loss, argnums=(0, 1, 2))(w, b, x)` with `x = jax.lax.stop_gradient(x)` inside",
        trap="torch accumulates into `.grad` across backward calls; `jax.grad` returns fresh gradients each call.",
    ),
)
