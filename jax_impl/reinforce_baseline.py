"""reinforce_baseline: REINFORCE with a learned baseline; the baseline is a constant for the policy loss.

Gradient flow: policy_loss -> policy only (δ = G − b(s) stopped); baseline_loss -> baseline
only. baseline_not_stopped drops the stop: the policy loss also trains the baseline.
Port note: `(returns - b).detach()` inside the policy loss becomes rlax.policy_gradient_loss(
logits, a, returns - b, w, use_stop_gradient=True): rlax stops the advantage itself (the flag
is the stop). The returns are data, a reversed cumulative sum in torch and
rlax.discounted_returns in JAX; neither needs a stop.
Shapes: T time steps of one episode, D observation features, H hidden units, A actions.
Reference: Williams 1992, doi:10.1007/BF00992696; Sutton & Barto 2018, "Reinforcement Learning:
An Introduction", ch. 13.4 (REINFORCE with baseline); rlax policy_gradients.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import rlax
from flax import nnx

from ..shared.core.checks import check_rank, check_same_shape, check_variant
from ._common import MLP, field, grads_of, load_params, numpy, scenario_run

__all__ = ["PolicyBaseline", "build_model", "discounted_returns", "reinforce_losses", "losses_and_grads", "run"]


class PolicyBaseline(nnx.Module):
    """Separate networks: logits [T, A] = policy(obs), baselines [T] = baseline(obs)."""

    def __init__(self, d: int, h: int, a: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.policy = MLP(d, h, a, dtype, rngs)
        self.baseline = MLP(d, h, 1, dtype, rngs)

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.policy(obs), self.baseline(obs).squeeze(-1)


def build_model(fx) -> PolicyBaseline:
    """A PolicyBaseline loaded with the fixture's canonical parameters (dtype of the fixture)."""
    params = fx.under("params")
    d, h, a = fx.dims["D"], fx.dims["H"], fx.dims["A"]
    return load_params(nnx.eval_shape(lambda: PolicyBaseline(d, h, a, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def discounted_returns(rewards: jax.Array, gamma: jax.Array) -> jax.Array:
    """G [T] of rewards [T]: G_t = r_t + γ·G_{t+1}, G_T = 0 (Monte Carlo returns of one episode).

    Raises ValueError unless rewards is 1-D.
    """
    check_rank("discounted_returns", "rewards", rewards.shape, "T")
    return rlax.discounted_returns(rewards, gamma * jnp.ones_like(rewards), jnp.zeros((), rewards.dtype))


def reinforce_losses(
    logits: jax.Array,
    baselines: jax.Array,
    actions: jax.Array,
    returns: jax.Array,
    gamma: jax.Array,
    variant: str,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(policy_loss, baseline_loss, advantages [T]) of logits [T, A], baselines [T], int actions [T], returns [T].

    policy_loss = −mean_t(γ^t·log π(a_t|s_t)·δ_t), δ = G − b stopped unless "baseline_not_stopped";
    baseline_loss = 0.5·mean(δ²).
    Raises:
      ValueError: baselines, returns and actions differ in shape (e.g. baselines [T, 1]), logits is
        not [T, A] with the same T, or an unknown variant.
    Reference: Williams 1992; Sutton & Barto 2018, ch. 13.4; rlax.policy_gradient_loss.
    """
    check_variant("reinforce_baseline", variant)
    shapes = {"baselines": baselines.shape, "returns": returns.shape, "actions": actions.shape}
    check_same_shape("reinforce_losses", **shapes)
    check_rank("reinforce_losses", "logits", logits.shape, "TA")
    check_same_shape("reinforce_losses", returns=returns.shape, logits_steps=logits.shape[:1])
    advantages = returns - baselines  # [T]
    stop = variant != "baseline_not_stopped"
    weights = gamma ** jnp.arange(returns.shape[0], dtype=returns.dtype)  # γ^t [T]
    policy_loss = rlax.policy_gradient_loss(
        logits, actions, advantages, weights, use_stop_gradient=stop
    )  # GRAD-FLOW: the policy loss must not train the baseline
    baseline_loss = 0.5 * jnp.mean((returns - baselines) ** 2)
    return policy_loss, baseline_loss, advantages


@nnx.jit(static_argnames="variant")
def losses_and_grads(model: PolicyBaseline, batch: dict, gamma: jax.Array, variant: str):
    """(total [], (policy_loss, baseline_loss, returns [T], advantages [T]), gradient State of the total,
    baseline gradient State of the policy loss alone), jitted."""

    def loss_fn(model: PolicyBaseline):
        returns = discounted_returns(batch["rewards"], gamma)
        logits, baselines = model(batch["obs"])
        policy_loss, baseline_loss, advantages = reinforce_losses(
            logits, baselines, batch["actions"], returns, gamma, variant
        )
        return policy_loss + baseline_loss, (policy_loss, baseline_loss, returns, advantages)

    policy_grads = nnx.grad(lambda m: loss_fn(m)[1][0])(model)  # the policy loss alone: does it reach the baseline?
    (loss, aux), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    return loss, aux, grads, policy_grads["baseline"]


@scenario_run("reinforce_baseline")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, policy_loss, baseline_loss []; returns, advantages [T]; grads/{policy,baseline}/<param>
    of the total; policy_grads/baseline/<param> of the policy loss alone."""
    model = build_model(fx)
    batch = {k: field(fx, k) for k in ("obs", "actions", "rewards")}
    loss, aux, grads, policy_grads = losses_and_grads(model, batch, field(fx, "gamma"), variant)
    policy_loss, baseline_loss, returns, advantages = aux
    out = {"loss": numpy(loss), "policy_loss": numpy(policy_loss), "baseline_loss": numpy(baseline_loss)}
    out.update(returns=numpy(returns), advantages=numpy(advantages))
    out.update({f"grads/{k}": g for k, g in grads_of(grads).items()})
    out.update({f"policy_grads/baseline/{k}": g for k, g in grads_of(policy_grads).items()})
    return out
