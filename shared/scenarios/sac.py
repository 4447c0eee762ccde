"""sac: soft actor-critic's three losses, and which network each one trains.

Shapes: B transitions, D observation features, A action dimensions, H hidden units.
Actor (CleanRL's, one tanh hidden layer): h = tanh(s W1 + b1); μ = h Wμ + bμ [B, A];
  log σ = LOG_STD_MIN + ½(LOG_STD_MAX − LOG_STD_MIN)(tanh(h Wσ + bσ) + 1); σ = exp(log σ).
  Reparameterised sample with fixture noise ε [B, A]: u = μ + σ·ε, action = scale·tanh(u) + bias.
  log π = Σ_a [log N(u; μ, σ) − log|d action / d u|] [B], the log-det being
    exact:   log scale + 2(log 2 − u − softplus(−2u))           (torch TanhTransform, distrax.Tanh)
    epsilon: log(scale·(1 − tanh²u) + 1e-6)                      (CleanRL sac_continuous_action.py)
Twin critics Q_i(s, a) = l2(tanh(l1([s, a])))[:, 0] [B], target copies Q_i′, α = exp(log α).
  y = r + γ(1 − done)(min_i Q_i′(s′, a′) − α·log π(a′|s′)), a′ ~ π(·|s′) with ε′: stopped  [B]
  q_loss = mean((Q_1(s, a) − y)²) + mean((Q_2(s, a) − y)²)
  actor_loss = mean(α·log π(ã|s) − min_i Q_i(s, ã)), ã ~ π(·|s) with ε; Q frozen, α stopped
  alpha_loss = mean(−exp(log α)·(log π(ã|s) + target_entropy)), log π stopped; target_entropy = −A.
build() sets ε so that u = SATURATED (4.5: 1 − tanh²u ≈ 4.9e-4) at entry (0, 0) and |u| ≤ 3.5
elsewhere, keeps |Q_1 − Q_2| ≥ 0.05 at (s, ã) with each critic the minimum somewhere.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

LOG_STD_MIN, LOG_STD_MAX, LOG_DET_EPS = -5.0, 2.0, 1e-6  # CleanRL's constants
SATURATED = 4.5
LOSSES = ("q_loss", "actor_loss", "alpha_loss")
CRITICS = ("qf1", "qf2", "qf1_target", "qf2_target")
ACTOR = {
    "l1/kernel": ("D", "H"),
    "l1/bias": ("H",),
    "mean/kernel": ("H", "A"),
    "mean/bias": ("A",),
    "log_std/kernel": ("H", "A"),
    "log_std/bias": ("A",),
}
CRITIC = {"l1/kernel": ("DA", "H"), "l1/bias": ("H",), "l2/kernel": ("H", 1), "l2/bias": (1,)}
PARAMS = {
    **{f"actor/{k}": s for k, s in ACTOR.items()},
    **{f"{q}/{k}": s for q in CRITICS for k, s in CRITIC.items()},
    "log_alpha": (),
}

SCHEMA = {
    "obs": Field(("B", "D"), doc="observations s"),
    "actions": Field(("B", "A"), doc="actions a of the replay buffer, in [bias − scale, bias + scale]"),
    "rewards": Field(("B",), doc="rewards r"),
    "next_obs": Field(("B", "D"), doc="next observations s′"),
    "dones": Field(("B",), choices=(0.0, 1.0), doc="1.0 if s′ is terminal, else 0.0"),
    "noise": Field(("B", "A"), doc="standard-normal ε of the actor's sample at s (rsample's noise)"),
    "next_noise": Field(("B", "A"), doc="standard-normal ε′ of the actor's sample at s′"),
    **{
        f"params/{k}": Field(shape, doc="parameter, canonical layout (DA = D + A, the critic's input)")
        for k, shape in PARAMS.items()
    },
    "gamma": Field((), low=0.0, high=1.0, doc="discount γ"),
    "action_scale": Field((), low=0.0, low_open=True, doc="(high − low) / 2 of the action space"),
    "action_bias": Field((), doc="(high + low) / 2 of the action space"),
}


def _check_input_width(arrays, dims) -> str | None:
    if dims["DA"] != dims["D"] + dims["A"]:
        return f"critic l1/kernel: expected D + A = {dims['D'] + dims['A']} input rows, got {dims['DA']}"
    return None


def log_det(u: np.ndarray, scale: float, form: str) -> np.ndarray:
    """log|d (scale·tanh u + bias) / du| [B, A], "exact" or CleanRL's "epsilon" form."""
    if form == "exact":
        return np.log(scale) + 2.0 * (np.log(2.0) - u - np.logaddexp(0.0, -2.0 * u))
    return np.log(scale * (1.0 - np.tanh(u) ** 2) + LOG_DET_EPS)


