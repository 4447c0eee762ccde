"""grad_accumulation: micro-batch gradient accumulation, one optimizer step per n micro-batches.

Shapes: N examples in the full batch, D input features, H hidden units; a scalar output.
  pred = tanh(x W1 + b1) W2 + b2, L(batch) = mean((pred − y)²) over the batch
  The full batch splits into n = MICRO_BATCHES micro-batches: equal sizes N/n, or (mean_unequal)
  N − n + 1 examples then single ones. One accumulation cycle:
    mean_equal, mean_unequal:  g = Σ_k ∇L(micro_k) / n      ((loss_k / n).backward() n times)
    not_divided:               g = Σ_k ∇L(micro_k)          (loss_k.backward(): n times too large)
    zero_grad_in_loop:         g = ∇L(micro_n) / n          (zero_grad before each backward)
  then θ ← θ − lr·g and zero_grad; `steps` cycles over the same full batch.
g equals the full-batch gradient ∇L(batch) only for a mean over equal micro-batches.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {"l1/kernel": ("D", "H"), "l1/bias": ("H",), "l2/kernel": ("H", 1), "l2/bias": (1,)}
MICRO_BATCHES = 2

SCHEMA = {
    "x": Field(("N", "D"), doc="inputs of the full batch"),
    "y": Field(("N",), doc="regression targets"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate"),
    "steps": Field((), kind="int", low=1, doc="optimizer steps (accumulation cycles)"),
}


def _check_split(arrays, dims) -> str | None:
    n = dims["N"]
    if n % MICRO_BATCHES or n <= MICRO_BATCHES:
        return f"x: expected N a multiple of {MICRO_BATCHES} micro-batches, larger than {MICRO_BATCHES}, got N = {n}"
    return None


def sizes(n_examples: int, variant: str) -> list[int]:
    """Micro-batch sizes: equal, or for mean_unequal N − n + 1 then ones."""
    if variant == "mean_unequal":
        return [n_examples - MICRO_BATCHES + 1] + [1] * (MICRO_BATCHES - 1)
    return [n_examples // MICRO_BATCHES] * MICRO_BATCHES


def mean_loss(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    h = np.tanh(x @ p["l1/kernel"] + p["l1/bias"])
    return float(np.mean(((h @ p["l2/kernel"] + p["l2/bias"])[:, 0] - y) ** 2))


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    dims = {"N": 2 * int(rng.integers(2, 4)), "D": int(rng.integers(2, 4)), "H": int(rng.integers(2, 4))}
    out = {"x": rng.normal(size=(dims["N"], dims["D"])), "y": rng.normal(size=dims["N"])}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.7 * rng.normal(size=tuple(dims.get(d, d) for d in shape))
    out.update(lr=np.array(0.1), steps=np.array(2))
    return out


def accumulated(p: dict[str, np.ndarray], a: dict[str, np.ndarray], variant: str) -> dict[str, np.ndarray]:
    """g of one accumulation cycle at p (see the module docstring)."""
    bounds = np.cumsum([0] + sizes(len(a["y"]), variant))
    micro = [
        fd_grad(lambda q, s=s, e=e: mean_loss(q, a["x"][s:e], a["y"][s:e]), p)
        for s, e in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    n = len(micro)
    if variant == "zero_grad_in_loop":
        return {k: micro[-1][k] / n for k in p}
    if variant == "not_divided":
        return {k: sum(g[k] for g in micro) for k in p}
    return {k: sum(g[k] for g in micro) / n for k in p}


def _outputs(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    p = {k: a[f"params/{k}"] for k in PARAMS}
    full = fd_grad(lambda q: mean_loss(q, a["x"], a["y"]), p)
    out = {"loss": np.array(mean_loss(p, a["x"], a["y"]))}
    for step in range(int(a["steps"])):
        g = accumulated(p, a, variant)
        if step == 0:
            out.update({f"grads/{k}": v for k, v in g.items()})
            out.update({f"gap/{k}": g[k] - full[k] for k in PARAMS})
        p = {k: p[k] - a["lr"] * g[k] for k in PARAMS}
    out.update({f"full_grads/{k}": v for k, v in full.items()})
    out.update({f"params/{k}": v for k, v in p.items()})
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    return _outputs(fx, variant)


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """What the JAX port with optax.MultiSteps computes for torch's undivided sum: the mean of the micro-batch gradients."""
    return _outputs(fx, "mean_equal")


_BASE = (("grads/*", "nonzero"), ("full_grads/*", "nonzero"), ("params/*", "nonzero"))

SPEC = Scenario(
    name="grad_accumulation",
    title="Gradient accumulation: (loss / n).backward() n times ↔ optax.MultiSteps",
    family="advanced",
    order=15,
    claims=(),
    source="PyTorch docs (gradients accumulate in .grad); optax.MultiSteps; Ott et al. 2018, arXiv:1806.00187",
    lesson=(
        "backward() adds into .grad: n micro-batches of (loss / n) then one step and zero_grad give the "
        "full-batch gradient, but only when the loss is a mean over equal micro-batches. Without the / n the "
        "step is n times too large; zero_grad inside the loop keeps the last micro-batch only; unequal "
        "micro-batches weight their examples unequally. optax.MultiSteps averages for you."
    ),
    variants=("mean_equal", "mean_unequal", "not_divided", "zero_grad_in_loop"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    naive_oracle=naive_oracle,
    checks=(_check_split,),
    constants={"micro_batches": MICRO_BATCHES},
    pattern={
        "mean_equal": _BASE,
        "mean_unequal": (*_BASE, ("gap/*", "nonzero")),
        "not_divided": _BASE,
        "zero_grad_in_loop": (*_BASE, ("gap/*", "nonzero")),
    },
    diverges={"not_divided": ("grads/*", "gap/*", "params/*")},
    porting=Porting(
        torch="for each micro-batch `(loss / n).backward()`; then `optimizer.step(); optimizer.zero_grad()`",
        jax=(
            "`nnx.Optimizer(model, optax.MultiSteps(optax.sgd(lr), every_k_schedule=n))`, one `update` per "
            "micro-batch (it averages); or a plain sum `acc = jax.tree.map(lambda a, g: a + g / n, acc, grads)`"
        ),
        trap=(
            "A torch loop without `/ n` sums (n× the step); its port to `optax.MultiSteps` averages: the two differ "
            "by n, silently. `zero_grad` inside the loop keeps one micro-batch. Unequal micro-batches: the mean of "
            "means is not the full-batch mean (weight each by its size / N)."
        ),
    ),
)
