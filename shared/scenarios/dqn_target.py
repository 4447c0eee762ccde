"""dqn_target: the DQN TD loss, who gets the gradient, one SGD step, soft and hard target updates.

Shapes: B transitions, D observation features, H hidden units, A actions.
  Q(s) = tanh(s W1 + b1) W2 + b2                                   [B, A]
  y    = r + γ·(1 − done)·v(s′), stopped except in residual_gradient
  v(s′) = max_a Q_target(s′, a)            target_network
        = max_a Q_online(s′, a)            online_semi_gradient, residual_gradient
        = Q_target(s′, argmax_a Q_online(s′, a))   double_dqn
  δ = y − Q_online(s, a), loss = 0.5·mean(δ²); online ← online − lr·∇loss;
  soft target ← τ·online + (1 − τ)·target; hard target ← online.
The max is pinned: value and gradient at the first maximal index (argmax + gather),
the same convention in torch, JAX and here. The fixture has an exact tie: next_obs
of transition TIE_ROW is the zero vector and every hidden unit but TIE_UNIT has bias 0
(tanh gives exact zeros), the output columns of actions 1 and 2 agree in row TIE_UNIT and
have equal biases; each of the two Q-values is then one product plus zeros plus the bias,
so Q(s′, 1) == Q(s′, 2) bit for bit in float32 and float64, in both networks, whatever
order or FMA a matmul uses (a tie of several products broke by one ulp in XLA's float64 dot
for H = 4, A = 3: seed 2537).
Transition DONE_ROW is terminal (done = 1): dropping (1 − done) changes its target.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad, sgd
from ..core.records import Porting, Scenario
from ..core.schema import Field

NETS = ("online", "target")
LAYERS = {"l1/kernel": ("D", "H"), "l1/bias": ("H",), "l2/kernel": ("H", "A"), "l2/bias": ("A",)}
PARAMS = {f"{net}/{k}": shape for net in NETS for k, shape in LAYERS.items()}
TIE_ROW, DONE_ROW, TIE_ACTIONS, TIE_UNIT = 1, 3, (1, 2), 1

SCHEMA = {
    "obs": Field(("B", "D"), doc="observations s"),
    "actions": Field(("B",), kind="int", low=0, high="A", doc="actions taken, in [0, A)"),
    "rewards": Field(("B",), doc="rewards r"),
    "next_obs": Field(("B", "D"), doc="next observations s′ (row TIE_ROW is 0: a tie in max_a Q)"),
    "dones": Field(("B",), choices=(0.0, 1.0), doc="1.0 if s′ is terminal, else 0.0"),
    **{f"params/{k}": Field(shape, doc="Q-network parameter, canonical layout") for k, shape in PARAMS.items()},
    "gamma": Field((), low=0.0, high=1.0, doc="discount γ"),
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate"),
    "tau": Field((), low=0.0, high=1.0, doc="soft target update weight on the online network"),
}


def q_values(p: dict[str, np.ndarray], net: str, obs: np.ndarray) -> np.ndarray:
    """Q(obs) [B, A] of network `net` ("online" | "target")."""
    h = np.tanh(obs @ p[f"{net}/l1/kernel"] + p[f"{net}/l1/bias"])
    return h @ p[f"{net}/l2/kernel"] + p[f"{net}/l2/bias"]


def _tied_network(rng: np.random.Generator, next_obs: np.ndarray, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    """Random Q-network parameters with an exact tie of actions 1, 2 at s′ = 0, the tie being the max."""
    d, h, a = sizes["D"], sizes["H"], sizes["A"]
    while True:
        p = {"l1/kernel": rng.normal(size=(d, h)), "l1/bias": rng.normal(size=h), "l2/kernel": rng.normal(size=(h, a))}
        p["l1/bias"][np.arange(h) != TIE_UNIT] = 0.0  # tanh(0 · W + 0) = 0 exactly at s′ = 0, but for one unit
        p["l2/kernel"][TIE_UNIT, 2] = p["l2/kernel"][TIE_UNIT, 1]  # columns 1, 2 agree where the feature is not 0
        p["l2/bias"] = rng.normal(size=a)
        q0 = np.tanh(p["l1/bias"]) @ p["l2/kernel"]
        others = np.delete(p["l2/bias"] + q0, TIE_ACTIONS).max()
        p["l2/bias"][1] = p["l2/bias"][2] = others - q0[1] + 0.5  # the tie is the max at s′ = 0, by 0.5
        q = np.tanh(next_obs @ p["l1/kernel"] + p["l1/bias"]) @ p["l2/kernel"] + p["l2/bias"]
        top2 = np.sort(q, axis=1)[:, -2:]
        gaps = np.delete(top2[:, 1] - top2[:, 0], TIE_ROW)
        if gaps.min() > 0.05:  # no near-tie elsewhere: float32 argmax agrees across frameworks
            return p


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    # small shapes from the seed; B > DONE_ROW, H >= 2 (unit TIE_UNIT carries the tie), A >= 3 (a tie above action 0)
    sizes = {"B": int(rng.integers(4, 7)), "D": int(rng.integers(2, 5)), "H": int(rng.integers(2, 6))}
    sizes["A"] = int(rng.integers(3, 6))
    obs = rng.normal(size=(sizes["B"], sizes["D"]))
    next_obs = rng.normal(size=(sizes["B"], sizes["D"]))
    next_obs[TIE_ROW] = 0.0
    dones = np.zeros(sizes["B"])
    dones[DONE_ROW] = 1.0
    out = {
        "obs": obs,
        "actions": rng.integers(0, sizes["A"], size=sizes["B"]),
        "rewards": rng.normal(size=sizes["B"]),
        "next_obs": next_obs,
        "dones": dones,
        "gamma": np.array(0.9),
        "lr": np.array(0.1),
        "tau": np.array(0.05),
    }
    for net in NETS:  # two different networks, each with the same exact tie structure
        out.update({f"params/{net}/{k}": v for k, v in _tied_network(rng, next_obs, sizes).items()})
    return out


def greedy(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(max value [B], first maximal index [B]) of q [B, A]."""
    a = np.argmax(q, axis=1)
    return q[np.arange(len(q)), a], a


