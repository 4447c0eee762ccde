"""sac: soft actor-critic's critic, actor and temperature losses, and which network each one trains.

Gradient flow: q_loss -> qf1, qf2 (the target y is stopped); actor_loss -> actor through Q,
differentiated with nnx.DiffState over everything but qf1, qf2 (Q frozen) and α stopped;
alpha_loss -> log α with log π stopped. The target networks get no gradient at all (EMA copies).
Port note: torch's `q.requires_grad_(False)` for the actor step becomes nnx.grad(...,
argnums=nnx.DiffState(0, not Q)); no_grad and detach become jax.lax.stop_gradient. The log-det
is distrax's exact one (Chain([ScalarAffine, Tanh]).forward_and_log_det) in every variant:
naive_distrax is this port of CleanRL's torch log(scale·(1 − tanh²u) + 1e-6), which differs.
Shapes: B transitions, D observation features, A action dimensions, H hidden units.
Reference: Haarnoja et al. 2018, arXiv:1812.05905; CleanRL sac_continuous_action.py; OpenAI
SpinningUp sac.py (the Q freeze during the policy step); distrax bijectors/tanh.py.
"""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, grads_of, load_params, numpy, scenario_run

__all__ = [
    "Actor",
    "SoftQNetwork",
    "SAC",
    "build_agent",
    "q_targets",
    "q_loss",
    "actor_loss",
    "alpha_loss",
    "losses_and_grads",
    "run",
]

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # CleanRL's constants


class Actor(nnx.Module):
    """Tanh-Gaussian policy: (μ, log σ) [B, A] of obs [B, D], log σ squashed into [LOG_STD_MIN, LOG_STD_MAX]."""

    def __init__(self, d: int, h: int, a: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.mean = nnx.Linear(h, a, param_dtype=dtype, rngs=rngs)
        self.log_std = nnx.Linear(h, a, param_dtype=dtype, rngs=rngs)

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = jnp.tanh(self.l1(obs))
        log_std = jnp.tanh(self.log_std(h))
        return self.mean(h), LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)

    def get_action(self, obs: jax.Array, noise: jax.Array, scale, bias, variant: str):
        """(action [B, A], log π [B]): u = μ + σ·noise (the fixture's ε), action = scale·tanh(u) + bias.

        The log-det is distrax's exact one in every variant (see the module docstring).
        """
        check_variant("sac", variant)
        mean, log_std = self(obs)
        normal = distrax.Normal(mean, jnp.exp(log_std))
        u = mean + jnp.exp(log_std) * noise  # the reparameterised sample
        squash = distrax.Chain([distrax.ScalarAffine(shift=bias, scale=scale), distrax.Tanh()])
        action, log_det = squash.forward_and_log_det(u)

        return action, (normal.log_prob(u) - log_det).sum(1)


