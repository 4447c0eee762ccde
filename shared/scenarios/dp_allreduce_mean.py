"""dp_allreduce_mean: the averaged gradient of equal shards is the full-batch gradient; a masked mean is not.

Shapes: B = W·b samples (W = 2 ranks, b per shard), D inputs, H hidden, O outputs. One MLP,
per-example loss e = ½‖tanh(x W1 + b1) W2 + b2 - y‖², gradients of rank 0 after the all-reduce.
The oracle of grads/* is the single-device full-batch gradient (fd of the mean over B, or of the
global masked mean Σ m e / Σ m); `masked_mean_of_means` also returns gap/* = grads minus that
global-masked-mean gradient (another objective: nonzero).
Oracle of `pmean_after_grad` (listed in `diverges`): torch's DDP average; the naive JAX port
(jax.grad of the shard's loss inside shard_map, then pmean) gets W times it, because the gradient
with respect to replicated parameters is already summed over the devices.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

WORLD = 2
PARAMS = {"l1/kernel": ("D", "H"), "l1/bias": ("H",), "l2/kernel": ("H", "O"), "l2/bias": ("O",)}
SCHEMA = {
    "x": Field(("B", "D"), doc="inputs; rank r holds rows [r·b, (r+1)·b)"),
    "y": Field(("B", "O"), doc="regression targets"),
    "mask": Field(("B",), kind="bool", doc="valid examples (masked variants); every shard has one, counts differ"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
}


def _check_shards(a, dims) -> str | None:
    if dims["B"] % WORLD:
        return f"field 'x': B = {dims['B']} expected divisible by the {WORLD} ranks"
    counts = [int(c) for c in np.asarray(a["mask"]).reshape(WORLD, -1).sum(axis=1)]
    if min(counts) == 0:
        return f"field 'mask': every shard needs a valid example, got counts {counts} per rank"
    if len(set(counts)) == 1:
        return f"field 'mask': the shards' valid counts expected to differ (else the trap is invisible), got {counts}"
    return None


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    b, d, h, o = (int(v) for v in rng.integers(2, 5, size=4))
    out = {"x": rng.normal(size=(WORLD * b, d)), "y": rng.normal(size=(WORLD * b, o))}
    second = np.zeros(b, dtype=bool)
    second[rng.choice(b, size=int(rng.integers(1, b)), replace=False)] = True  # 1 .. b-1 valid
    out["mask"] = np.concatenate([np.ones(b, dtype=bool), second])  # rank 0: b valid, rank 1: fewer
    sizes = {"D": d, "H": h, "O": o}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.5 * rng.normal(size=tuple(sizes[s] for s in shape))
    return out


def example_losses(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """e [b] = ½‖tanh(x W1 + b1) W2 + b2 - y‖² per example."""
    pred = np.tanh(x @ p["l1/kernel"] + p["l1/bias"]) @ p["l2/kernel"] + p["l2/bias"]
    return 0.5 * np.sum((pred - y) ** 2, axis=1)


def objective(p: dict[str, np.ndarray], a: dict[str, np.ndarray], variant: str) -> float:
    """What the variant's data-parallel gradient is the gradient of (the global batch, W shards)."""
    e, m = example_losses(p, a["x"], a["y"]), a["mask"].astype(np.float64)
    if variant == "masked_global_mean":
        return float(np.sum(m * e) / np.sum(m))
    if variant == "masked_mean_of_means":  # DDP's average of per-shard means
        shards = zip(m.reshape(WORLD, -1), e.reshape(WORLD, -1), strict=True)
        return float(np.mean([np.sum(ms * es) / np.sum(ms) for ms, es in shards]))
    return float(np.mean(e))


def _grads(a: dict[str, np.ndarray], variant: str) -> dict[str, np.ndarray]:
    params = {k: a[f"params/{k}"] for k in PARAMS}
    return fd_grad(lambda q: objective(q, a, variant), params)


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    objective_of = "equal_shards" if variant == "pmean_after_grad" else variant
    grads = _grads(a, objective_of)
    out = {"loss": np.array(objective(params, a, objective_of))}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    if variant == "masked_mean_of_means":  # the trap: not the single-device gradient of the global masked mean
        full = _grads(a, "masked_global_mean")
        out.update({f"gap/{k}": grads[k] - full[k] for k in PARAMS})
    return out


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive JAX port: pmean of the gradient of the shard's loss = W × the averaged gradient."""
    grads = _grads(fx.float64(), "equal_shards")
    return {f"grads/{k}": WORLD * g for k, g in grads.items()}


SPEC = Scenario(
    name="dp_allreduce_mean",
    title="All-reduce = full batch: averaged shard gradients, and the masked mean that is not global",
    family="data_parallel",
    order=1,
    claims=(),
    source="DDP design (Li et al. 2020, arXiv:2006.15704 §3); JAX shard_map autodiff",
    lesson=(
        "DDP averages the gradients of the shards' losses: with equal shards that is the full-batch gradient. "
        "A masked per-shard mean makes it the mean of shard means; divide by the all-reduced count for the global "
        "mean. In shard_map the average goes into the loss (pmean / psum): jax.grad with respect to replicated "
        "parameters already sums over the devices, so a pmean after it gives W times DDP's gradient."
    ),
    variants=("equal_shards", "masked_global_mean", "masked_mean_of_means", "pmean_after_grad"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "equal_shards": (("grads/*", "nonzero"),),
        "masked_global_mean": (("grads/*", "nonzero"),),
        "masked_mean_of_means": (("grads/*", "nonzero"), ("gap/*", "nonzero")),
        "pmean_after_grad": (("grads/*", "nonzero"),),
    },
    porting=Porting(
        torch=(
            "`DistributedDataParallel(model)`: backward all-reduces and divides by W; for a masked mean write "
            "`W * (mask * e).sum() / count` with `dist.all_reduce(count)`"
        ),
        jax=(
            "inside `shard_map`: `loss = jax.lax.pmean(e.mean(), 'data')`, or `psum(sum) / psum(count)` for the "
            "masked global mean, then `jax.grad` (replicated parameters: the devices' cotangents are summed)"
        ),
        trap=(
            "a per-shard masked mean under DDP is a mean of shard means, not the global mean; and in JAX >= 0.7 "
            "(check_vma) `pmean(jax.grad(shard_loss)(params))` is W× DDP's gradient: the grad is already a psum."
        ),
    ),
    diverges={"pmean_after_grad": ("grads/*",)},
    naive_oracle=naive_oracle,
    checks=(_check_shards,),
    constants={"world": WORLD},
)