def bootstrap(p: dict[str, np.ndarray], next_obs: np.ndarray, variant: str, a_star: np.ndarray) -> np.ndarray:
    """v(s′) [B] with the greedy action `a_star` held fixed (the pinned tie convention).

    Raises ValueError for an unknown variant.
    """
    SPEC.check_variant(variant)
    net = "target" if variant in ("target_network", "double_dqn") else "online"
    return q_values(p, net, next_obs)[np.arange(len(next_obs)), a_star]


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    rows = np.arange(len(a["actions"]))
    selector = "target" if variant == "target_network" else "online"
    _, a_star = greedy(q_values(params, selector, a["next_obs"]))  # an index: no gradient in any variant
    discount = a["gamma"] * (1.0 - a["dones"])

    def targets(p):
        return a["rewards"] + discount * bootstrap(p, a["next_obs"], variant, a_star)

    y0 = targets(params)  # stopped: computed once at the base point

    def loss(p):
        y = targets(p) if variant == "residual_gradient" else y0
        return 0.5 * np.mean((y - q_values(p, "online", a["obs"])[rows, a["actions"]]) ** 2)

    grads = fd_grad(loss, params)
    td = y0 - q_values(params, "online", a["obs"])[rows, a["actions"]]
    online = {k: v for k, v in params.items() if k.startswith("online/")}
    stepped = sgd(online, {k: grads[k] for k in online}, float(a["lr"]))
    tau = float(a["tau"])
    out = {"loss": np.array(0.5 * np.mean(td**2)), "td_errors": td, "td_targets": y0}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    for k in LAYERS:
        new = stepped[f"online/{k}"]
        out[f"params/online/{k}"] = new
        out[f"params/target_soft/{k}"] = tau * new + (1.0 - tau) * params[f"target/{k}"]
        out[f"params/target_hard/{k}"] = new.copy()
    return out


_PATTERN = (
    ("grads/online/*", "nonzero"),
    ("grads/target/*", "zero"),  # the target network never gets a gradient
    ("td_errors", "nonzero"),
    ("params/*", "nonzero"),
)

SPEC = Scenario(
    name="dqn_target",
    title="DQN targets: target network, semi-gradient, double DQN, residual gradient",
    family="scenarios",
    order=5,
    step_loss=lambda o, a: o["loss"],
    step_updates=True,
    claims=("C08",),
    source="A1 §3.2",
    lesson=(
        "The TD target y = r + γ(1 − done)·max_a Q_target(s′, a) is a constant, computed at training "
        "time: only Q(s, a) of the online network is differentiated and the target network never gets a "
        "gradient. Without the stop (residual gradient) the loss gradient ∇L gains +(γ/B)·Σ (1 − done)·δ·"
        "∇Q(s′, a*), δ = y − Q(s, a): the update direction −∇L gains its negative."
    ),
    variants=("target_network", "online_semi_gradient", "double_dqn", "residual_gradient"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={v: _PATTERN for v in ("target_network", "online_semi_gradient", "double_dqn", "residual_gradient")},
    porting=Porting(
        torch=(
            "y = (r + γ·(1 − done)·q_next).detach() (or torch.no_grad()); max over actions as "
            "q.gather(1, q.argmax(1, keepdim=True)); soft update target_p.lerp_(online_p, τ) under torch.no_grad()"
        ),
        jax=(
            "y = jax.lax.stop_gradient(r + γ·(1 − done)·q_next); jnp.take_along_axis(q, argmax[:, None], 1); "
            "optax.incremental_update(new_tensors=online, old_tensors=target, step_size=τ)"
        ),
        trap=(
            "At a tie in max over actions, torch.max(dim).values sends the whole gradient to the first "
            "maximal index while jnp.max (and torch.amax) split it equally: only the residual gradient "
            "sees the difference; a stopped target only uses the value, which is the same. "
            "incremental_update's first argument is the online network (P17); a target of shape [B] "
            "against Q(s, a) of shape [B, 1] broadcasts to [B, B] (P14): td_loss refuses it."
        ),
    ),
)
