"""reinforce_baseline: REINFORCE with a learned baseline; the baseline is a constant for the policy loss.

Gradient flow: policy_loss -> policy only (δ = G − b(s) detached); baseline_loss -> baseline
only. baseline_not_stopped drops the detach: the policy loss also trains the baseline.
Port note: `(returns - b).detach()` inside the policy loss becomes rlax.policy_gradient_loss(
logits, a, returns - b, w, use_stop_gradient=True): rlax stops the advantage itself (the flag
is the stop). The returns are data, a reversed cumulative sum in torch and
rlax.discounted_returns in JAX; neither needs a stop.
Shapes: T time steps of one episode, D observation features, H hidden units, A actions.
Reference: Williams 1992, doi:10.1007/BF00992696; Sutton & Barto 2018, "Reinforcement Learning:
An Introduction", ch. 13.4 (REINFORCE with baseline).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..shared.core.checks import check_rank, check_same_shape, check_variant
from ._common import MLP, field, numpy, scenario_run
from ._layout import grads_of, load_params

__all__ = ["PolicyBaseline", "build_model", "discounted_returns", "reinforce_losses", "losses_and_grads", "run"]


class PolicyBaseline(nn.Module):
    """Separate networks: logits [T, A] = policy(obs), baselines [T] = baseline(obs)."""

    def __init__(self, d: int, h: int, a: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.policy = MLP(d, h, a, dtype)
        self.baseline = MLP(d, h, 1, dtype)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(obs), self.baseline(obs).squeeze(-1)


def build_model(fx) -> PolicyBaseline:
    """A PolicyBaseline loaded with the fixture's canonical parameters (dtype of the fixture)."""
    params = fx.under("params")
    d, h, a = fx.dims["D"], fx.dims["H"], fx.dims["A"]
    return load_params(PolicyBaseline(d, h, a, getattr(torch, fx.dtype)), params)


def discounted_returns(rewards: torch.Tensor, gamma: float) -> torch.Tensor:
    """G [T] of rewards [T]: G_t = r_t + γ·G_{t+1}, G_T = 0 (Monte Carlo returns of one episode).

    Raises ValueError unless rewards is 1-D.
    """
    check_rank("discounted_returns", "rewards", rewards.shape, "T")
    out, g = torch.zeros_like(rewards), torch.zeros((), dtype=rewards.dtype)
    for t in reversed(range(rewards.shape[0])):
        g = rewards[t] + gamma * g
        out[t] = g
    return out


def reinforce_losses(
    logits: torch.Tensor,
    baselines: torch.Tensor,
    actions: torch.Tensor,
    returns: torch.Tensor,
    gamma: float,
    variant: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(policy_loss, baseline_loss, advantages [T]) of logits [T, A], baselines [T], int actions [T], returns [T].

    policy_loss = −mean_t(γ^t·log π(a_t|s_t)·δ_t), δ = G − b detached unless "baseline_not_stopped";
    baseline_loss = 0.5·mean(δ²).
    Raises:
      ValueError: baselines, returns and actions differ in shape (e.g. baselines [T, 1]), logits is
        not [T, A] with the same T, or an unknown variant.
    Reference: Williams 1992; Sutton & Barto 2018, ch. 13.4.
    """
    check_variant("reinforce_baseline", variant)
    shapes = {"baselines": baselines.shape, "returns": returns.shape, "actions": actions.shape}
    check_same_shape("reinforce_losses", **shapes)
    check_rank("reinforce_losses", "logits", logits.shape, "TA")
    check_same_shape("reinforce_losses", returns=returns.shape, logits_steps=logits.shape[:1])
    advantages = returns - baselines  # [T]
    if variant != "baseline_not_stopped":
        advantages = advantages.detach()  # GRAD-FLOW: the policy loss must not train the baseline
    weights = gamma ** torch.arange(returns.shape[0], dtype=returns.dtype)  # γ^t [T]
    logp_a = F.log_softmax(logits, dim=-1).gather(1, actions[:, None]).squeeze(1)  # [T]
    policy_loss = -torch.mean(weights * logp_a * advantages)
    baseline_loss = 0.5 * torch.mean((returns - baselines) ** 2)
    return policy_loss, baseline_loss, advantages


def losses_and_grads(model: PolicyBaseline, batch: dict, gamma: float, variant: str):
    """(total [], (policy_loss, baseline_loss, returns [T], advantages [T]), canonical gradients of the total,
    baseline gradients of the policy loss alone)."""
    model.zero_grad(set_to_none=True)
    returns = discounted_returns(batch["rewards"], gamma)
    logits, baselines = model(batch["obs"])
    policy_loss, baseline_loss, advantages = reinforce_losses(
        logits, baselines, batch["actions"], returns, gamma, variant
    )
    policy_loss.backward(retain_graph=True)  # the policy loss alone: does it reach the baseline?
    policy_grads = grads_of(model.baseline)  # .grad None -> explicit zeros (P11)
    model.zero_grad(set_to_none=True)
    loss = policy_loss + baseline_loss
    loss.backward()
    return loss, (policy_loss, baseline_loss, returns, advantages), grads_of(model), policy_grads


@scenario_run("reinforce_baseline")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, policy_loss, baseline_loss []; returns, advantages [T]; grads/{policy,baseline}/<param>
    of the total; policy_grads/baseline/<param> of the policy loss alone."""
    model = build_model(fx)
    batch = {k: field(fx, k) for k in ("obs", "actions", "rewards")}
    loss, aux, grads, policy_grads = losses_and_grads(model, batch, fx.scalar("gamma"), variant)
    policy_loss, baseline_loss, returns, advantages = aux
    out = {"loss": numpy(loss), "policy_loss": numpy(policy_loss), "baseline_loss": numpy(baseline_loss)}
    out.update(returns=numpy(returns), advantages=numpy(advantages))
    out.update({f"grads/{k}": g for k, g in grads.items()})
    out.update({f"policy_grads/baseline/{k}": g for k, g in policy_grads.items()})
    return out
