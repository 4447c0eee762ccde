"""ppo: the clipped surrogate objective of PPO; old log-probabilities and advantages are rollout constants.

Shapes: B samples of a minibatch, D observation features, H hidden units, A actions.
Separate actor and critic networks (CleanRL's Agent), each x -> tanh(x W1 + b1) W2 + b2:
  logπ(a|s) from the actor's logits [B, A]; V(s) = critic(obs)[:, 0] [B]
  r = exp(logπ(a|s) − logπ_old(a|s))                                            [B]
  Â = (A − mean A) / (std A + 1e-8), std unbiased (torch's default)               [B]
  pg_loss = mean(max(−Â·r, −Â·clip(r, 1 − ε, 1 + ε)))
  v_loss = 0.5·mean(max((V − R)², (V_old + clip(V − V_old, −ε, ε) − R)²))   (clipped; else 0.5·mean((V − R)²))
  loss = pg_loss − ent_coef·entropy + vf_coef·v_loss.
logπ_old, A, R and V_old come from the rollout (fixture fields, constants). build() places every
ratio and every value change away from the clip boundaries (margin ≥ 0.03), half inside, half
outside, so the max / clip kinks are never within reach of rounding or finite differences.
old_logprob_recomputed / old_logprob_attached recompute logπ_old from the current actor at update
time, with and without the stop: the ratio is exactly 1 in both, its gradient is not.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "actor/l1/kernel": ("D", "H"),
    "actor/l1/bias": ("H",),
    "actor/l2/kernel": ("H", "A"),
    "actor/l2/bias": ("A",),
    "critic/l1/kernel": ("D", "H"),
    "critic/l1/bias": ("H",),
    "critic/l2/kernel": ("H", 1),
    "critic/l2/bias": (1,),
}
STORED = ("clipped", "value_unclipped", "naive_jnp_std")  # logπ_old from the rollout buffer
ADV_EPS = 1e-8  # CleanRL's (adv - mean) / (std + 1e-8)

SCHEMA = {
    "obs": Field(("B", "D"), doc="observations s"),
    "actions": Field(("B",), kind="int", low=0, high="A", doc="actions taken in the rollout, in [0, A)"),
    "old_logprobs": Field(("B",), high=0.0, doc="logπ_old(a|s) stored by the rollout (a constant)"),
    "advantages": Field(("B",), doc="GAE advantages A of the rollout (constants), before normalisation"),
    "returns": Field(("B",), doc="returns R = A + V_old of the rollout (constants)"),
    "values": Field(("B",), doc="V_old(s) stored by the rollout (constants), the centre of value clipping"),
    **{f"params/{k}": Field(shape, doc="parameter, canonical layout") for k, shape in PARAMS.items()},
    "clip_coef": Field((), low=0.0, high=1.0, low_open=True, doc="ε of the ratio and value clipping"),
    "vf_coef": Field((), low=0.0, doc="weight of the value loss"),
    "ent_coef": Field((), low=0.0, doc="weight of the entropy bonus"),
}


def mlp(p: dict[str, np.ndarray], net: str, obs: np.ndarray) -> np.ndarray:
    """Output [B, out] of network `net` ("actor" | "critic")."""
    return np.tanh(obs @ p[f"{net}/l1/kernel"] + p[f"{net}/l1/bias"]) @ p[f"{net}/l2/kernel"] + p[f"{net}/l2/bias"]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def normalize(adv: np.ndarray, ddof: int) -> np.ndarray:
    """(A − mean A) / (std A + 1e-8); ddof=1 is torch's adv.std(), ddof=0 jnp.std's default."""
    return (adv - adv.mean()) / (adv.std(ddof=ddof) + ADV_EPS)


def _away(rng: np.random.Generator, n: int, eps: float) -> np.ndarray:
    """n offsets of random sign, alternately well inside (< ε − 0.03) and well outside (> ε + 0.03) ±ε."""
    inside = rng.uniform(0.03, eps - 0.03, size=n)
    outside = rng.uniform(eps + 0.03, eps + 0.3, size=n)
    return np.where(np.arange(n) % 2 == 0, inside, outside) * rng.choice([-1.0, 1.0], size=n)


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(4, 8)), "D": int(rng.integers(2, 5)), "H": int(rng.integers(2, 5))}
    sizes["A"] = int(rng.integers(2, 5))
    eps = 0.2
    out = {
        "obs": rng.normal(size=(sizes["B"], sizes["D"])),
        "actions": rng.integers(0, sizes["A"], size=sizes["B"]),
        "clip_coef": np.array(eps),
        "vf_coef": np.array(0.5),
        "ent_coef": np.array(0.01),
    }
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = 0.6 * rng.normal(size=tuple(sizes.get(d, d) for d in shape))
    p = {k: out[f"params/{k}"] for k in PARAMS}
    logp = log_softmax(mlp(p, "actor", out["obs"]))[np.arange(sizes["B"]), out["actions"]]
    # ratio r = exp(−δ): |r − 1 ∓ ε| ≥ 0.03 in log space, half of them clipped
    out["old_logprobs"] = np.minimum(logp + _away(rng, sizes["B"], np.log1p(eps)), -1e-3)
    v_new = mlp(p, "critic", out["obs"])[:, 0]
    out["values"] = v_new - _away(rng, sizes["B"], eps)  # V − V_old: half inside, half outside ±ε
    v_clip = out["values"] + np.clip(v_new - out["values"], -eps, eps)
    outside = np.abs(v_new - out["values"]) > eps  # inside, v_clip is V itself: a tie of equal slopes
    while True:  # no near-tie in the value max where the two terms have different slopes
        out["advantages"] = rng.normal(size=sizes["B"])  # redrawn with R: R − V_old decides which term wins
        out["returns"] = out["values"] + out["advantages"] + 0.3 * rng.normal(size=sizes["B"])
        gap = ((v_clip - out["returns"]) ** 2 - (v_new - out["returns"]) ** 2)[outside]
        if np.all(np.abs(gap) > 0.02) and np.any(gap > 0) and np.any(gap < 0):  # each term wins somewhere
            return out


def losses(p, a: dict[str, np.ndarray], variant: str, old: np.ndarray | None, ddof: int = 1) -> dict[str, float]:
    """pg_loss, v_loss, entropy, loss at parameters p; `old` is logπ_old (None: recomputed from p, attached)."""
    eps = float(a["clip_coef"])
    logp_all = log_softmax(mlp(p, "actor", a["obs"]))
    logp = logp_all[np.arange(len(a["actions"])), a["actions"]]
    ratio = np.exp(logp - (logp if old is None else old))
    adv = normalize(a["advantages"], ddof)
    pg = float(np.mean(np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - eps, 1 + eps))))
    entropy = float(np.mean(-np.sum(np.exp(logp_all) * logp_all, axis=1)))
    v, ret, v_old = mlp(p, "critic", a["obs"])[:, 0], a["returns"], a["values"]
    unclipped = (v - ret) ** 2
    if variant == "value_unclipped":
        v_loss = float(0.5 * np.mean(unclipped))
    else:
        v_loss = float(0.5 * np.mean(np.maximum(unclipped, (v_old + np.clip(v - v_old, -eps, eps) - ret) ** 2)))
    loss = pg - float(a["ent_coef"]) * entropy + float(a["vf_coef"]) * v_loss
    return {"pg_loss": pg, "v_loss": v_loss, "entropy": entropy, "loss": loss, "ratio": ratio, "adv": adv}


def _outputs(fx, variant: str, ddof: int) -> dict[str, np.ndarray]:
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    logp0 = log_softmax(mlp(params, "actor", a["obs"]))[np.arange(len(a["actions"])), a["actions"]]
    # stored: the rollout's constants; recomputed: today's log-probs, computed once (stopped); attached: None
    old = {"old_logprob_recomputed": logp0, "old_logprob_attached": None}.get(variant, a["old_logprobs"])
    grads = fd_grad(lambda p: losses(p, a, variant, old, ddof)["loss"], params)
    actor = [k for k in PARAMS if k.startswith("actor/")]
    pg = fd_grad(lambda p: losses(p, a, variant, old, ddof)["pg_loss"], params, wrt=actor)
    at = losses(params, a, variant, old, ddof)
    out = {k: np.array(at[k]) for k in ("loss", "pg_loss", "v_loss", "entropy")}
    out.update(ratio=at["ratio"], advantages=at["adv"])
    out.update({f"grads/{k}": g for k, g in grads.items()})
    out.update({f"pg_grads/{k}": g for k, g in pg.items()})
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    return _outputs(fx, variant, ddof=1)


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """What the naive JAX port computes: jnp.std's population std (ddof=0) in the normalisation."""
    return _outputs(fx, variant, ddof=0)


