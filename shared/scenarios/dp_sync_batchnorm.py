"""dp_sync_batchnorm: batch statistics averaged over the data axis (sync BatchNorm) against per-device BatchNorm.

Shapes: B = W·b samples (W = 2 ranks), D inputs, H features, O outputs. pred = l2(tanh(BN(x W1))),
BN in training mode (biased batch variance, eps, running mean updated with momentum; no bias
before it: BN removes it). Loss: mean ½‖pred - y‖² over each rank's shard, averaged over the
ranks. One forward and backward: grads/<param> of rank 0 after the all-reduce (per-device BN adds
gap/<param> = grads minus the single-device full-batch gradient, BN over all B rows), running/mean of rank 0 and
rank_gap/running/mean (max over ranks |running_r - running_0|).
Synchronised statistics are the full batch's: grads equal the single-device gradient. Per-device
BatchNorm normalises each shard by its own statistics: another objective, other gradients, and
running statistics that differ between the ranks.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

WORLD = 2
EPS, MOMENTUM = 1e-5, 0.1  # torch's defaults: running = (1 - momentum)·running + momentum·batch
FD_STEP = 3e-4  # BN over b = 2 rows is curved: the default 1e-3 leaves 2e-10 of truncation, this 1e-11
PARAMS = {"l1/kernel": ("D", "H"), "bn/scale": ("H",), "bn/bias": ("H",), "l2/kernel": ("H", "O"), "l2/bias": ("O",)}
SCHEMA = {
    "x": Field(("B", "D"), doc="inputs; rank r holds rows [r·b, (r+1)·b), b >= 2"),
    "y": Field(("B", "O"), doc="regression targets"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
}


def _check_shards(a, dims) -> str | None:
    if dims["B"] % WORLD or dims["B"] // WORLD < 2:
        return f"field 'x': B = {dims['B']} expected divisible by the {WORLD} ranks with >= 2 rows per rank"
    return None


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    b, d, h, o = (int(v) for v in rng.integers(2, 5, size=4))
    out = {"x": rng.normal(size=(WORLD * b, d)), "y": rng.normal(size=(WORLD * b, o))}
    sizes = {"D": d, "H": h, "O": o}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.5 * rng.normal(size=tuple(sizes[s] for s in shape))
    out["params/bn/scale"] = 1.0 + 0.2 * rng.normal(size=h)
    return out


def features(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """x W1 [n, H]: what BatchNorm normalises."""
    return x @ p["l1/kernel"]


def shard_loss(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    z = (features(p, x) - mean) / np.sqrt(var + EPS) * p["bn/scale"] + p["bn/bias"]
    pred = np.tanh(z) @ p["l2/kernel"] + p["l2/bias"]
    return float(np.mean(0.5 * np.sum((pred - y) ** 2, axis=1)))


def objective(p: dict[str, np.ndarray], a: dict[str, np.ndarray], sync: bool) -> float:
    """The mean over ranks of the shard losses, each shard normalised by the global or its own statistics."""
    h = features(p, a["x"])
    losses = []
    for x, y, hr in zip(*(np.split(v, WORLD) for v in (a["x"], a["y"], h)), strict=True):
        stats = h if sync else hr  # the statistics are differentiated: they depend on W1
        losses.append(shard_loss(p, x, y, stats.mean(0), stats.var(0)))
    return float(np.mean(losses))


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    sync = variant == "sync_batchnorm"
    grads = fd_grad(lambda q: objective(q, a, sync), params, h=FD_STEP)
    h = np.split(features(params, a["x"]), WORLD)
    running = [MOMENTUM * (np.concatenate(h) if sync else hr).mean(0) for hr in h]  # from zeros
    out = {"loss": np.array(objective(params, a, sync))}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    if not sync:  # the trap: against one device on all B rows (the synchronised objective)
        full = fd_grad(lambda q: objective(q, a, True), params, h=FD_STEP)
        out.update({f"gap/{k}": grads[k] - full[k] for k in PARAMS})
    out["running/mean"] = running[0]
    out["rank_gap/running/mean"] = np.max(np.abs(np.stack(running) - running[0]), axis=0)
    return out


SPEC = Scenario(
    name="dp_sync_batchnorm",
    title="Statistics across devices: BatchNorm statistics averaged over the data axis, or not",
    family="data_parallel",
    order=4,
    claims=(),
    source="Ioffe & Szegedy 2015, arXiv:1502.03167; torch nn.SyncBatchNorm; flax nnx.BatchNorm(axis_name=)",
    lesson=(
        "Plain BatchNorm under DDP or shard_map normalises each shard by its own statistics: a different objective "
        "from the single-device batch, other gradients, and running statistics that differ between ranks. "
        "Averaging the statistics over the data axis (torch SyncBatchNorm; nnx.BatchNorm(axis_name='data')) gives "
        "the full-batch gradient, with the gradient flowing through the all-reduced statistics."
    ),
    variants=("sync_batchnorm", "local_batchnorm"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "sync_batchnorm": (("grads/*", "nonzero"), ("rank_gap/running/*", "zero")),
        "local_batchnorm": (("grads/*", "nonzero"), ("gap/*", "nonzero"), ("rank_gap/running/*", "nonzero")),
    },
    porting=Porting(
        torch=(
            "`nn.SyncBatchNorm.convert_sync_batchnorm(model)` (CUDA / XPU only in torch 2.13: on gloo/CPU the batch "
            "statistics are all-reduced with the autograd-aware `torch.distributed._functional_collectives.all_reduce`)"
        ),
        jax="`nnx.BatchNorm(H, axis_name='data', momentum=1 - m)` inside `shard_map` over the 'data' axis",
        trap=(
            "per-device BatchNorm is silently another model: its statistics (and their gradients) come from the "
            "shard; and torch's momentum m is Flax's 1 - m."
        ),
    ),
    checks=(_check_shards,),
    constants={"world": WORLD, "eps": EPS, "momentum": MOMENTUM},
)