class SoftQNetwork(nnx.Module):
    """Q(obs [B, D], action [B, A]) [B] = l2(tanh(l1([obs, action])))."""

    def __init__(self, d: int, a: int, h: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(d + a, h, param_dtype=dtype, rngs=rngs)
        self.l2 = nnx.Linear(h, 1, param_dtype=dtype, rngs=rngs)

    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        return self.l2(jnp.tanh(self.l1(jnp.concatenate([obs, action], 1)))).squeeze(-1)


class SAC(nnx.Module):
    """The actor, twin critics, their target copies and the temperature log α []."""

    def __init__(self, d: int, a: int, h: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.actor = Actor(d, h, a, dtype, rngs)
        self.qf1, self.qf2 = SoftQNetwork(d, a, h, dtype, rngs), SoftQNetwork(d, a, h, dtype, rngs)
        self.qf1_target, self.qf2_target = SoftQNetwork(d, a, h, dtype, rngs), SoftQNetwork(d, a, h, dtype, rngs)
        self.log_alpha = nnx.Param(jnp.zeros((), dtype))


def build_agent(fx) -> SAC:
    """A SAC loaded with the fixture's canonical parameters (log α is an nnx.Param like the layers')."""
    params = fx.under("params")
    d, a, h = fx.dims["D"], fx.dims["A"], fx.dims["H"]
    return load_params(nnx.eval_shape(lambda: SAC(d, a, h, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def q_targets(model: SAC, batch: dict, consts: dict, variant: str) -> jax.Array:
    """y [B] = r + γ(1 − done)(min_i Q_i′(s′, a′) − α·log π(a′|s′)): a constant for the critics."""
    check_variant("sac", variant)
    alpha = jnp.exp(model.log_alpha[...])
    next_action, next_log_pi = model.actor.get_action(
        batch["next_obs"], batch["next_noise"], consts["action_scale"], consts["action_bias"], variant
    )
    q_next = jnp.minimum(
        model.qf1_target(batch["next_obs"], next_action), model.qf2_target(batch["next_obs"], next_action)
    )
    y = batch["rewards"] + (1 - batch["dones"]) * consts["gamma"] * (q_next - alpha * next_log_pi)
    return jax.lax.stop_gradient(y)  # GRAD-FLOW: the TD target is a constant for the critics


def q_loss(model: SAC, batch: dict, y: jax.Array) -> jax.Array:
    """mean((Q_1(s, a) − y)²) + mean((Q_2(s, a) − y)²) of the replay actions, y [B].

    Raises ValueError if y is not [B] like Q (a [B, 1] target would broadcast to [B, B], P14).
    """
    q1, q2 = model.qf1(batch["obs"], batch["actions"]), model.qf2(batch["obs"], batch["actions"])
    check_same_shape("q_loss", q=q1.shape, target=y.shape)
    return jnp.mean((q1 - y) ** 2) + jnp.mean((q2 - y) ** 2)


def actor_loss(model: SAC, batch: dict, consts: dict, variant: str) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(mean(α·log π(ã|s) − min_i Q_i(s, ã)), log π [B], ã [B, A]) with qf1, qf2 frozen (unless q_not_frozen), α stopped."""
    check_variant("sac", variant)
    alpha = jax.lax.stop_gradient(jnp.exp(model.log_alpha[...]))  # GRAD-FLOW: α is a constant of the actor loss
    qf1, qf2 = model.qf1, model.qf2
    if variant != "q_not_frozen":  # Q's parameters as constants, its input ã still differentiated
        qf1, qf2 = (
            nnx.merge(g, jax.lax.stop_gradient(s)) for g, s in (nnx.split(qf1), nnx.split(qf2))
        )  # GRAD-FLOW: the actor loss goes through Q without training Q
    action, log_pi = model.actor.get_action(
        batch["obs"], batch["noise"], consts["action_scale"], consts["action_bias"], variant
    )
    min_q = jnp.minimum(qf1(batch["obs"], action), qf2(batch["obs"], action))

    return (alpha * log_pi - min_q).mean(), log_pi, action


def alpha_loss(model: SAC, log_pi: jax.Array, target_entropy: float) -> jax.Array:
    """mean(−exp(log α)·(log π + target_entropy)) of log π [B], log π stopped."""
    log_pi = jax.lax.stop_gradient(log_pi)  # GRAD-FLOW: log π is a constant of the temperature loss
    return (-jnp.exp(model.log_alpha[...]) * (log_pi + target_entropy)).mean()


@nnx.jit(static_argnames=("variant", "target_entropy"))
def losses_and_grads(model: SAC, batch: dict, consts: dict, variant: str, target_entropy: float):
    """({q_loss, actor_loss, alpha_loss} [], the gradient State of each loss alone (as CleanRL's three
    optimizers see them), {log_pi [B], actions_pi [B, A], q_target [B]}), jitted."""

    def losses(model: SAC):
        y = q_targets(model, batch, consts, variant)
        out = {"q_loss": q_loss(model, batch, y)}
        out["actor_loss"], log_pi, actions_pi = actor_loss(model, batch, consts, variant)
        out["alpha_loss"] = alpha_loss(model, log_pi, target_entropy)
        return out, {"log_pi": log_pi, "actions_pi": actions_pi, "q_target": y}

    out, extras = losses(model)
    grads = {name: nnx.grad(lambda m, name=name: losses(m)[0][name])(model) for name in out}  # one per loss
    return out, grads, extras


@scenario_run("sac")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: q_loss, actor_loss, alpha_loss []; log_pi, q_target [B]; actions_pi [B, A];
    grads/<loss>/{actor,qf1,qf2,qf1_target,qf2_target}/<param> and grads/<loss>/log_alpha of each loss."""
    model = build_agent(fx)
    batch = {k: field(fx, k) for k in ("obs", "actions", "rewards", "next_obs", "dones", "noise", "next_noise")}
    consts = {k: field(fx, k) for k in ("action_scale", "action_bias", "gamma")}
    losses, grads, extras = losses_and_grads(model, batch, consts, variant, -float(fx.dims["A"]))
    out = {k: numpy(v) for k, v in losses.items()}
    for name, g in grads.items():
        out.update({f"grads/{name}/{k}": v for k, v in grads_of(g).items()})
    out.update({k: numpy(v) for k, v in extras.items()})
    return out
