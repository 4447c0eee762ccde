"""actor_critic: advantage actor-critic losses with a stopped advantage, and Gumbel-max acting.

Gradient flow: policy_loss -> actor only (the advantage R − V is stopped);
value_loss -> critic; entropy -> actor. Acting reads stopped logits.
Port note: `.detach()` becomes `jax.lax.stop_gradient`; torch.no_grad() around the
acting forward has no JAX twin: nothing is recorded outside jax.grad anyway.
torch.argmax returns int64, jnp.argmax int32 unless x64: actions are output as int64.
Shapes: B samples, D observation features, H hidden units, A actions.
Reference: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning", arXiv:1602.01783.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_rank, check_same_shape, check_values, check_variant, check_x64
from ._common import MLP, StepCall, field, grads_of, load_params, numpy, scenario_run, scenario_step, step_of

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


class ActorCritic(nnx.Module):
    """Separate networks (no shared trunk): logits [B, A] = actor(obs), values [B] = critic(obs)."""

    def __init__(self, d: int, h: int, a: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.actor = MLP(d, h, a, dtype, rngs)
        self.critic = MLP(d, h, 1, dtype, rngs)

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.actor(obs), self.critic(obs).squeeze(-1)


def build_model(fx) -> ActorCritic:
    """An ActorCritic loaded with the fixture's canonical parameters (dtype of the fixture).

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under("params")
    d, h, a = fx.dims["D"], fx.dims["H"], fx.dims["A"]
    return load_params(nnx.eval_shape(lambda: ActorCritic(d, h, a, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def select_actions(logits: jax.Array, noise: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Gumbel-max sample of softmax(logits [B, A]) with uniform noise [B, A] in (0, 1).

    Returns (int actions [B], their log-probabilities [B]), both constants: what a rollout stores.

    Raises:
      ValueError: logits and noise differ in shape, or a noise value is outside (0, 1) (log(−log u) is
        not finite there).
    Reference: Gumbel 1954; Maddison et al. 2014, arXiv:1411.0030.
    """
    check_same_shape("select_actions", logits=logits.shape, noise=noise.shape)
    check_values("select_actions", "noise", noise, low=0.0, high=1.0, low_open=True, high_open=True)
    logits = jax.lax.stop_gradient(logits)  # GRAD-FLOW: acting needs no graph
    actions = jnp.argmax(logits - jnp.log(-jnp.log(noise)), axis=-1)  # [B]
    return actions, jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), actions[:, None], axis=1).squeeze(1)


def a2c_losses(
    logits: jax.Array, values: jax.Array, actions: jax.Array, returns: jax.Array, variant: str
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(policy_loss, value_loss, entropy, advantages [B]) of logits [B, A], values [B], int actions [B], returns [B].

    policy_loss = −mean(log π(a|s)·A), A = R − V stopped unless "advantage_not_stopped";
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
        advantages = jax.lax.stop_gradient(advantages)  # GRAD-FLOW: the policy loss must not push the critic
    logp = jax.nn.log_softmax(logits, axis=-1)  # [B, A]
    logp_a = jnp.take_along_axis(logp, actions[:, None], axis=1).squeeze(1)  # [B]
    policy_loss = -jnp.mean(logp_a * advantages)
    value_loss = jnp.mean((returns - values) ** 2)
    entropy = jnp.mean(-jnp.sum(jnp.exp(logp) * logp, axis=-1))
    return policy_loss, value_loss, entropy, advantages


@nnx.jit(static_argnames="variant")
def losses_and_grads(model: ActorCritic, batch: dict, vf_coef: jax.Array, ent_coef: jax.Array, variant: str):
    """Acting and one gradient of the A2C total: (total [], (policy_loss, value_loss, entropy, advantages [B],
    (actions [B], log π(a) [B])), gradient State of the total, critic gradient State of the policy loss alone)."""

    def loss_fn(model: ActorCritic):
        logits, values = model(batch["obs"])
        policy_loss, value_loss, entropy, advantages = a2c_losses(
            logits, values, batch["actions"], batch["returns"], variant
        )
        loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
        return loss, (policy_loss, value_loss, entropy, advantages, select_actions(logits, batch["noise"]))

    policy_grads = nnx.grad(lambda m: loss_fn(m)[1][0])(model)  # the policy loss alone: does it reach the critic?
    (loss, aux), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    return loss, aux, grads, policy_grads["critic"]


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one losses_and_grads of a model built from the fixture (no update; the total first)."""
    model = build_model(fx)
    batch = {k: field(fx, k) for k in ("obs", "actions", "returns", "noise")}
    coefs = field(fx, "vf_coef"), field(fx, "ent_coef")
    return [StepCall(losses_and_grads, (model,), (batch, *coefs), {"variant": variant})]


@scenario_step("actor_critic")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """Acting, A2C losses, the policy loss's critic gradient, the total's gradient (no update); returns the total."""
    return step_of(step_calls(fx, variant))


@scenario_run("actor_critic")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, policy_loss, value_loss, entropy []; advantages, selected_logp [B]; selected_actions [B] int64;
    grads/{actor,critic}/<param> of the total; policy_grads/critic/<param> of the policy loss alone."""
    model = build_model(fx)
    batch = {k: field(fx, k) for k in ("obs", "actions", "returns", "noise")}
    coefs = field(fx, "vf_coef"), field(fx, "ent_coef")
    loss, aux, grads, policy_grads = losses_and_grads(model, batch, *coefs, variant)
    policy_loss, value_loss, entropy, advantages, (selected, selected_logp) = aux
    out = {"loss": numpy(loss), "policy_loss": numpy(policy_loss), "value_loss": numpy(value_loss)}
    out.update(entropy=numpy(entropy), advantages=numpy(advantages), selected_logp=numpy(selected_logp))
    out["selected_actions"] = numpy(selected).astype(np.int64)
    out.update({f"grads/{k}": g for k, g in grads_of(grads).items()})
    out.update({f"policy_grads/critic/{k}": g for k, g in grads_of(policy_grads).items()})
    return out
