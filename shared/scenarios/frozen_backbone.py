"""frozen_backbone: train a new head on a frozen MLP backbone with AdamW (weight decay on).

Shapes: B samples, D inputs, H features, C classes. Three AdamW steps.
The trap: torch AdamW skips a parameter whose .grad is None (no moments, no weight
decay); a JAX port that only adds stop_gradient gives the backbone a zero gradient
that optax.adamw still decays. `naive_stop_gradient` is that port (torch mirror:
zero tensors in .grad via zero_grad(set_to_none=False)); its backbone moves.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import adamw, fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "backbone/l1/kernel": ("D", "H"),
    "backbone/l1/bias": ("H",),
    "backbone/l2/kernel": ("H", "H"),
    "backbone/l2/bias": ("H",),
    "head/kernel": ("H", "C"),
    "head/bias": ("C",),
}

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "labels": Field(("B",), kind="int", low=0, high="C", doc="class index in [0, C)"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
    "lr": Field((), low=0.0, low_open=True, doc="AdamW learning rate"),
    "weight_decay": Field((), low=0.0, doc="decoupled weight decay"),
    "b1": Field((), low=0.0, high=1.0, high_open=True),
    "b2": Field((), low=0.0, high=1.0, high_open=True),
    "eps": Field((), low=0.0, low_open=True),
    "steps": Field((), kind="int", low=1, doc="optimizer steps"),
}

STOPPED = ("detach_features", "naive_stop_gradient")  # features are a constant for the loss
HEAD_ONLY = ("freeze_params", "detach_features")  # only the head is given to the optimizer


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = dict(zip("BDHC", (int(v) for v in rng.integers(2, 7, size=4)), strict=True))  # small, from the seed
    out = {"x": rng.normal(size=(sizes["B"], sizes["D"])), "labels": rng.integers(0, sizes["C"], size=sizes["B"])}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.5 * rng.normal(size=tuple(sizes[d] for d in shape))
    out.update(lr=np.array(1e-2), weight_decay=np.array(0.1), b1=np.array(0.9), b2=np.array(0.999), eps=np.array(1e-8))
    out["steps"] = np.array(3)
    return out


def backbone(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Features [B, H] = tanh(tanh(x W1 + b1) W2 + b2)."""
    h = np.tanh(x @ p["backbone/l1/kernel"] + p["backbone/l1/bias"])
    return np.tanh(h @ p["backbone/l2/kernel"] + p["backbone/l2/bias"])


def forward(p: dict[str, np.ndarray], x: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
    """Logits [B, C]; `features` given means they were stopped (a constant)."""
    features = backbone(p, x) if features is None else features
    return features @ p["head/kernel"] + p["head/bias"]


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-np.mean(logp[np.arange(len(labels)), labels]))


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    x, labels = a["x"], a["labels"]
    params = {k: a[f"params/{k}"] for k in PARAMS}

    def grad_fn(p):
        const = backbone(p, x) if variant in STOPPED else None  # stopped: computed once, held fixed
        return fd_grad(lambda q: cross_entropy(forward(q, x, const), labels), p)

    grads0 = grad_fn(params)
    if variant == "freeze_params":
        grads0 = {k: (np.zeros_like(g) if k.startswith("backbone/") else g) for k, g in grads0.items()}
    after = adamw(
        grad_fn,
        params,
        int(a["steps"]),
        lr=float(a["lr"]),
        b1=float(a["b1"]),
        b2=float(a["b2"]),
        eps=float(a["eps"]),
        weight_decay=float(a["weight_decay"]),
        trainable=lambda k: not (variant in HEAD_ONLY and k.startswith("backbone/")),
    )
    out = {"loss": np.array(cross_entropy(forward(params, x), labels))}
    out.update({f"grads/{k}": g for k, g in grads0.items()})
    out.update({f"params/{k}": v for k, v in after.items()})
    out.update({f"moved/{k}": after[k] - params[k] for k in PARAMS})
    return out


def _pattern(grads_backbone: str, moved_backbone: str) -> tuple[tuple[str, str], ...]:
    return (
        ("grads/backbone/*", grads_backbone),
        ("grads/head/*", "nonzero"),
        ("moved/backbone/*", moved_backbone),
        ("moved/head/*", "nonzero"),
    )


SPEC = Scenario(
    name="frozen_backbone",
    title="Transfer learning: a frozen backbone under AdamW with weight decay",
    family="scenarios",
    order=3,
    step_loss=lambda o, a: o["loss"],
    step_updates=True,
    claims=("C06", "C07", "C16"),
    source="A1 §3.1, A2 §1",
    lesson=(
        "Freezing must keep the backbone out of the optimizer, not only out of the gradient: "
        "torch skips .grad None; a JAX stop_gradient alone gives zero gradients that AdamW's "
        "weight decay still applies, so the 'frozen' backbone shrinks."
    ),
    variants=("freeze_params", "detach_features", "full_finetune", "naive_stop_gradient"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "freeze_params": _pattern("zero", "zero"),
        "detach_features": _pattern("zero", "zero"),
        "full_finetune": _pattern("nonzero", "nonzero"),
        "naive_stop_gradient": _pattern("zero", "nonzero"),
    },
    porting=Porting(
        torch="`model.backbone.requires_grad_(False)`; `AdamW(model.head.parameters())` (or `features.detach()`: `.grad` stays None, AdamW skips it)",
        jax="`nnx.Optimizer(model, optax.adamw(...), wrt=HEAD)` and `nnx.grad(..., argnums=nnx.DiffState(0, HEAD))`",
        trap=(
            "`stop_gradient` makes a zero gradient, not a missing one: `optax.adamw` still applies weight "
            "decay to it. Keep frozen leaves out of the optimizer (`wrt=` filter, `optax.partition`)."
        ),
    ),
)
