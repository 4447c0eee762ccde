"""dp_no_sync: gradient accumulation over M micro-batches per rank, one all-reduce, one SGD step.

Shapes: B = W·M·b samples (W = 2 ranks, M micro-batches of b per rank), D inputs, H hidden,
O outputs. Rank r holds rows [r·M·b, (r+1)·M·b); its micro-batch i is the i-th b of them. Loss of
a micro-batch: mean ½‖tanh(x W1 + b1) W2 + b2 - y‖², accumulated as loss / M. One SGD step (lr)
on the step's micro-batch. moved/<param> = params after the round - before (the oracle: -lr · the
full-batch gradient, the step of one device on all B rows); in the trap gap/<param> = moved + lr · it;
pending/<param>: rank 0's accumulated gradient left after the round (zero when the step came last).
`step_on_first_micro_batch` is the off-by-one loop (`i % M == 0`): it syncs and steps on the first
micro-batch's gradient, and the later micro-batches pile up unsynchronised for the next step.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

WORLD = 2
PARAMS = {"l1/kernel": ("D", "H"), "l1/bias": ("H",), "l2/kernel": ("H", "O"), "l2/bias": ("O",)}
SCHEMA = {
    "x": Field(("B", "D"), doc="inputs; rank r holds rows [r·M·b, (r+1)·M·b), micro-batch i the i-th b of them"),
    "y": Field(("B", "O"), doc="regression targets"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
    "micro_batches": Field((), kind="int", low=2, doc="M micro-batches per rank and step, >= 2"),
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate"),
}


def _check_split(a, dims) -> str | None:
    m = int(a["micro_batches"])
    if dims["B"] % (WORLD * m):
        return f"field 'x': B = {dims['B']} expected divisible by {WORLD} ranks x micro_batches M = {m}"
    return None


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    b, m, d, h, o = (int(v) for v in rng.integers(2, 4, size=5))
    n = WORLD * m * b
    out = {"x": rng.normal(size=(n, d)), "y": rng.normal(size=(n, o))}
    sizes = {"D": d, "H": h, "O": o}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.5 * rng.normal(size=tuple(sizes[s] for s in shape))
    out.update(micro_batches=np.array(m), lr=np.array(0.1))
    return out


def micro_loss(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    pred = np.tanh(x @ p["l1/kernel"] + p["l1/bias"]) @ p["l2/kernel"] + p["l2/bias"]
    return float(np.mean(0.5 * np.sum((pred - y) ** 2, axis=1)))


def _rows(a: dict, m: int, rank: int, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Micro-batch i of one rank."""
    b = len(a["x"]) // (WORLD * m)
    start = (rank * m + i) * b
    return a["x"][start : start + b], a["y"][start : start + b]


def _global_micro(a: dict, m: int, i: int, p: dict) -> float:
    """Micro-batch i's loss averaged over the ranks (what the synchronised step sees)."""
    return float(np.mean([micro_loss(p, *_rows(a, m, r, i)) for r in range(WORLD)]))


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    m, lr = int(a["micro_batches"]), float(a["lr"])
    params = {k: a[f"params/{k}"] for k in PARAMS}
    full = fd_grad(lambda q: micro_loss(q, a["x"], a["y"]), params)  # the mean over all B rows
    if variant == "step_on_first_micro_batch":
        step = fd_grad(lambda q: _global_micro(a, m, 0, q) / m, params)  # micro-batch 0, synchronised
        after = {k: params[k] - lr * step[k] for k in PARAMS}
        pending = {k: np.zeros_like(v) for k, v in params.items()}
        for i in range(1, m):  # computed at the stepped parameters, rank 0's own rows, never all-reduced
            g = fd_grad(lambda q, i=i: micro_loss(q, *_rows(a, m, 0, i)) / m, after)
            pending = {k: pending[k] + g[k] for k in PARAMS}
        losses = [_global_micro(a, m, 0, params)] + [_global_micro(a, m, i, after) for i in range(1, m)]
    else:  # no_sync / sync_every_micro_batch: the same step on the accumulated, averaged gradient
        after = {k: params[k] - lr * full[k] for k in PARAMS}
        pending = {k: np.zeros_like(v) for k, v in params.items()}
        losses = [_global_micro(a, m, i, params) for i in range(m)]
    out = {"loss": np.array(np.mean(losses))}
    out.update({f"moved/{k}": after[k] - params[k] for k in PARAMS})
    if variant == "step_on_first_micro_batch":
        out.update({f"gap/{k}": (after[k] - params[k]) + lr * full[k] for k in PARAMS})
    out.update({f"pending/{k}": pending[k] for k in PARAMS})
    return out


SPEC = Scenario(
    name="dp_no_sync",
    title="Accumulation without synchronisation: DDP no_sync, local accumulation + one pmean, optax.MultiSteps",
    family="data_parallel",
    order=3,
    claims=(),
    source="torch DDP no_sync docs; optax.MultiSteps; Goyal et al. 2017, arXiv:1706.02677",
    lesson=(
        "Accumulating M micro-batches under `ddp.no_sync()` (forward and backward) and syncing the last gives the "
        "gradient of syncing every micro-batch, with one all-reduce: in JAX, local accumulation then one pmean "
        "(or optax.MultiSteps over synchronised micro-batches). Stepping on the wrong micro-batch (i % M == 0) "
        "steps on one micro-batch and leaves an unsynchronised gradient behind."
    ),
    variants=("no_sync", "sync_every_micro_batch", "step_on_first_micro_batch"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "no_sync": (("moved/*", "nonzero"), ("pending/*", "zero")),
        "sync_every_micro_batch": (("moved/*", "nonzero"), ("pending/*", "zero")),
        "step_on_first_micro_batch": (("moved/*", "nonzero"), ("pending/*", "nonzero"), ("gap/*", "nonzero")),
    },
    porting=Porting(
        torch=(
            "`with ddp.no_sync(): (loss / M).backward()` around the forward and backward of micro-batches 1..M-1, "
            "the last outside it, then `optimizer.step()` when `(i + 1) % M == 0`"
        ),
        jax=(
            "inside `shard_map`: gradients of `jax.lax.pcast(params, 'data', to='varying')` summed over the "
            "micro-batches, one `jax.lax.pmean(acc, 'data')`; or `optax.MultiSteps(tx, every_k_schedule=M)`"
        ),
        trap=(
            "DDP decides at forward time whether the backward all-reduces: `no_sync` around the backward alone "
            "still syncs every micro-batch (same gradient, no saving); the step on the wrong micro-batch trains on "
            "one micro-batch and leaks the rest, unsynchronised, into the next step."
        ),
    ),
    checks=(_check_split,),
    constants={"world": WORLD},
)
