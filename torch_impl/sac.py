"""sac: soft actor-critic's critic, actor and temperature losses, and which network each one trains.

Gradient flow: q_loss -> qf1, qf2 (the target y is computed under no_grad); actor_loss -> actor
through Q with qf1, qf2 frozen (requires_grad_(False)) and α detached; alpha_loss -> log α with
log π detached. The target networks get no gradient at all (EMA copies).
Port note: torch's Q freeze becomes nnx.grad(..., argnums=nnx.DiffState(0, not Q)); no_grad
and detach become jax.lax.stop_gradient. naive_distrax: this torch side is CleanRL's
log(scale·(1 − tanh²u) + 1e-6) while the JAX port uses distrax's exact log-det; the recommended
torch form is TanhTransform's exact 2(log 2 − u − softplus(−2u)), the same as distrax.Tanh.
Shapes: B transitions, D observation features, A action dimensions, H hidden units.
Reference: Haarnoja et al. 2018, arXiv:1812.05905; CleanRL sac_continuous_action.py; OpenAI
SpinningUp sac.py (the Q freeze during the policy step).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal
from torch.distributions.transforms import AffineTransform, ComposeTransform, TanhTransform

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, numpy, scenario_run
from ._layout import grads_of, load_params

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

LOG_STD_MIN, LOG_STD_MAX, LOG_DET_EPS = -5.0, 2.0, 1e-6  # CleanRL's constants


class Actor(nn.Module):
    """Tanh-Gaussian policy: (μ, log σ) [B, A] of obs [B, D], log σ squashed into [LOG_STD_MIN, LOG_STD_MAX]."""

    def __init__(self, d: int, h: int, a: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(d, h, dtype=dtype)
        self.mean = nn.Linear(h, a, dtype=dtype)
        self.log_std = nn.Linear(h, a, dtype=dtype)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.l1(obs))
        log_std = torch.tanh(self.log_std(h))
        return self.mean(h), LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)

    def get_action(self, obs: torch.Tensor, noise: torch.Tensor, scale: float, bias: float, variant: str):
        """(action [B, A], log π [B]): u = μ + σ·noise (rsample with the fixture's ε), action = scale·tanh(u) + bias.

        The log-det is TanhTransform's exact one; naive_distrax's torch side is CleanRL's + 1e-6 form.
        """
        check_variant("sac", variant)
        mean, log_std = self(obs)
        normal = Normal(mean, log_std.exp())
        u = mean + log_std.exp() * noise  # normal.rsample() with the fixture's noise
        squash = ComposeTransform([TanhTransform(), AffineTransform(bias, scale)])
        action = squash(u)
        if variant == "naive_distrax":  # CleanRL sac_continuous_action.py
            log_det = torch.log(scale * (1 - torch.tanh(u).pow(2)) + LOG_DET_EPS)
        else:
            log_det = squash.log_abs_det_jacobian(u, action)
        return action, (normal.log_prob(u) - log_det).sum(1)


class SoftQNetwork(nn.Module):
    """Q(obs [B, D], action [B, A]) [B] = l2(tanh(l1([obs, action])))."""

    def __init__(self, d: int, a: int, h: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(d + a, h, dtype=dtype)
        self.l2 = nn.Linear(h, 1, dtype=dtype)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(torch.cat([obs, action], 1)))).squeeze(-1)


class SAC(nn.Module):
    """The actor, twin critics, their target copies and the temperature log α []."""

    def __init__(self, d: int, a: int, h: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.actor = Actor(d, h, a, dtype)
        self.qf1, self.qf2 = SoftQNetwork(d, a, h, dtype), SoftQNetwork(d, a, h, dtype)
        self.qf1_target, self.qf2_target = SoftQNetwork(d, a, h, dtype), SoftQNetwork(d, a, h, dtype)
        self.log_alpha = nn.Parameter(torch.zeros((), dtype=dtype))


def build_agent(fx) -> SAC:
    """A SAC loaded with the fixture's canonical parameters (log α is not a layer: copied by hand)."""
    params = {k: v for k, v in fx.under("params").items() if k != "log_alpha"}
    model = load_params(SAC(fx.dims["D"], fx.dims["A"], fx.dims["H"], getattr(torch, fx.dtype)), params)
    model.log_alpha = nn.Parameter(field(fx, "params/log_alpha"))
    return model


def q_targets(model: SAC, batch: dict, consts: dict, variant: str) -> torch.Tensor:
    """y [B] = r + γ(1 − done)(min_i Q_i′(s′, a′) − α·log π(a′|s′)): a constant for the critics."""
    check_variant("sac", variant)
    with torch.no_grad():  # GRAD-FLOW: the TD target is a constant for the critics
        alpha = model.log_alpha.exp()
        next_action, next_log_pi = model.actor.get_action(
            batch["next_obs"], batch["next_noise"], consts["action_scale"], consts["action_bias"], variant
        )
        q_next = torch.min(
            model.qf1_target(batch["next_obs"], next_action), model.qf2_target(batch["next_obs"], next_action)
        )
        return batch["rewards"] + (1 - batch["dones"]) * consts["gamma"] * (q_next - alpha * next_log_pi)


def q_loss(model: SAC, batch: dict, y: torch.Tensor) -> torch.Tensor:
    """mean((Q_1(s, a) − y)²) + mean((Q_2(s, a) − y)²) of the replay actions, y [B].

    Raises ValueError if y is not [B] like Q (a [B, 1] target would broadcast to [B, B], P14).
    """
    q1, q2 = model.qf1(batch["obs"], batch["actions"]), model.qf2(batch["obs"], batch["actions"])
    check_same_shape("q_loss", q=q1.shape, target=y.shape)
    return F.mse_loss(q1, y) + F.mse_loss(q2, y)


def actor_loss(model: SAC, batch: dict, consts: dict, variant: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean(α·log π(ã|s) − min_i Q_i(s, ã)), log π [B], ã [B, A]) with qf1, qf2 frozen (unless q_not_frozen), α detached."""
    check_variant("sac", variant)
    alpha = model.log_alpha.exp().detach()  # GRAD-FLOW: α is a constant of the actor loss
    if variant != "q_not_frozen":
        for q in (model.qf1, model.qf2):
            q.requires_grad_(False)  # GRAD-FLOW: the actor loss goes through Q without training Q
    action, log_pi = model.actor.get_action(
        batch["obs"], batch["noise"], consts["action_scale"], consts["action_bias"], variant
    )
    min_q = torch.min(model.qf1(batch["obs"], action), model.qf2(batch["obs"], action))
    for q in (model.qf1, model.qf2):
        q.requires_grad_(True)  # the graph is built: unfreezing now gives Q no gradient from this loss
    return (alpha * log_pi - min_q).mean(), log_pi, action


def alpha_loss(model: SAC, log_pi: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """mean(−exp(log α)·(log π + target_entropy)) of log π [B], log π detached."""
    log_pi = log_pi.detach()  # GRAD-FLOW: log π is a constant of the temperature loss
    return (-model.log_alpha.exp() * (log_pi + target_entropy)).mean()


def _grads(model: SAC, loss: torch.Tensor) -> dict[str, np.ndarray]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    g = model.log_alpha.grad
    return {
        **grads_of(model),
        "log_alpha": numpy(torch.zeros_like(model.log_alpha) if g is None else g),
    }  # None -> 0 (P11)


def losses_and_grads(model: SAC, batch: dict, consts: dict, variant: str, target_entropy: float):
    """({q_loss, actor_loss, alpha_loss} [], the canonical gradients of each loss alone (one backward per
    loss, as CleanRL's three optimizers see them), {log_pi [B], actions_pi [B, A], q_target [B]})."""
    y = q_targets(model, batch, consts, variant)
    out = {"q_loss": q_loss(model, batch, y)}
    out["actor_loss"], log_pi, actions_pi = actor_loss(model, batch, consts, variant)
    out["alpha_loss"] = alpha_loss(model, log_pi, target_entropy)
    grads = {name: _grads(model, loss) for name, loss in out.items()}  # one per loss
    return out, grads, {"log_pi": log_pi, "actions_pi": actions_pi, "q_target": y}


@scenario_run("sac")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: q_loss, actor_loss, alpha_loss []; log_pi, q_target [B]; actions_pi [B, A];
    grads/<loss>/{actor,qf1,qf2,qf1_target,qf2_target}/<param> and grads/<loss>/log_alpha of each loss."""
    model = build_agent(fx)
    batch = {k: field(fx, k) for k in ("obs", "actions", "rewards", "next_obs", "dones", "noise", "next_noise")}
    consts = {k: fx.scalar(k) for k in ("action_scale", "action_bias", "gamma")}
    losses, grads, extras = losses_and_grads(model, batch, consts, variant, -float(fx.dims["A"]))
    out = {k: numpy(v) for k, v in losses.items()}
    for name, g in grads.items():
        out.update({f"grads/{name}/{k}": v for k, v in g.items()})
    out.update({k: numpy(v) for k, v in extras.items()})
    return out
