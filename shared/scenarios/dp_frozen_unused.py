"""dp_frozen_unused: a frozen backbone and a detached probe under DDP / a sharded NNX step, AdamW steps.

Shapes: B = W·b samples (W = 2 ranks), D inputs, H features, O outputs. features = tanh(x Wb + bb)
(backbone, frozen), pred = features Wh + bh (head, trained), probe = features Wp + bp (a probe whose
loss is reported in the total, detached: it trains nothing). Loss = mean ½‖pred - y‖² + stop(mean ½(probe - t)²).
`steps` AdamW steps (weight decay on); rank_gap/<param> = max over ranks |param_r - param_0| after them.
Oracles of `static_graph` and `unused_not_declared` (listed in `diverges`): what torch 2.13 does.
Without find_unused_parameters DDP's reducer waits for the probe's gradient, so step 1's all-reduce
never runs (each rank steps on its own shard's gradient: the ranks drift apart) and step 2's forward
raises 'Expected to have finished reduction'. static_graph=True does not rescue a branch that the
forward computes and the loss detaches: step 1 syncs, step 2 does not, step 3's forward raises.
Their JAX port has no reducer and trains, synchronised, all `steps` (the naive oracle).
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import adamw, fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

WORLD = 2
PARAMS = {
    "backbone/kernel": ("D", "H"),
    "backbone/bias": ("H",),
    "head/kernel": ("H", "O"),
    "head/bias": ("O",),
    "probe/kernel": ("H", 1),
    "probe/bias": (1,),
}
SCHEMA = {
    "x": Field(("B", "D"), doc="inputs; rank r holds rows [r·b, (r+1)·b)"),
    "y": Field(("B", "O"), doc="targets of the head"),
    "t": Field(("B",), doc="targets of the probe"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
    "lr": Field((), low=0.0, low_open=True, doc="AdamW learning rate"),
    "weight_decay": Field((), low=0.0, low_open=True, doc="decoupled weight decay, > 0 (else freezing is invisible)"),
    "b1": Field((), low=0.0, high=1.0, high_open=True),
    "b2": Field((), low=0.0, high=1.0, high_open=True),
    "eps": Field((), low=0.0, low_open=True),
    "steps": Field((), kind="int", low=3, doc="AdamW steps, >= 3 (static_graph's error comes at the third)"),
}


def _check_shards(a, dims) -> str | None:
    return None if dims["B"] % WORLD == 0 else f"field 'x': B = {dims['B']} expected divisible by the {WORLD} ranks"


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    b, d, h, o = (int(v) for v in rng.integers(2, 5, size=4))
    out = {"x": rng.normal(size=(WORLD * b, d)), "y": rng.normal(size=(WORLD * b, o)), "t": rng.normal(size=WORLD * b)}
    sizes = {"D": d, "H": h, "O": o}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.5 * rng.normal(size=tuple(sizes.get(s, s) for s in shape))
    out.update(lr=np.array(1e-2), weight_decay=np.array(0.1), b1=np.array(0.9), b2=np.array(0.999), eps=np.array(1e-8))
    out["steps"] = np.array(3)
    return out


def loss(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, probe_loss: float) -> float:
    """The total loss with the probe's loss given as a constant (stopped)."""
    features = np.tanh(x @ p["backbone/kernel"] + p["backbone/bias"])
    pred = features @ p["head/kernel"] + p["head/bias"]
    return float(np.mean(0.5 * np.sum((pred - y) ** 2, axis=1)) + probe_loss)


