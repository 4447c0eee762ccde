"""actor_critic: advantage actor-critic losses with a stopped advantage, and Gumbel-max acting.

Gradient flow: policy_loss -> actor only (the advantage R − V is detached);
value_loss -> critic; entropy -> actor. Acting reads detached logits.
Port note: `.detach()` becomes `jax.lax.stop_gradient`; torch.no_grad() around the
acting forward is the cheaper torch form of the same stop (no graph is recorded).
torch.argmax returns int64, jnp.argmax int32 unless x64: actions are output as int64.
Shapes: B samples, D observation features, H hidden units, A actions.
Reference: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning", arXiv:1602.01783.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..shared.core.checks import check_rank, check_same_shape, check_values, check_variant
from ._common import MLP, StepCall, field, numpy, scenario_run, scenario_step, step_of
from ._layout import grads_of, load_params

__all__ = [
    "ActorCritic",
    "build_model",
    "select_actions",
    "a2c_losses",
    "losses_and_grads",
    "step_calls",
    "make_step",
    "run",
]


class ActorCritic(nn.Module):
    """Separate networks (no shared trunk): logits [B, A] = actor(obs), values [B] = critic(obs)."""

    def __init__(self, d: int, h: int, a: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.actor = MLP(d, h, a, dtype)
        self.critic = MLP(d, h, 1, dtype)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor(obs), self.critic(obs).squeeze(-1)


def build_model(fx) -> ActorCritic:
    """An ActorCritic loaded with the fixture's canonical parameters (dtype of the fixture)."""
    params = fx.under("params")
    d, h, a = fx.dims["D"], fx.dims["H"], fx.dims["A"]
    return load_params(ActorCritic(d, h, a, getattr(torch, fx.dtype)), params)


def select_actions(logits: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gumbel-max sample of softmax(logits [B, A]) with uniform noise [B, A] in (0, 1).

    Returns (int64 actions [B], their log-probabilities [B]), both constants: what a rollout stores.

    Raises:
      ValueError: logits and noise differ in shape, or a noise value is outside (0, 1) (log(−log u) is
        not finite there).
    Reference: Gumbel 1954; Maddison et al. 2014, arXiv:1411.0030.
    """
    check_same_shape("select_actions", logits=logits.shape, noise=noise.shape)
    check_values("select_actions", "noise", noise, low=0.0, high=1.0, low_open=True, high_open=True)
    logits = logits.detach()  # GRAD-FLOW: acting needs no graph
    actions = torch.argmax(logits - torch.log(-torch.log(noise)), dim=-1)  # [B]
    return actions, F.log_softmax(logits, dim=-1).gather(1, actions[:, None]).squeeze(1)


def a2c_losses(
    logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor, variant: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(policy_loss, value_loss, entropy, advantages [B]) of logits [B, A], values [B], int actions [B], returns [B].

    policy_loss = −mean(log π(a|s)·A), A = R − V detached unless "advantage_not_stopped";
    value_loss = mean((R − V)²); entropy = mean(−Σ π log π).
    Raises:
      ValueError: values, returns and actions differ in shape (e.g. values [B, 1] vs returns [B]),
        logits is not [B, A] with the same B, or an unknown variant.
    Reference: Mnih et al. 2016, arXiv:1602.01783.
    """
    check_variant("actor_critic", variant)
    check_same_shape("a2c_losses", values=values.shape, returns=returns.shape, actions=actions.shape)
    check_rank("a2c_losses", "logits", logits.shape, "BA")
    check_same_shape("a2c_losses", values=values.shape, logits_batch=logits.shape[:1])
    advantages = returns - values  # [B]
    if variant == "advantage_stopped":
        advantages = advantages.detach()  # GRAD-FLOW: the policy loss must not push the critic
    logp = F.log_softmax(logits, dim=-1)  # [B, A]
    logp_a = logp.gather(1, actions[:, None]).squeeze(1)  # [B]
    policy_loss = -torch.mean(logp_a * advantages)
    value_loss = torch.mean((returns - values) ** 2)
    entropy = torch.mean(-torch.sum(logp.exp() * logp, dim=-1))
    return policy_loss, value_loss, entropy, advantages


def losses_and_grads(model: ActorCritic, batch: dict, vf_coef: float, ent_coef: float, variant: str):
    """Acting and one gradient of the A2C total: (total [], (policy_loss, value_loss, entropy, advantages [B],
    (actions [B], log π(a) [B])), canonical gradients of the total, critic gradients of the policy loss alone)."""
    model.zero_grad(set_to_none=True)
    logits, values = model(batch["obs"])
    policy_loss, value_loss, entropy, advantages = a2c_losses(
        logits, values, batch["actions"], batch["returns"], variant
    )
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
    aux = (policy_loss, value_loss, entropy, advantages, select_actions(logits, batch["noise"]))

    policy_loss.backward(retain_graph=True)  # the policy loss alone: does it reach the critic?
    policy_grads = grads_of(model.critic)  # .grad None -> explicit zeros (P11)
    model.zero_grad(set_to_none=True)
    loss.backward()
    return loss, aux, grads_of(model), policy_grads


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one losses_and_grads of a model built from the fixture (no update; the total first)."""
    model = build_model(fx)
    batch = {k: field(fx, k) for k in ("obs", "actions", "returns", "noise")}
    coefs = fx.scalar("vf_coef"), fx.scalar("ent_coef")
    return [StepCall(losses_and_grads, (model,), (batch, *coefs), {"variant": variant})]


@scenario_step("actor_critic")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """Acting, A2C losses, the policy loss's critic gradient, the total's gradient (no update); returns the total."""
    return step_of(step_calls(fx, variant))


@scenario_run("actor_critic")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, policy_loss, value_loss, entropy []; advantages, selected_logp [B]; selected_actions [B] int64;
    grads/{actor,critic}/<param> of the total; policy_grads/critic/<param> of the policy loss alone."""
    model = build_model(fx)
    batch = {k: field(fx, k) for k in ("obs", "actions", "returns", "noise")}
    coefs = fx.scalar("vf_coef"), fx.scalar("ent_coef")
    loss, aux, grads, policy_grads = losses_and_grads(model, batch, *coefs, variant)
    policy_loss, value_loss, entropy, advantages, (selected, selected_logp) = aux
    out = {"loss": numpy(loss), "policy_loss": numpy(policy_loss), "value_loss": numpy(value_loss)}
    out.update(entropy=numpy(entropy), advantages=numpy(advantages), selected_logp=numpy(selected_logp))
    out["selected_actions"] = numpy(selected).astype(np.int64)
    out.update({f"grads/{k}": g for k, g in grads.items()})
    out.update({f"policy_grads/critic/{k}": g for k, g in policy_grads.items()})
    return out
