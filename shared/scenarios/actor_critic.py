"""actor_critic: advantage actor-critic losses; the advantage is a constant for the policy loss.

Shapes: B samples, D observation features, H hidden units, A actions.
Separate actor and critic networks (no shared trunk), each x -> tanh(x W1 + b1) W2 + b2:
  logits = actor(obs) [B, A], V = critic(obs)[:, 0] [B], A = R − V (stopped)   [B]
  policy_loss = −mean(log π(a|s) · A); value_loss = mean((R − V)²)
  entropy = mean(−Σ_a π log π); loss = policy_loss + vf_coef·value_loss − ent_coef·entropy.
Action selection: Gumbel-max over the stopped logits with fixture noise u ~ U(0, 1),
a = argmax(logits − log(−log u)); build() redraws u until every row's top-two gap exceeds
0.05, so float32 rounding cannot flip an action between frameworks.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

LAYERS = {"l1/kernel": ("D", "H"), "l1/bias": ("H",)}
PARAMS = {
    **{f"actor/{k}": s for k, s in LAYERS.items()},
    "actor/l2/kernel": ("H", "A"),
    "actor/l2/bias": ("A",),
    **{f"critic/{k}": s for k, s in LAYERS.items()},
    "critic/l2/kernel": ("H", 1),
    "critic/l2/bias": (1,),
}

SCHEMA = {
    "obs": Field(("B", "D"), doc="observations s"),
    "actions": Field(("B",), kind="int", low=0, high="A", doc="actions taken, in [0, A)"),
    "returns": Field(("B",), doc="discounted returns R"),
    "noise": Field(
        ("B", "A"),
        low=0.0,
        high=1.0,
        low_open=True,
        high_open=True,
        doc="uniform noise u in (0, 1) for Gumbel-max action selection",
    ),
    **{f"params/{k}": Field(shape, doc="parameter, canonical layout") for k, shape in PARAMS.items()},
    "vf_coef": Field((), low=0.0, doc="weight of the value loss"),
    "ent_coef": Field((), low=0.0, doc="weight of the entropy bonus"),
}


def mlp(p: dict[str, np.ndarray], net: str, obs: np.ndarray) -> np.ndarray:
    """Output [B, out] of network `net` ("actor" | "critic")."""
    return np.tanh(obs @ p[f"{net}/l1/kernel"] + p[f"{net}/l1/bias"]) @ p[f"{net}/l2/kernel"] + p[f"{net}/l2/bias"]


def gumbel_scores(logits: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """logits − log(−log u) [B, A]: the argmax is a sample of softmax(logits)."""
    return logits - np.log(-np.log(noise))


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = dict(zip("BDHA", (int(v) for v in rng.integers(2, 7, size=4)), strict=True))  # small, from the seed
    out = {
        "obs": rng.normal(size=(sizes["B"], sizes["D"])),
        "actions": rng.integers(0, sizes["A"], size=sizes["B"]),
        "returns": rng.normal(size=sizes["B"]),
        "vf_coef": np.array(0.5),
        "ent_coef": np.array(0.01),
    }
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.6 * rng.normal(size=tuple(sizes.get(d, d) for d in shape))
    logits = mlp({k: out[f"params/{k}"] for k in PARAMS}, "actor", out["obs"])
    noise = rng.uniform(0.05, 0.95, size=(sizes["B"], sizes["A"]))
    for row in range(sizes["B"]):  # no near-tie in the Gumbel scores: float32 cannot flip an action
        while np.diff(np.sort(gumbel_scores(logits[row], noise[row]))[-2:])[0] <= 0.05:
            noise[row] = rng.uniform(0.05, 0.95, size=sizes["A"])
    out["noise"] = noise
    return out


def losses(p, a: dict[str, np.ndarray], values0: np.ndarray | None = None) -> tuple[float, float, float]:
    """(policy_loss, value_loss, entropy); `values0` given means the advantage uses it as a constant."""
    logits = mlp(p, "actor", a["obs"])
    values = mlp(p, "critic", a["obs"])[:, 0]
    advantages = a["returns"] - (values if values0 is None else values0)
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    logp_a = logp[np.arange(len(a["actions"])), a["actions"]]
    entropy = float(np.mean(-np.sum(np.exp(logp) * logp, axis=1)))
    return float(-np.mean(logp_a * advantages)), float(np.mean((a["returns"] - values) ** 2)), entropy


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    values = mlp(params, "critic", a["obs"])[:, 0]
    const = values if variant == "advantage_stopped" else None  # stopped: held at the base point

    def total(p):
        pl, vl, ent = losses(p, a, const)
        return pl + a["vf_coef"] * vl - a["ent_coef"] * ent

    grads = fd_grad(total, params)
    critic = [k for k in PARAMS if k.startswith("critic/")]
    policy = fd_grad(lambda p: losses(p, a, const)[0], params, wrt=critic)
    pl, vl, ent = losses(params, a)
    logits = mlp(params, "actor", a["obs"])
    selected = np.argmax(gumbel_scores(logits, a["noise"]), axis=1)
    logp = logits - logits.max(axis=1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
    out = {
        "loss": np.array(pl + a["vf_coef"] * vl - a["ent_coef"] * ent),
        "policy_loss": np.array(pl),
        "value_loss": np.array(vl),
        "entropy": np.array(ent),
        "advantages": a["returns"] - values,
        "selected_actions": selected,
        "selected_logp": logp[np.arange(len(selected)), selected],
    }
    out.update({f"grads/{k}": g for k, g in grads.items()})
    out.update({f"policy_grads/{k}": g for k, g in policy.items()})
    return out


def _pattern(policy_to_critic: str) -> tuple[tuple[str, str], ...]:
    return (
        ("grads/actor/*", "nonzero"),
        ("grads/critic/*", "nonzero"),
        ("policy_grads/critic/*", policy_to_critic),  # the lesson: the policy loss never pushes the critic
        ("advantages", "nonzero"),
        ("selected_logp", "nonzero"),
    )


SPEC = Scenario(
    name="actor_critic",
    title="Advantage actor-critic: a stopped advantage, Gumbel-max action selection",
    family="scenarios",
    order=6,
    step_loss=lambda o, a: o["loss"],
    claims=("C17",),
    source="A2 §2",
    lesson=(
        "The advantage R − V(s) is a constant for the policy loss: with the stop the critic's gradient "
        "comes from the value loss alone; without it the policy loss also pushes every V(s) up (its "
        "gradient on V(s) is log π(a|s) / B < 0). Acting needs no graph: detach the logits for "
        "action selection, never for the loss."
    ),
    variants=("advantage_stopped", "advantage_not_stopped"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"advantage_stopped": _pattern("zero"), "advantage_not_stopped": _pattern("nonzero")},
    porting=Porting(
        torch=(
            "advantages = (returns - values).detach(); actions under torch.no_grad() or on logits.detach(): "
            "argmax(logits - log(-log(u)))"
        ),
        jax=(
            "advantages = jax.lax.stop_gradient(returns - values); actions = jnp.argmax(stop_gradient(logits) "
            "- jnp.log(-jnp.log(u)), -1) (jax.random.categorical is Gumbel-max with its own noise)"
        ),
        trap=(
            "Forgetting the stop trains the critic on the policy loss too: a silent bias, no error. "
            "Detaching the logits that feed the policy loss (C17) leaves the actor with no gradient. "
            "torch.argmax returns int64 and jnp.argmax int32 without x64: compare actions as int64."
        ),
    ),
)