def actor_sample(p, a: dict, obs: np.ndarray, noise: np.ndarray, form: str) -> tuple[np.ndarray, np.ndarray]:
    """(action [B, A], log π [B]) of the reparameterised tanh-Gaussian at obs with noise ε."""
    h = np.tanh(obs @ p["actor/l1/kernel"] + p["actor/l1/bias"])
    mu = h @ p["actor/mean/kernel"] + p["actor/mean/bias"]
    log_std = np.tanh(h @ p["actor/log_std/kernel"] + p["actor/log_std/bias"])
    log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
    std = np.exp(log_std)
    u = mu + std * noise
    normal = -0.5 * ((u - mu) / std) ** 2 - log_std - 0.5 * np.log(2.0 * np.pi)
    scale = float(a["action_scale"])
    return scale * np.tanh(u) + a["action_bias"], np.sum(normal - log_det(u, scale, form), axis=1)


def _pre_tanh(p, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.tanh(obs @ p["actor/l1/kernel"] + p["actor/l1/bias"])
    log_std = np.tanh(h @ p["actor/log_std/kernel"] + p["actor/log_std/bias"])
    std = np.exp(LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0))
    mu = h @ p["actor/mean/kernel"] + p["actor/mean/bias"]
    return mu, std


def q_value(p, net: str, obs: np.ndarray, action: np.ndarray) -> np.ndarray:
    """Q_net(s, a) [B]."""
    h = np.tanh(np.concatenate([obs, action], axis=1) @ p[f"{net}/l1/kernel"] + p[f"{net}/l1/bias"])
    return (h @ p[f"{net}/l2/kernel"] + p[f"{net}/l2/bias"])[:, 0]


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(4, 7)), "D": int(rng.integers(2, 4)), "A": int(rng.integers(2, 4))}
    sizes["H"], sizes["DA"] = int(rng.integers(3, 5)), sizes["D"] + sizes["A"]
    b, d, na = sizes["B"], sizes["D"], sizes["A"]
    out = {
        "obs": rng.normal(size=(b, d)),
        "actions": rng.uniform(-0.9, 0.9, size=(b, na)),
        "rewards": rng.normal(size=b),
        "next_obs": rng.normal(size=(b, d)),
        "dones": (np.arange(b) == 1).astype(float),
        "gamma": np.array(0.99),
        "action_scale": np.array(1.0),
        "action_bias": np.array(0.0),
    }
    while True:
        p = {
            k: 0.5 * rng.normal(size=tuple(sizes[x] if isinstance(x, str) else x for x in s)) for k, s in PARAMS.items()
        }
        p["actor/log_std/bias"] = 0.458 + 0.1 * rng.normal(size=na)  # log σ ≈ 0: σ ≈ 1
        p["actor/log_std/kernel"] *= 0.2
        p["log_alpha"] = np.array(np.log(0.2))
        noise = {}
        for key, obs in (("noise", out["obs"]), ("next_noise", out["next_obs"])):
            mu, std = _pre_tanh(p, obs, 0.0)
            eps = np.clip(rng.normal(size=(b, na)), -2.0, 2.0)
            if key == "noise":
                eps[0, 0] = (SATURATED - mu[0, 0]) / std[0, 0]  # one saturated action
            noise[key] = eps
        u = _pre_tanh(p, out["obs"], 0.0)
        u = u[0] + u[1] * noise["noise"]
        un = _pre_tanh(p, out["next_obs"], 0.0)
        un = un[0] + un[1] * noise["next_noise"]
        far = np.abs(np.delete(u.ravel(), 0)).max() <= 3.5 and np.abs(un).max() <= 3.5
        act = out["action_scale"] * np.tanh(u) + out["action_bias"]
        gap = q_value(p, "qf1", out["obs"], act) - q_value(p, "qf2", out["obs"], act)
        if far and np.min(np.abs(gap)) > 0.05 and np.any(gap > 0) and np.any(gap < 0):
            out.update(noise)
            out.update({f"params/{k}": v for k, v in p.items()})
            return out


