"""ppo: PPO's clipped surrogate loss; the rollout's log-probabilities and advantages are constants.

Gradient flow: pg_loss -> actor through the ratio r = exp(logπ − logπ_old) only (logπ_old,
Â, R, V_old are rollout constants; Â is stopped even if a caller computed it from the critic
and left it attached); v_loss -> critic; entropy -> actor. Recomputing logπ_old
at update time needs the stop: old_logprob_attached forgets it, r ≡ 1 and ∇r = 0.
Port note: CleanRL's rollout runs under torch.no_grad(); in JAX stored arrays are constants
already and a recomputed logπ_old needs jax.lax.stop_gradient. `adv.std()` is unbiased in
torch: port it as jnp.std(adv, ddof=1), never the default jnp.std (naive_jnp_std).
torch.max(−Â·r, −Â·clip(r)) is rlax.clipped_surrogate_pg_loss's −fmin(r·Â, clip(r)·Â); rlax
stops Â by default (use_stop_gradient=True), a stop the torch code must write: both sides stop it
on a tagged line (rlax's flag off), so a side-by-side read shows it.
Shapes: B samples of a minibatch, D observation features, H hidden units, A actions.
Reference: Schulman et al. 2017, arXiv:1707.06347; CleanRL ppo.py (Huang et al. 2022, JMLR 23(274)).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

from ..shared.core.checks import check_same_shape, check_variant
from ._common import MLP, field, numpy, scenario_run
from ._layout import grads_of, load_params

__all__ = ["Agent", "build_agent", "old_logprobs", "normalize_advantages", "ppo_losses", "losses_and_grads", "run"]

STORED = ("clipped", "value_unclipped", "naive_jnp_std")


class Agent(nn.Module):
    """CleanRL's Agent: separate actor [B, A] (logits) and critic [B] networks."""

    def __init__(self, d: int, h: int, a: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.actor = MLP(d, h, a, dtype)
        self.critic = MLP(d, h, 1, dtype)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logπ(a|s) [B], entropy [B], V(s) [B]): CleanRL's get_action_and_value with given actions."""
        dist = Categorical(logits=self.actor(obs))
        return dist.log_prob(actions), dist.entropy(), self.critic(obs).squeeze(-1)


def build_agent(fx) -> Agent:
    """An Agent loaded with the fixture's canonical parameters (dtype of the fixture)."""
    params = fx.under("params")
    d, h, a = fx.dims["D"], fx.dims["H"], fx.dims["A"]
    return load_params(Agent(d, h, a, getattr(torch, fx.dtype)), params)


def old_logprobs(agent: Agent, batch: dict, variant: str) -> torch.Tensor:
    """logπ_old(a|s) [B]: the rollout's stored values, or recomputed now (with the stop unless attached)."""
    check_variant("ppo", variant)
    if variant in STORED:
        return batch["old_logprobs"]
    if variant == "old_logprob_attached":
        return agent(batch["obs"], batch["actions"])[0]  # the trap: recomputed with the graph attached
    with torch.no_grad():  # GRAD-FLOW: the rollout's log-probs are constants of the update
        return agent(batch["obs"], batch["actions"])[0]


def normalize_advantages(adv: torch.Tensor, variant: str) -> torch.Tensor:
    """(A − mean A) / (std A + 1e-8) of adv [B], std unbiased (torch's default, CleanRL's norm_adv).

    Raises ValueError for an unknown variant.
    """
    check_variant("ppo", variant)
    return (adv - adv.mean()) / (adv.std() + 1e-8)


def ppo_losses(agent: Agent, batch: dict, coefs: dict, variant: str) -> dict[str, torch.Tensor]:
    """CleanRL's PPO loss on one minibatch: loss, pg_loss, v_loss, entropy [] and ratio, advantages [B].

    batch: obs [B, D], actions [B] int, old_logprobs, advantages, returns, values [B] (rollout constants).
    coefs: clip_coef ε, vf_coef, ent_coef (floats). value_unclipped: 0.5·mean((V − R)²).
    Raises:
      ValueError: the per-sample fields differ in shape (a [B, 1] value would broadcast), unknown variant.
    Reference: Schulman et al. 2017, arXiv:1707.06347, eq. 7 and 9; CleanRL ppo.py.
    """
    check_variant("ppo", variant)
    keys = ("actions", "old_logprobs", "advantages", "returns", "values")
    check_same_shape("ppo_losses", **{k: batch[k].shape for k in keys})
    eps = coefs["clip_coef"]
    logp, entropy, value = agent(batch["obs"], batch["actions"])
    check_same_shape("ppo_losses", value=value.shape, returns=batch["returns"].shape)
    ratio = (logp - old_logprobs(agent, batch, variant)).exp()  # [B]
    adv = normalize_advantages(batch["advantages"], variant)
    adv = adv.detach()  # GRAD-FLOW: advantages are rollout constants: the policy loss must not train the critic
    pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - eps, 1 + eps)).mean()
    unclipped = (value - batch["returns"]) ** 2
    if variant == "value_unclipped":
        v_loss = 0.5 * unclipped.mean()
    else:
        v_clipped = batch["values"] + torch.clamp(value - batch["values"], -eps, eps)
        v_loss = 0.5 * torch.max(unclipped, (v_clipped - batch["returns"]) ** 2).mean()
    loss = pg_loss - coefs["ent_coef"] * entropy.mean() + coefs["vf_coef"] * v_loss
    return {
        "loss": loss,
        "pg_loss": pg_loss,
        "v_loss": v_loss,
        "entropy": entropy.mean(),
        "ratio": ratio,
        "advantages": adv,
    }


def losses_and_grads(agent: Agent, batch: dict, coefs: dict, variant: str):
    """(ppo_losses' outputs, canonical gradients of the loss, actor gradients of pg_loss alone)."""
    out = ppo_losses(agent, batch, coefs, variant)
    agent.zero_grad(set_to_none=True)
    out["pg_loss"].backward(retain_graph=True)  # the policy term alone: what the ratio gives the actor
    pg_grads = grads_of(agent.actor)  # .grad None -> explicit zeros (P11)
    agent.zero_grad(set_to_none=True)
    out["loss"].backward()
    return out, grads_of(agent), pg_grads


@scenario_run("ppo")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, pg_loss, v_loss, entropy []; ratio, advantages [B]; grads/{actor,critic}/<param> of the
    loss; pg_grads/actor/<param> of pg_loss alone."""
    agent = build_agent(fx)
    batch = {k: field(fx, k) for k in ("obs", "actions", "old_logprobs", "advantages", "returns", "values")}
    coefs = {k: fx.scalar(k) for k in ("clip_coef", "vf_coef", "ent_coef")}
    out, grads, pg_grads = losses_and_grads(agent, batch, coefs, variant)
    result = {k: numpy(v) for k, v in out.items()}
    result.update({f"grads/{k}": g for k, g in grads.items()})
    result.update({f"pg_grads/actor/{k}": g for k, g in pg_grads.items()})
    return result