def _pattern(pg_to_actor: str) -> tuple[tuple[str, str], ...]:
    return (
        ("grads/actor/*", "nonzero"),
        ("grads/critic/*", "nonzero"),
        ("pg_grads/actor/*", pg_to_actor),  # attached: the ratio is exp(logπ − logπ) and its gradient 0
        ("ratio", "nonzero"),
        ("advantages", "nonzero"),
    )


VARIANTS = ("clipped", "value_unclipped", "old_logprob_recomputed", "old_logprob_attached", "naive_jnp_std")

SPEC = Scenario(
    name="ppo",
    title="PPO: the clipped surrogate, value clipping, entropy bonus, advantage normalisation",
    family="advanced",
    order=10,
    claims=(),
    source="Schulman et al. 2017, arXiv:1707.06347; CleanRL ppo.py",
    lesson=(
        "logπ_old, the advantages and V_old are rollout constants (CleanRL computes them under "
        "torch.no_grad()). Recomputing logπ_old at update time makes the ratio 1; with the graph attached "
        "its gradient is exactly 0 and the policy term trains nothing. adv.std() is unbiased in torch; "
        "jnp.std is not: the port rescales every normalised advantage by sqrt(B/(B − 1))."
    ),
    variants=VARIANTS,
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    naive_oracle=naive_oracle,
    pattern={v: _pattern("zero" if v == "old_logprob_attached" else "nonzero") for v in VARIANTS},
    diverges={"naive_jnp_std": ("loss", "pg_loss", "advantages", "grads/actor/*", "pg_grads/actor/*")},
    porting=Porting(
        torch=(
            "rollout under `torch.no_grad()`; `ratio = (newlogprob - b_logprobs).exp()`; "
            "`(adv - adv.mean()) / (adv.std() + 1e-8)`; `torch.max(-adv * ratio, -adv * ratio.clamp(1 - ε, 1 + ε)).mean()`"
        ),
        jax=(
            "stored log-probs are constants (`jax.lax.stop_gradient` where they are recomputed); "
            "`rlax.clipped_surrogate_pg_loss(ratio, adv, ε)`; `jnp.std(adv, ddof=1)`; `distrax.Categorical`"
        ),
        trap=(
            "`jnp.std(adv)` is the population std: every normalised advantage grows by sqrt(B/(B − 1)), "
            "silently (P01). A logπ_old recomputed with the graph attached gives ratio 1 and a zero policy gradient."
        ),
    ),
)