def losses(p, a: dict, form: str, target=None, alpha=None, log_pi=None, frozen=None) -> dict[str, float]:
    """The three losses at p; stopped values (target y, α, log π, frozen Q params) are given as constants."""
    alpha = float(np.exp(a["params/log_alpha"])) if alpha is None else alpha
    q_in = p if frozen is None else {**p, **frozen}
    act, lp = actor_sample(p, a, a["obs"], a["noise"], form)
    q1, q2 = q_value(p, "qf1", a["obs"], a["actions"]), q_value(p, "qf2", a["obs"], a["actions"])
    min_pi = np.minimum(q_value(q_in, "qf1", a["obs"], act), q_value(q_in, "qf2", a["obs"], act))
    n_act = a["actions"].shape[1]
    lp_alpha = lp if log_pi is None else log_pi
    return {
        "q_loss": float(np.mean((q1 - target) ** 2) + np.mean((q2 - target) ** 2)),
        "actor_loss": float(np.mean(alpha * lp - min_pi)),
        "alpha_loss": float(np.mean(-np.exp(p["log_alpha"]) * (lp_alpha - n_act))),
    }


def q_target(p, a: dict, form: str) -> np.ndarray:
    """y [B] = r + γ(1 − done)(min_i Q_i′(s′, a′) − α·log π(a′|s′))."""
    next_act, next_lp = actor_sample(p, a, a["next_obs"], a["next_noise"], form)
    q_next = np.minimum(
        q_value(p, "qf1_target", a["next_obs"], next_act), q_value(p, "qf2_target", a["next_obs"], next_act)
    )
    alpha = float(np.exp(p["log_alpha"]))
    return a["rewards"] + a["gamma"] * (1.0 - a["dones"]) * (q_next - alpha * next_lp)


