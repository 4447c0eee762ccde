"""reinforce_baseline: the score-function estimator with a learned baseline (REINFORCE with baseline).

Shapes: T time steps of one episode, D observation features, H hidden units, A actions.
Separate policy and baseline networks, each x -> tanh(x W1 + b1) W2 + b2:
  logits = policy(obs) [T, A], b = baseline(obs)[:, 0] [T]
  G_t = r_t + γ·G_{t+1}, G_T = 0 (the Monte Carlo return: data, no gradient)        [T]
  δ_t = G_t − b(s_t), stopped in the policy loss unless baseline_not_stopped          [T]
  policy_loss = −mean_t(γ^t · log π(a_t|s_t) · δ_t); baseline_loss = 0.5·mean_t(δ_t²)
  loss = policy_loss + baseline_loss.
The γ^t weight is Sutton & Barto's (ch. 13.4, the episodic REINFORCE with baseline); deep-RL
code often drops it (weight 1), which changes nothing about who trains what.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

NETS = ("policy", "baseline")
PARAMS = {
    "policy/l1/kernel": ("D", "H"),
    "policy/l1/bias": ("H",),
    "policy/l2/kernel": ("H", "A"),
    "policy/l2/bias": ("A",),
    "baseline/l1/kernel": ("D", "H"),
    "baseline/l1/bias": ("H",),
    "baseline/l2/kernel": ("H", 1),
    "baseline/l2/bias": (1,),
}

SCHEMA = {
    "obs": Field(("T", "D"), doc="observations s_t of one episode"),
    "actions": Field(("T",), kind="int", low=0, high="A", doc="actions a_t taken, in [0, A)"),
    "rewards": Field(("T",), doc="reward r_t received after a_t"),
    **{f"params/{k}": Field(shape, doc="parameter, canonical layout") for k, shape in PARAMS.items()},
    "gamma": Field((), low=0.0, high=1.0, doc="discount γ"),
}


def mlp(p: dict[str, np.ndarray], net: str, obs: np.ndarray) -> np.ndarray:
    """Output [T, out] of network `net` ("policy" | "baseline")."""
    return np.tanh(obs @ p[f"{net}/l1/kernel"] + p[f"{net}/l1/bias"]) @ p[f"{net}/l2/kernel"] + p[f"{net}/l2/bias"]


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """G [T]: G_t = r_t + γ·G_{t+1}, G_T = 0."""
    out, g = np.zeros_like(rewards), 0.0
    for t in reversed(range(len(rewards))):
        g = rewards[t] + gamma * g
        out[t] = g
    return out


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"T": int(rng.integers(4, 8)), "D": int(rng.integers(2, 5)), "H": int(rng.integers(2, 5))}
    sizes["A"] = int(rng.integers(2, 5))
    out = {
        "obs": rng.normal(size=(sizes["T"], sizes["D"])),
        "actions": rng.integers(0, sizes["A"], size=sizes["T"]),
        "rewards": rng.normal(size=sizes["T"]),
        "gamma": np.array(0.9),
    }
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.6 * rng.normal(size=tuple(sizes.get(d, d) for d in shape))
    return out


def losses(p, a: dict[str, np.ndarray], baseline0: np.ndarray | None = None) -> tuple[float, float]:
    """(policy_loss, baseline_loss); `baseline0` given means the policy loss uses it as a constant."""
    returns = discounted_returns(a["rewards"], float(a["gamma"]))
    logits = mlp(p, "policy", a["obs"])
    b = mlp(p, "baseline", a["obs"])[:, 0]
    delta = returns - (b if baseline0 is None else baseline0)
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    logp_a = logp[np.arange(len(a["actions"])), a["actions"]]
    weights = float(a["gamma"]) ** np.arange(len(returns))
    return float(-np.mean(weights * logp_a * delta)), float(0.5 * np.mean((returns - b) ** 2))


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    b0 = mlp(params, "baseline", a["obs"])[:, 0]
    const = None if variant == "baseline_not_stopped" else b0  # stopped: held at the base point
    grads = fd_grad(lambda p: sum(losses(p, a, const)), params)
    baseline = [k for k in PARAMS if k.startswith("baseline/")]
    policy = fd_grad(lambda p: losses(p, a, const)[0], params, wrt=baseline)
    pl, bl = losses(params, a)
    returns = discounted_returns(a["rewards"], float(a["gamma"]))
    out = {
        "loss": np.array(pl + bl),
        "policy_loss": np.array(pl),
        "baseline_loss": np.array(bl),
        "returns": returns,
        "advantages": returns - b0,
    }
    out.update({f"grads/{k}": g for k, g in grads.items()})
    out.update({f"policy_grads/{k}": g for k, g in policy.items()})
    return out


def _pattern(policy_to_baseline: str) -> tuple[tuple[str, str], ...]:
    return (
        ("grads/policy/*", "nonzero"),
        ("grads/baseline/*", "nonzero"),
        ("policy_grads/baseline/*", policy_to_baseline),  # the lesson: the policy loss never trains b(s)
        ("advantages", "nonzero"),
        ("returns", "nonzero"),
    )


SPEC = Scenario(
    name="reinforce_baseline",
    title="REINFORCE with a learned baseline: the baseline is a constant for the policy loss",
    family="advanced",
    order=12,
    claims=(),
    source="Williams 1992; Sutton & Barto 2018 ch. 13.4",
    lesson=(
        "log π(a|s)·(G − b(s)).detach(): the baseline reduces the variance of the score-function "
        "estimator only because it is a constant there; it learns from its own regression loss. "
        "Without the stop the policy loss also trains b(s), by γ^t·log π(a_t|s_t)/T per unit of output."
    ),
    variants=("baseline_stopped", "baseline_not_stopped"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"baseline_stopped": _pattern("zero"), "baseline_not_stopped": _pattern("nonzero")},
    porting=Porting(
        torch="`-(gamma**t * logp_a * (returns - b).detach()).mean() + 0.5 * ((returns - b) ** 2).mean()`",
        jax=(
            "`rlax.policy_gradient_loss(logits, a, returns - b, gamma**t, use_stop_gradient=True)` "
            "(the stop is rlax's flag) `+ 0.5 * jnp.mean((returns - b) ** 2)`; returns by `rlax.discounted_returns`"
        ),
        trap=(
            "Without the stop the policy loss pushes every b(s_t) by γ^t·log π(a_t|s_t)/T: the baseline "
            "learns a biased target, silently. rlax stops the advantage for you (use_stop_gradient=True is "
            "its default); a hand-written JAX loss does not."
        ),
    ),
)
