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

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import rlax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant
from ._common import MLP, field, grads_of, load_params, numpy, scenario_run

__all__ = ["Agent", "build_agent", "old_logprobs", "normalize_advantages", "ppo_losses", "losses_and_grads", "run"]

STORED = ("clipped", "value_unclipped", "naive_jnp_std")


class Agent(nnx.Module):
    """CleanRL's Agent: separate actor [B, A] (logits) and critic [B] networks."""

    def __init__(self, d: int, h: int, a: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.actor = MLP(d, h, a, dtype, rngs)
        self.critic = MLP(d, h, 1, dtype, rngs)

    def __call__(self, obs: jax.Array, actions: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(logπ(a|s) [B], entropy [B], V(s) [B]): CleanRL's get_action_and_value with given actions."""
        dist = distrax.Categorical(logits=self.actor(obs))
        return dist.log_prob(actions), dist.entropy(), self.critic(obs).squeeze(-1)


def build_agent(fx) -> Agent:
    """An Agent loaded with the fixture's canonical parameters (dtype of the fixture)."""
    params = fx.under("params")
    d, h, a = fx.dims["D"], fx.dims["H"], fx.dims["A"]
    return load_params(nnx.eval_shape(lambda: Agent(d, h, a, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def old_logprobs(agent: Agent, batch: dict, variant: str) -> jax.Array:
    """logπ_old(a|s) [B]: the rollout's stored values, or recomputed now (with the stop unless attached)."""
    check_variant("ppo", variant)
    if variant in STORED:
        return batch["old_logprobs"]
    if variant == "old_logprob_attached":
        return agent(batch["obs"], batch["actions"])[0]  # the trap: recomputed with the graph attached
    logp = agent(batch["obs"], batch["actions"])[0]
    return jax.lax.stop_gradient(logp)  # GRAD-FLOW: the rollout's log-probs are constants of the update


def normalize_advantages(adv: jax.Array, variant: str) -> jax.Array:
    """(A − mean A) / (std A + 1e-8) of adv [B], std unbiased (ddof=1, torch's default); naive_jnp_std: ddof=0.

    Raises ValueError for an unknown variant.
    """
    check_variant("ppo", variant)
    if variant == "naive_jnp_std":
        return (adv - adv.mean()) / (jnp.std(adv) + 1e-8)  # the straightforward port: population std
    return (adv - adv.mean()) / (jnp.std(adv, ddof=1) + 1e-8)


def ppo_losses(agent: Agent, batch: dict, coefs: dict, variant: str) -> dict[str, jax.Array]:
    """CleanRL's PPO loss on one minibatch: loss, pg_loss, v_loss, entropy [] and ratio, advantages [B].

    batch: obs [B, D], actions [B] int, old_logprobs, advantages, returns, values [B] (rollout constants).
    coefs: clip_coef ε, vf_coef, ent_coef (scalars). value_unclipped: 0.5·mean((V − R)²).
    Raises:
      ValueError: the per-sample fields differ in shape (a [B, 1] value would broadcast), unknown variant.
    Reference: Schulman et al. 2017, arXiv:1707.06347, eq. 7 and 9; CleanRL ppo.py; rlax policy_gradients.py.
    """
    check_variant("ppo", variant)
    keys = ("actions", "old_logprobs", "advantages", "returns", "values")
    check_same_shape("ppo_losses", **{k: batch[k].shape for k in keys})
    eps = coefs["clip_coef"]
    logp, entropy, value = agent(batch["obs"], batch["actions"])
    check_same_shape("ppo_losses", value=value.shape, returns=batch["returns"].shape)
    ratio = jnp.exp(logp - old_logprobs(agent, batch, variant))  # [B]
    adv = normalize_advantages(batch["advantages"], variant)
    adv = jax.lax.stop_gradient(
        adv
    )  # GRAD-FLOW: advantages are rollout constants: the policy loss must not train the critic
    pg_loss = rlax.clipped_surrogate_pg_loss(ratio, adv, eps, use_stop_gradient=False)  # stopped above, tagged
    unclipped = (value - batch["returns"]) ** 2
    if variant == "value_unclipped":
        v_loss = 0.5 * unclipped.mean()
    else:
        v_clipped = batch["values"] + jnp.clip(value - batch["values"], -eps, eps)
        v_loss = 0.5 * jnp.maximum(unclipped, (v_clipped - batch["returns"]) ** 2).mean()
    loss = pg_loss - coefs["ent_coef"] * entropy.mean() + coefs["vf_coef"] * v_loss
    return {
        "loss": loss,
        "pg_loss": pg_loss,
        "v_loss": v_loss,
        "entropy": entropy.mean(),
        "ratio": ratio,
        "advantages": adv,
    }


@nnx.jit(static_argnames="variant")
def losses_and_grads(agent: Agent, batch: dict, coefs: dict, variant: str):
    """(ppo_losses' outputs, gradient State of the loss, actor gradient State of pg_loss alone), jitted."""

    def loss_fn(agent: Agent) -> tuple[jax.Array, dict[str, jax.Array]]:
        out = ppo_losses(agent, batch, coefs, variant)
        return out["loss"], out

    pg_grads = nnx.grad(lambda m: loss_fn(m)[1]["pg_loss"])(
        agent
    )  # the policy term alone: what the ratio gives the actor
    (_, out), grads = nnx.value_and_grad(loss_fn, has_aux=True)(agent)
    return out, grads, pg_grads["actor"]


@scenario_run("ppo")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, pg_loss, v_loss, entropy []; ratio, advantages [B]; grads/{actor,critic}/<param> of the
    loss; pg_grads/actor/<param> of pg_loss alone."""
    agent = build_agent(fx)
    batch = {k: field(fx, k) for k in ("obs", "actions", "old_logprobs", "advantages", "returns", "values")}
    coefs = {k: field(fx, k) for k in ("clip_coef", "vf_coef", "ent_coef")}
    out, grads, pg_grads = losses_and_grads(agent, batch, coefs, variant)
    result = {k: numpy(v) for k, v in out.items()}
    result.update({f"grads/{k}": g for k, g in grads_of(grads).items()})
    result.update({f"pg_grads/actor/{k}": g for k, g in grads_of(pg_grads).items()})
    return result