def _outputs(fx, variant: str, form: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    y = q_target(params, a, form)  # stopped: computed once at the base point
    alpha = float(np.exp(params["log_alpha"]))
    act, lp = actor_sample(params, a, a["obs"], a["noise"], form)
    frozen = None if variant == "q_not_frozen" else {k: v for k, v in params.items() if k.startswith(("qf1/", "qf2/"))}
    consts = {"q_loss": {}, "actor_loss": {"frozen": frozen}, "alpha_loss": {"log_pi": lp}}
    out = {"log_pi": lp, "actions_pi": act, "q_target": y}
    for name in LOSSES:
        grads = fd_grad(lambda p, n=name: losses(p, a, form, y, alpha, **consts[n])[n], params)
        out.update({f"grads/{name}/{k}": g for k, g in grads.items()})
    out.update({k: np.array(v) for k, v in losses(params, a, form, y, alpha).items()})
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    return _outputs(fx, variant, "epsilon" if variant == "naive_distrax" else "exact")


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """What the naive JAX port computes: distrax.Tanh's exact log-det where torch has CleanRL's + 1e-6."""
    return _outputs(fx, variant, "exact")


def _pattern(actor_loss_to_q: str) -> tuple[tuple[str, str], ...]:
    zero, nonzero = "zero", "nonzero"
    rules = [
        ("grads/q_loss/qf1/*", nonzero),
        ("grads/q_loss/qf2/*", nonzero),
        ("grads/q_loss/actor/*", zero),  # the target is stopped: the critic loss never trains the actor
        ("grads/q_loss/log_alpha", zero),
        ("grads/actor_loss/actor/*", nonzero),
        ("grads/actor_loss/qf1/*", actor_loss_to_q),  # Q frozen: the actor loss goes through Q, never into it
        ("grads/actor_loss/qf2/*", actor_loss_to_q),
        ("grads/actor_loss/log_alpha", zero),  # α is a constant of the actor loss
        ("grads/alpha_loss/log_alpha", nonzero),
        ("grads/alpha_loss/actor/*", zero),  # log π is a constant of the temperature loss
        ("grads/alpha_loss/qf*", zero),
        ("log_pi", nonzero),
        ("q_target", nonzero),
    ]
    rules += [(f"grads/{loss}/qf{i}_target/*", zero) for loss in LOSSES for i in (1, 2)]  # targets: EMA copies only
    return tuple(rules)


_NAIVE_KEYS = (
    "log_pi",
    "q_target",
    "q_loss",
    "actor_loss",
    "alpha_loss",
    "grads/q_loss/qf1/*",
    "grads/q_loss/qf2/*",
    "grads/actor_loss/actor/*",
    "grads/alpha_loss/log_alpha",
)

SPEC = Scenario(
    name="sac",
    title="Soft actor-critic: tanh-Gaussian log-det, twin-Q stopped target, frozen Q, temperature loss",
    family="advanced",
    order=11,
    claims=(),
    source="Haarnoja et al. 2018, arXiv:1812.05905; CleanRL sac_continuous_action.py",
    lesson=(
        "Each of SAC's losses trains one thing: the critic loss the twin Q (its target, with the twin-Q "
        "minimum and α·log π′, is stopped), the actor loss the actor (through Q, with Q frozen and α a "
        "constant), the temperature loss log α (log π stopped). The same loss in the two frameworks gives "
        "different gradients when one side writes CleanRL's log(1 − tanh²u + 1e-6) and the other "
        "distrax's exact log-det: the 1e-6 matters wherever an action saturates."
    ),
    variants=("exact_log_det", "naive_distrax", "q_not_frozen"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    naive_oracle=naive_oracle,
    checks=(_check_input_width,),
    pattern={"exact_log_det": _pattern("zero"), "naive_distrax": _pattern("zero"), "q_not_frozen": _pattern("nonzero")},
    diverges={"naive_distrax": _NAIVE_KEYS},
    porting=Porting(
        torch=(
            "target under `torch.no_grad()`; `alpha = log_alpha.exp().item()`; Q frozen for the actor step "
            "(`p.requires_grad_(False)`, SpinningUp) or `actor_optimizer` only; `alpha_loss` on `log_pi.detach()`; "
            "log-det `TanhTransform().log_abs_det_jacobian(u, y)`"
        ),
        jax=(
            "`jax.lax.stop_gradient(y)`, `stop_gradient(jnp.exp(log_alpha))`, `nnx.grad(..., argnums=nnx.DiffState(0, "
            "not Q))`, `stop_gradient(log_pi)`; log-det `distrax.Tanh().forward_log_det_jacobian(u)`"
        ),
        trap=(
            "CleanRL's `log(scale * (1 - tanh(u)**2) + 1e-6)` is not distrax's exact log-det: log π differs by up to "
            "1e-6 / (1 − tanh²u) and so do all three losses' gradients. In float32 the 1 − tanh² form also cancels: "
            "XLA's tanh is within 4 ulp, torch's within 0.5, and near saturation that alone breaks parity."
        ),
    ),
)
