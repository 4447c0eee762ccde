"""p11_none_vs_zero_grad (pitfall P11): a parameter the loss never uses: None in torch, zeros in JAX.

Shapes: N elements per parameter. loss = 0.5 * sum(x**2); y is a parameter the
loss never touches (an unused head). One SGD step with weight decay wd.
torch.autograd.grad(loss, [x, y]) raises for y; with allow_unused=True it
returns None, and torch.optim.SGD skips a parameter whose .grad is None: y keeps
its value. jax.grad returns zeros for y, and optax's decay moves it. The package
maps None to zeros only explicitly (torch_impl._common.grads_or_zeros,
jax_impl._common.grads_of). The naive JAX port hands the zero gradient to
the optimizer: y shrinks by lr * wd * y, where torch leaves it alone. It diverges.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "x": Field(("N",), doc="parameter the loss uses"),
    "y": Field(("N",), doc="parameter the loss never uses"),
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate, > 0"),
    "weight_decay": Field((), low=0.0, doc="SGD weight decay (coupled L2), >= 0"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # P11 states no numbers: small hand-written parameters
        data = {"x": np.array([1.0, 2.0]), "y": np.array([3.0, -1.0])}
    else:
        data = {"x": rng.normal(size=2), "y": rng.normal(size=2)}
    return {**data, "lr": np.array(0.1), "weight_decay": np.array(0.1)}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    x, y, lr, wd = a["x"], a["y"], float(a["lr"]), float(a["weight_decay"])
    gx = x.copy()  # d 0.5 * sum(x**2) / dx
    # torch's reference in both variants: y has no gradient (None) and is skipped by SGD
    x_new = x - lr * (gx + wd * x)
    return {
        "grads/x": gx,
        "grads/y": np.zeros_like(y),
        "params/x": x_new,
        "params/y": y,
        "moved/x": x_new - x,
        "moved/y": np.zeros_like(y),
    }


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port hands y's zero gradient to SGD with coupled decay: y <- y − lr·(0 + wd·y)."""
    a = fx.float64()
    y, lr, wd = a["y"], float(a["lr"]), float(a["weight_decay"])
    y_new = y - lr * (np.zeros_like(y) + wd * y)
    return {"params/y": y_new, "moved/y": y_new - y}


SPEC = Scenario(
    name="p11_none_vs_zero_grad",
    title="None vs zero gradients for a parameter the loss does not use",
    family="pitfalls",
    claims=(),
    source="P11",
    lesson=(
        "torch says 'no gradient' (None, or an error) where JAX says 'zero gradient': an optimizer skips "
        "the first and still decays the second. Map one to the other explicitly, never by accident."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "ported": (("grads/x", "nonzero"), ("grads/y", "zero"), ("moved/x", "nonzero"), ("moved/y", "zero")),
        "naive": (("grads/x", "nonzero"), ("grads/y", "zero"), ("moved/x", "nonzero")),
    },
    porting=Porting(
        torch="`torch.autograd.grad(loss, [x, y], allow_unused=True)` gives `None` for unused `y`; SGD skips it",
        jax="`jax.grad(loss)({'x': x})`: differentiate and update only the used leaves; zeros filled explicitly",
        trap="`jax.grad` returns zeros for unused `y`, and weight decay still moves it",
    ),
    diverges={"naive": ("params/y", "moved/y")},
    naive_oracle=naive_oracle,
)
