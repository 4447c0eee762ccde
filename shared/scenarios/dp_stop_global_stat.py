"""dp_stop_global_stat: a center averaged over all ranks (all_reduce / psum) used under detach / stop_gradient.

Shapes: B = W·b samples (W = 2 ranks), D inputs, H features, O outputs. h = tanh(x W1 + b1);
the center is DINO's EMA of the global batch mean: c = m·c0 + (1 - m)·(Σ over every rank of
Σ_b (h + probe)) / B, m = 0.9; pred = (h - c) Wh + bh; loss: mean ½‖pred - y‖² per shard, averaged
over ranks. `probe` [H] is a zero parameter that enters the statistic only: its gradient is
exactly the gradient that flows through the all-reduced center (the untied-argument check).
Oracle of `inplace_all_reduce` (listed in `diverges`): what torch computes when the sum goes
through `dist.all_reduce` in place: autograd does not see the collective, so each rank's center
is differentiated through its own share only (the other ranks' sums act as constants); its JAX
port, psum, is differentiable (its transpose sums the cotangents): the full gradient (naive oracle).
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

WORLD = 2
MOMENTUM = 0.9  # DINO's center_momentum
PARAMS = {"l1/kernel": ("D", "H"), "l1/bias": ("H",), "head/kernel": ("H", "O"), "head/bias": ("O",)}
SCHEMA = {
    "x": Field(("B", "D"), doc="inputs; rank r holds rows [r·b, (r+1)·b)"),
    "y": Field(("B", "O"), doc="regression targets"),
    "center": Field(("H",), doc="the running center c0 before the step"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
}


def _check_shards(a, dims) -> str | None:
    return None if dims["B"] % WORLD == 0 else f"field 'x': B = {dims['B']} expected divisible by the {WORLD} ranks"


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    b, d, h, o = (int(v) for v in rng.integers(2, 5, size=4))
    out = {
        "x": rng.normal(size=(WORLD * b, d)),
        "y": rng.normal(size=(WORLD * b, o)),
        "center": 0.1 * rng.normal(size=h),
    }
    sizes = {"D": d, "H": h, "O": o}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.5 * rng.normal(size=tuple(sizes[s] for s in shape))
    return out


def shard_sums(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Σ_b (h + probe) of each rank [W, H]: what the all-reduce adds up."""
    h = np.tanh(x @ p["l1/kernel"] + p["l1/bias"]) + p["probe"]
    return np.stack([s.sum(axis=0) for s in np.split(h, WORLD)])


def center(a: dict[str, np.ndarray], total: np.ndarray) -> np.ndarray:
    return MOMENTUM * a["center"] + (1 - MOMENTUM) * total / len(a["x"])


def objective(p: dict[str, np.ndarray], a: dict[str, np.ndarray], centers: list[np.ndarray]) -> float:
    """Mean over ranks of the shard losses, rank r centered by centers[r]."""
    losses = []
    for r, (x, y) in enumerate(zip(np.split(a["x"], WORLD), np.split(a["y"], WORLD), strict=True)):
        h = np.tanh(x @ p["l1/kernel"] + p["l1/bias"])
        pred = (h - centers[r]) @ p["head/kernel"] + p["head/bias"]
        losses.append(np.mean(0.5 * np.sum((pred - y) ** 2, axis=1)))
    return float(np.mean(losses))


def _grads(a: dict[str, np.ndarray], variant: str) -> dict[str, np.ndarray]:
    base = {k: a[f"params/{k}"] for k in PARAMS}
    base["probe"] = np.zeros_like(a["center"])
    fixed = shard_sums(base, a["x"])  # every rank's sum at the base point

    def f(q):
        if variant == "stop_global_mean":  # the center is a constant of the step
            centers = [center(a, fixed.sum(axis=0))] * WORLD
        elif variant == "through_global_mean":  # differentiated through every rank's share
            centers = [center(a, shard_sums(q, a["x"]).sum(axis=0))] * WORLD
        else:  # in-place dist.all_reduce: rank r sees only its own share move
            own = shard_sums(q, a["x"])
            centers = [center(a, own[r] + fixed.sum(axis=0) - fixed[r]) for r in range(WORLD)]
        return objective(q, a, centers)

    return fd_grad(f, base)


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    params["probe"] = np.zeros_like(a["center"])
    c = center(a, shard_sums(params, a["x"]).sum(axis=0))
    out = {"loss": np.array(objective(params, a, [c] * WORLD)), "center": c}
    out.update({f"grads/{k}": g for k, g in _grads(a, variant).items()})
    return out


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive JAX port of the in-place all_reduce: psum, differentiated through every rank's share."""
    return {f"grads/{k}": g for k, g in _grads(fx.float64(), "through_global_mean").items()}


def _pattern(probe: str) -> tuple[tuple[str, str], ...]:
    return (("grads/probe", probe), ("grads/l1/*", "nonzero"), ("grads/head/*", "nonzero"))


SPEC = Scenario(
    name="dp_stop_global_stat",
    title="A stop on a cross-device value: a globally averaged center under detach / stop_gradient",
    family="data_parallel",
    order=5,
    claims=(),
    source="DINO, Caron et al. 2021, arXiv:2104.14294 (update_center); JAX psum transpose",
    lesson=(
        "A statistic all-reduced across ranks is either a constant of the step (torch: no_grad around "
        "dist.all_reduce; JAX: stop_gradient(psum(...))) or differentiated through every rank's share (torch: the "
        "autograd-aware functional all_reduce; JAX: psum, whose transpose sums the cotangents). torch's in-place "
        "dist.all_reduce is neither: autograd sees only the local share, and its psum port differs."
    ),
    variants=("stop_global_mean", "through_global_mean", "inplace_all_reduce"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "stop_global_mean": _pattern("zero"),
        "through_global_mean": _pattern("nonzero"),
        "inplace_all_reduce": _pattern("nonzero"),
    },
    porting=Porting(
        torch=(
            "`with torch.no_grad(): dist.all_reduce(s)` for a constant; "
            "`torch.distributed._functional_collectives.all_reduce(s, 'sum', mesh)` to differentiate through it"
        ),
        jax="`jax.lax.stop_gradient(jax.lax.psum(s, 'data'))` for a constant; `jax.lax.psum(s, 'data')` to differentiate",
        trap=(
            "`dist.all_reduce(s)` on a tensor in the graph is invisible to autograd (a warning at backward): the "
            "gradient treats the other ranks' shares as constants, and `psum`, its JAX port, does not."
        ),
    ),
    diverges={"inplace_all_reduce": ("grads/l1/*", "grads/probe")},
    naive_oracle=naive_oracle,
    checks=(_check_shards,),
    constants={"world": WORLD, "momentum": MOMENTUM},
)
