"""multitask: a shared trunk, two heads, total loss = task1 + task2; isolate one task.

Shapes: B samples, D inputs, H trunk features, C classes of task 2.
  features = tanh(x W_t + b_t)                  [B, H]
  task1: pred1 = f1 W_1 + b_1 (squeezed) [B], loss1 = mean((pred1 - y1)^2)
  task2: logits2 = f2 W_2 + b_2          [B, C], loss2 = softmax cross-entropy
where f1, f2 are the features, stopped for the isolated task. With task 2 isolated
the trunk gradient of the total loss is exactly the trunk gradient of loss1 alone,
and head2 still learns (its own parameters are upstream of no stop).
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "trunk/kernel": ("D", "H"),
    "trunk/bias": ("H",),
    "head1/kernel": ("H", 1),
    "head1/bias": (1,),
    "head2/kernel": ("H", "C"),
    "head2/bias": ("C",),
}

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "y1": Field(("B",), doc="regression targets of task 1"),
    "labels": Field(("B",), kind="int", low=0, high="C", doc="class index in [0, C) of task 2"),
    **{f"params/{k}": Field(shape, doc="parameter, canonical layout") for k, shape in PARAMS.items()},
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = dict(zip("BDHC", (int(v) for v in rng.integers(2, 7, size=4)), strict=True))  # small, from the seed
    out = {
        "x": rng.normal(size=(sizes["B"], sizes["D"])),
        "y1": rng.normal(size=sizes["B"]),
        "labels": rng.integers(0, sizes["C"], size=sizes["B"]),
    }
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.6 * rng.normal(size=tuple(sizes.get(d, d) for d in shape))
    return out


def features(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Trunk features [B, H]."""
    return np.tanh(x @ p["trunk/kernel"] + p["trunk/bias"])


def task_losses(p, x, y1, labels, f1=None, f2=None) -> tuple[float, float]:
    """(loss1, loss2); f1 / f2 given means that head reads stopped (constant) features."""
    live = features(p, x)
    f1 = live if f1 is None else f1
    f2 = live if f2 is None else f2
    pred1 = (f1 @ p["head1/kernel"] + p["head1/bias"])[:, 0]
    logits = f2 @ p["head2/kernel"] + p["head2/bias"]
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(np.mean((pred1 - y1) ** 2)), float(-np.mean(logp[np.arange(len(labels)), labels]))


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    x, y1, labels = a["x"], a["y1"], a["labels"]
    params = {k: a[f"params/{k}"] for k in PARAMS}
    const = features(params, x)  # the stopped value, computed once at the base point
    f1 = const if variant == "isolate_task1" else None
    f2 = const if variant == "isolate_task2" else None
    grads = fd_grad(lambda q: sum(task_losses(q, x, y1, labels, f1, f2)), params)
    loss1, loss2 = task_losses(params, x, y1, labels)
    out = {"loss": np.array(loss1 + loss2), "loss_task1": np.array(loss1), "loss_task2": np.array(loss2)}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    return out


_ALL_LEARN = (("grads/trunk/*", "nonzero"), ("grads/head1/*", "nonzero"), ("grads/head2/*", "nonzero"))

SPEC = Scenario(
    name="multitask",
    title="Multitask isolation: a head on a stopped trunk output",
    family="scenarios",
    order=4,
    step_loss=lambda o, a: o["loss"],
    claims=("C12",),
    source="A1 §6.1, A3 §2.2 scenario 3",
    lesson=(
        "A head that reads stop(features) still learns, but its task no longer trains the trunk: "
        "the trunk gradient of task1 + task2 is exactly the gradient of the other task's loss alone."
    ),
    variants=("isolate_task2", "isolate_task1", "none"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={v: _ALL_LEARN for v in ("isolate_task2", "isolate_task1", "none")},
    porting=Porting(
        torch="head2(features.detach()); (loss1 + loss2).backward() — one backward of the scalar total",
        jax="head2(jax.lax.stop_gradient(features)); nnx.value_and_grad of loss1 + loss2",
        trap=(
            "The stop goes on the head's input, not on the head: the isolated head keeps learning. "
            "Both frameworks differentiate only scalars: A3's backward() on a non-scalar output raises "
            "'grad can be implicitly created only for scalar outputs' (jax.grad: TypeError)."
        ),
    ),
)
