"""siamese_stop: BYOL's EMA target and SimSiam's stopped branch, with the symmetric loss and one step.

Shapes: B samples, D inputs, H hidden units, P projection dimensions.
  f(x) = l2(tanh(l1(x)))  [B, P]   the online network (encoder + projector), parameters θ
  q(z) = z W_q + b_q      [B, P]   the predictor (online only)
  byol:            t_i = f_ξ(x_i), the target network ξ (an EMA copy of θ)
                   L = mean(2 − 2 cos(q(f(x₁)), sg t₂)) + mean(2 − 2 cos(q(f(x₂)), sg t₁))
  simsiam:         t_i = sg f(x_i), the same network, its output stopped
                   L = ½·(−mean cos(q(f(x₁)), t₂)) + ½·(−mean cos(q(f(x₂)), t₁))
  simsiam_no_stop: SimSiam without the stop (the bug: the gradient also flows through t).
One SGD step (lr) on θ and the predictor; BYOL then writes ξ ← τ·ξ + (1 − τ)·θ with the new θ.
SimSiam's view gradients: term12 = D(p₁, t₂) reaches view x₂ only through the target t₂,
term21 = D(p₂, t₁) reaches x₁ only through t₁: exactly zero with the stop, not without it.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad, sgd
from ..core.records import Porting, Scenario
from ..core.schema import Field

NET = {"l1/kernel": ("D", "H"), "l1/bias": ("H",), "l2/kernel": ("H", "P"), "l2/bias": ("P",)}
PARAMS = {
    **{f"online/{k}": s for k, s in NET.items()},
    "predictor/kernel": ("P", "P"),
    "predictor/bias": ("P",),
    **{f"target/{k}": s for k, s in NET.items()},
}
LEARNED = [k for k in PARAMS if not k.startswith("target/")]

SCHEMA = {
    "x1": Field(("B", "D"), doc="first augmented view of the batch"),
    "x2": Field(("B", "D"), doc="second augmented view of the batch"),
    **{
        f"params/{k}": Field(shape, doc="parameter, canonical layout (target/*: BYOL's EMA network ξ)")
        for k, shape in PARAMS.items()
    },
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate"),
    "tau": Field((), low=0.0, high=1.0, doc="BYOL's target decay τ: ξ ← τ·ξ + (1 − τ)·θ"),
}


def project(p: dict[str, np.ndarray], net: str, x: np.ndarray) -> np.ndarray:
    return np.tanh(x @ p[f"{net}/l1/kernel"] + p[f"{net}/l1/bias"]) @ p[f"{net}/l2/kernel"] + p[f"{net}/l2/bias"]


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def term(variant: str, p_pred: np.ndarray, target: np.ndarray) -> float:
    """One side of the symmetric loss: mean(2 − 2 cos) (BYOL) or ½·(−mean cos) (SimSiam)."""
    cos = cosine(p_pred, target)
    return float(np.mean(2.0 - 2.0 * cos)) if variant == "byol" else float(-0.5 * np.mean(cos))


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(3, 6)), "D": int(rng.integers(2, 5)), "H": int(rng.integers(2, 5))}
    sizes["P"] = int(rng.integers(2, 4))
    x1 = rng.normal(size=(sizes["B"], sizes["D"]))
    out = {"x1": x1, "x2": x1 + 0.5 * rng.normal(size=x1.shape)}  # two views of one batch
    out.update({f"params/{k}": rng.normal(size=tuple(sizes[d] for d in s)) for k, s in PARAMS.items()})
    out.update(lr=np.array(0.1), tau=np.array(0.9))
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    p0 = {k: a[f"params/{k}"] for k in PARAMS}
    net = "target" if variant == "byol" else "online"
    stopped = {v: project(p0, net, a[v]) for v in ("x1", "x2")}  # the targets, computed once at the base point

    def terms(p, x1, x2):
        t = (
            stopped
            if variant != "simsiam_no_stop"
            else {"x1": project(p, "online", x1), "x2": project(p, "online", x2)}
        )
        pred = {
            v: project(p, "online", x) @ p["predictor/kernel"] + p["predictor/bias"]
            for v, x in (("x1", x1), ("x2", x2))
        }
        return term(variant, pred["x1"], t["x2"]), term(variant, pred["x2"], t["x1"])

    loss = lambda p: sum(terms(p, a["x1"], a["x2"]))
    grads = fd_grad(loss, p0)
    out = {"loss": np.array(loss(p0))}
    learned = [k for k in PARAMS if k in LEARNED or variant == "byol"]
    out.update({f"grads/{k}": grads[k] for k in learned})
    stepped = sgd(p0, {k: grads[k] for k in LEARNED}, float(a["lr"]))
    if variant == "byol":
        tau = float(a["tau"])
        for k in NET:
            stepped[f"target/{k}"] = tau * p0[f"target/{k}"] + (1.0 - tau) * stepped[f"online/{k}"]
    out.update({f"params/{k}": stepped[k] for k in learned})
    if variant != "byol":
        views = {"x1": a["x1"], "x2": a["x2"]}
        for i, name in enumerate(("term12", "term21")):
            g = fd_grad(lambda v, i=i: terms(p0, v["x1"], v["x2"])[i], views)
            out.update({f"view_grads/{name}/{v}": g[v] for v in views})
    return out


_LEARNING = (("grads/online/*", "nonzero"), ("grads/predictor/*", "nonzero"))
PATTERN = {
    "byol": (*_LEARNING, ("grads/target/*", "zero"), ("params/target/*", "nonzero")),
    "simsiam": (
        *_LEARNING,
        ("view_grads/term12/x2", "zero"),  # x2 reaches D(p1, t2) only through the stopped target
        ("view_grads/term21/x1", "zero"),
        ("view_grads/term12/x1", "nonzero"),
        ("view_grads/term21/x2", "nonzero"),
    ),
    "simsiam_no_stop": (*_LEARNING, ("view_grads/*", "nonzero")),
}

SPEC = Scenario(
    name="siamese_stop",
    title="BYOL and SimSiam: an EMA target network, or the same network's output stopped",
    family="advanced",
    order=3,
    claims=(),
    source=(
        "Grill et al. 2020, arXiv:2006.07733 §3.1 (BYOL; google-deepmind/deepmind-research byol/byol_experiment.py); "
        "Chen & He 2021, arXiv:2011.10566 Alg. 1 (SimSiam; facebookresearch/simsiam simsiam/builder.py)"
    ),
    lesson=(
        "The target branch is a constant: BYOL's target network gets no gradient and moves only by the EMA "
        "write; SimSiam's target is the online network's own output, stopped, so the view behind it gets no "
        "gradient from that term. In JAX, differentiating only the online parameters already excludes BYOL's "
        "target (its reference says the stop is not necessary); in SimSiam the stop is not optional."
    ),
    variants=("byol", "simsiam", "simsiam_no_stop"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern=PATTERN,
    porting=Porting(
        torch=(
            "BYOL: target projections under torch.no_grad(), an optimizer over online + predictor only, "
            "target_p.lerp_(online_p, 1 - τ) under torch.no_grad(); SimSiam: z.detach() as the target"
        ),
        jax=(
            "BYOL: nnx.grad(loss, argnums=nnx.DiffState(0, online and predictor)) and "
            "optax.incremental_update(new_tensors=online, old_tensors=target, step_size=1 - τ); "
            "SimSiam: jax.lax.stop_gradient(z)"
        ),
        trap=(
            "BYOL's stop_gradient is redundant in JAX only because the gradient is taken with respect to the "
            "online parameters; SimSiam's target is those same parameters, so dropping its stop changes the "
            "gradient (and lets the views behind the targets learn), with no error in either framework. "
            "τ in BYOL weights the old target: step_size = 1 − τ in optax.incremental_update (P17)."
        ),
    ),
)