def probe_loss(p: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> float:
    features = np.tanh(x @ p["backbone/kernel"] + p["backbone/bias"])
    return float(np.mean(0.5 * ((features @ p["probe/kernel"] + p["probe/bias"])[:, 0] - t) ** 2))


def _grad_fn(a: dict[str, np.ndarray], rows: slice):
    """The gradient of the rows' mean loss, the probe's loss a constant (stopped)."""
    x, y, t = a["x"][rows], a["y"][rows], a["t"][rows]

    def grad_fn(p):
        const = probe_loss(p, x, t)  # stopped: computed once, held fixed
        return fd_grad(lambda q: loss(q, x, y, const), p)

    return grad_fn


def _train(a: dict[str, np.ndarray], rank: int, synced: int, done: int) -> dict[str, np.ndarray]:
    """`done` AdamW steps of one rank: the all-reduced (full-batch) gradient for the first `synced`, then its own."""
    b = len(a["x"]) // WORLD
    full, own = _grad_fn(a, slice(None)), _grad_fn(a, slice(rank * b, (rank + 1) * b))
    calls = []

    def grad_fn(p):
        calls.append(None)
        return full(p) if len(calls) <= synced else own(p)

    params = {k: a[f"params/{k}"] for k in PARAMS}
    hyper = {k: float(a[k]) for k in ("lr", "b1", "b2", "eps", "weight_decay")}
    return adamw(grad_fn, params, done, **hyper, trainable=lambda k: k.startswith("head/"))


def _torch_steps(variant: str, steps: int) -> tuple[int, int]:
    """(steps whose all-reduce ran, steps done before DDP raised) in torch 2.13.

    find_unused_parameters: every step. static_graph: the probe's parameters are in the forward
    graph but never get a gradient: step 1 syncs, step 2 does not, step 3's forward raises.
    Undeclared: step 1 does not sync, step 2's forward raises.
    """
    return {"find_unused_parameters": (steps, steps), "static_graph": (1, 2), "unused_not_declared": (0, 1)}[variant]


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    synced, done = _torch_steps(variant, int(a["steps"]))
    after, other = _train(a, 0, synced, done), _train(a, 1, synced, done)
    b = len(a["x"]) // WORLD
    grads = _grad_fn(a, slice(None) if synced else slice(0, b))(params)
    grads = {k: (g if k.startswith("head/") else np.zeros_like(g)) for k, g in grads.items()}  # no path: zeros
    out = {"loss": np.array(loss(params, a["x"], a["y"], probe_loss(params, a["x"], a["t"])))}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    out.update({f"moved/{k}": after[k] - params[k] for k in PARAMS})
    out.update({f"rank_gap/{k}": np.abs(other[k] - after[k]) for k in PARAMS})
    out["steps_done"] = np.array(done)
    return out


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The JAX port of a DDP run that forgot (or mis-declared) the unused probe: no reducer, no error, synchronised."""
    return oracle(fx, "find_unused_parameters")


def _pattern(head_gap: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    frozen = tuple(
        (f"{kind}/{part}/*", "zero") for part in ("backbone", "probe") for kind in ("grads", "moved", "rank_gap")
    )
    return (*frozen, ("grads/head/*", "nonzero"), ("moved/head/*", "nonzero"), *head_gap)


SPEC = Scenario(
    name="dp_frozen_unused",
    title="Frozen and unused parameters under DDP: find_unused_parameters, and the NNX wrt filter",
    family="data_parallel",
    order=2,
    claims=(),
    source="torch DDP notes (find_unused_parameters, static_graph); Loshchilov & Hutter 2019, arXiv:1711.05101",
    lesson=(
        "A frozen backbone (requires_grad_(False) before DDP) is outside DDP's buckets; a branch the forward "
        "computes and the loss detaches is a parameter DDP waits for. Only find_unused_parameters=True handles it: "
        "without, step 1's all-reduce never runs (the ranks drift apart) and step 2 raises 'Expected to have "
        "finished reduction'; static_graph=True syncs step 1, not step 2, and raises at step 3. JAX has no reducer: "
        "the NNX wrt filter keeps frozen and unused leaves out of AdamW, bit-identical on every rank."
    ),
    variants=("find_unused_parameters", "static_graph", "unused_not_declared"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "find_unused_parameters": _pattern((("rank_gap/head/*", "zero"),)),
        "static_graph": _pattern(()),
        "unused_not_declared": _pattern(()),
    },
    porting=Porting(
        torch=(
            "`model.backbone.requires_grad_(False)` before `DistributedDataParallel(model, "
            "find_unused_parameters=True)`; `probe_loss.detach()` (static_graph=True is no substitute here)"
        ),
        jax=(
            "`nnx.DiffState(0, TRAINABLE)` and `nnx.Optimizer(model, optax.adamw(...), wrt=HEAD)` under `nnx.jit` "
            "with the batch sharded over 'data'; `jax.lax.stop_gradient(probe_loss)`"
        ),
        trap=(
            "DDP's reducer waits for every parameter that requires grad: a detached branch blocks the all-reduce of "
            "its bucket (a silently unsynchronised step) and then fails; the JAX port shows neither."
        ),
    ),
    diverges={
        "static_graph": ("moved/head/*", "rank_gap/head/*", "steps_done"),
        "unused_not_declared": ("grads/head/*", "moved/head/*", "rank_gap/head/*", "steps_done"),
    },
    naive_oracle=naive_oracle,
    checks=(_check_shards,),
    constants={"world": WORLD},
)
