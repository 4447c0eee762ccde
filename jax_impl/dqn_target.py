"""dqn_target: DQN TD targets, who gets the gradient, one SGD step, soft and hard target updates.

Gradient flow: loss -> Q_online(s, a) only; y = r + γ·(1 − done)·v(s′) is stopped,
so neither the target network nor the online network's Q(s′) gets a gradient.
residual_gradient drops the stop: the gradient also flows through Q_online(s′, a*).
Port note: `.detach()` becomes `jax.lax.stop_gradient`; `target_p.lerp_(online_p, τ)`
under torch.no_grad() becomes optax.incremental_update(new_tensors=online,
old_tensors=target, step_size=τ) (online first, P17). At a tie, jnp.max splits the
gradient equally among the maxima while torch's q.max(1).values gives it all to the
first: this port pins argmax + take_along_axis on both sides.
Shapes: B transitions, D observation features, H hidden units, A actions.
Reference: Mnih et al. 2015, doi:10.1038/nature14236; van Hasselt et al. 2016,
arXiv:1509.06461 (double DQN); Baird 1995 (residual gradient).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_rank, check_same_shape, check_scalar, check_values, check_variant, check_x64
from ._common import StepCall, field, grads_of, load_params, numpy, params_of, scenario_run, scenario_step, step_of

__all__ = [
    "QNetwork",
    "build_networks",
    "greedy",
    "td_targets",
    "td_loss",
    "train_step",
    "soft_update",
    "step_calls",
    "make_step",
    "run",
]


class QNetwork(nnx.Module):
    """Q(obs [B, D]) [B, A] = l2(tanh(l1(obs)))."""

    def __init__(self, d: int, h: int, a: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.l2 = nnx.Linear(h, a, param_dtype=dtype, rngs=rngs)

    def __call__(self, obs: jax.Array) -> jax.Array:
        return self.l2(jnp.tanh(self.l1(obs)))


def build_networks(fx) -> tuple[QNetwork, QNetwork]:
    """(online, target) Q-networks loaded with the fixture's canonical parameters.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_networks", fx.dtype, jax.config.jax_enable_x64)
    d, h, a = fx.dims["D"], fx.dims["H"], fx.dims["A"]
    nets = []
    for net in ("online", "target"):
        params = fx.under(f"params/{net}")
        nets.append(load_params(nnx.eval_shape(lambda: QNetwork(d, h, a, jnp.dtype(fx.dtype), nnx.Rngs(0))), params))
    return nets[0], nets[1]


def greedy(q: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(max_a q [B], argmax_a q [B] int) of q [B, A]; at a tie value and gradient go to the first maximal index.

    The same as torch's q.max(1); unlike jnp.max / torch.amax, which split a tie's gradient equally.
    """
    a_star = jnp.argmax(q, axis=1)  # [B], first maximal index
    return jnp.take_along_axis(q, a_star[:, None], axis=1).squeeze(1), a_star


def td_targets(online: QNetwork, target: QNetwork, batch: dict, gamma: jax.Array, variant: str) -> jax.Array:
    """y [B] = r + γ·(1 − done)·v(s′) (v per variant, see the scenario); stopped unless residual_gradient.

    Args: batch with rewards [B], dones [B] in {0, 1}, next_obs [B, D]; gamma in [0, 1].
    Raises:
      ValueError: rewards not [B] (a [B, 1] reward broadcasts y to [B, B]), dones of another shape,
        γ outside [0, 1], or a done outside {0, 1} (values are checked when concrete, not under jit).
    """
    check_variant("dqn_target", variant)
    rewards, dones = batch["rewards"], batch["dones"]
    check_rank("td_targets", "rewards", rewards.shape, "B")  # [B, 1] would broadcast y to [B, B] (P14)
    check_same_shape("td_targets", rewards=rewards.shape, dones=dones.shape)
    check_scalar("td_targets", "gamma", gamma, 0.0, 1.0)
    check_values("td_targets", "dones", dones, choices=(0.0, 1.0))
    next_obs = batch["next_obs"]
    if variant == "target_network":
        v, _ = greedy(target(next_obs))
    elif variant == "double_dqn":
        _, a_star = greedy(online(next_obs))  # chosen by the online network, evaluated by the target
        v = jnp.take_along_axis(target(next_obs), a_star[:, None], axis=1).squeeze(1)
    else:
        v, _ = greedy(online(next_obs))
    check_same_shape("td_targets", rewards=rewards.shape, next_values=v.shape)
    y = rewards + gamma * (1.0 - dones) * v  # [B]
    if variant != "residual_gradient":
        y = jax.lax.stop_gradient(y)  # GRAD-FLOW: TD target is a constant for the online net
    return y


def td_loss(q_sa: jax.Array, y: jax.Array) -> jax.Array:
    """0.5 · mean((y − Q(s, a))²) of q_sa [B] and y [B].

    Raises:
      ValueError: q_sa and y differ in shape, e.g. [B, 1] vs [B], which would broadcast to [B, B] (P14).
    Reference: Mnih et al. 2015.
    """
    check_same_shape("td_loss", q=q_sa.shape, target=y.shape)
    return 0.5 * jnp.mean((y - q_sa) ** 2)


@nnx.jit(static_argnames="variant")
def train_step(online: QNetwork, target: QNetwork, optimizer: nnx.Optimizer, batch: dict, gamma, variant: str):
    """One SGD step of the online network; returns (loss, δ [B], y [B], online grads, target grads)."""
    check_variant("dqn_target", variant)

    def loss_fn(online: QNetwork, target: QNetwork) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        q_sa = jnp.take_along_axis(online(batch["obs"]), batch["actions"][:, None], axis=1).squeeze(1)  # [B]
        y = td_targets(online, target, batch, gamma, variant)
        return td_loss(q_sa, y), (y - q_sa, y)

    (loss, (td, y)), (g_online, g_target) = nnx.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(online, target)
    optimizer.update(online, g_online)
    return loss, td, y, g_online, g_target


def soft_update(online: nnx.Module, target: nnx.Module, tau: float) -> nnx.Module:
    """target ← τ·online + (1 − τ)·target, in place; returns target. Reference: Lillicrap et al. 2016, arXiv:1509.02971.

    Raises ValueError unless tau is a number in [0, 1].
    """
    check_scalar("soft_update", "tau", tau, 0.0, 1.0)
    online_p, target_p = nnx.state(online, nnx.Param), nnx.state(target, nnx.Param)
    # GRAD-FLOW: a target update is a parameter write, outside any graph
    nnx.update(target, optax.incremental_update(new_tensors=online_p, old_tensors=target_p, step_size=tau))
    return target


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one SGD train_step of the online net (run's target updates are one-off, not per step)."""
    online, target = build_networks(fx)
    optimizer = nnx.Optimizer(online, optax.sgd(fx.scalar("lr")), wrt=nnx.Param)
    batch = {k: field(fx, k) for k in ("obs", "actions", "rewards", "next_obs", "dones")}
    return [StepCall(train_step, (online, target, optimizer), (batch, field(fx, "gamma")), {"variant": variant})]


@scenario_step("dqn_target")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One SGD train_step of the online net; returns the TD loss before the update."""
    return step_of(step_calls(fx, variant))


@scenario_run("dqn_target")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; td_errors, td_targets [B]; grads/{online,target}/<param>; params/{online,target_soft,target_hard}/<param>."""
    online, target = build_networks(fx)
    optimizer = nnx.Optimizer(online, optax.sgd(fx.scalar("lr")), wrt=nnx.Param)
    batch = {k: field(fx, k) for k in ("obs", "actions", "rewards", "next_obs", "dones")}
    loss, td, y, g_online, g_target = train_step(online, target, optimizer, batch, field(fx, "gamma"), variant)
    out = {"loss": numpy(loss), "td_errors": numpy(td), "td_targets": numpy(y)}
    for net, grads in (("online", g_online), ("target", g_target)):
        out.update({f"grads/{net}/{k}": g for k, g in grads_of(grads).items()})  # stopped: zeros, not missing (P11)
    hard = nnx.clone(target)
    nnx.update(hard, nnx.state(online, nnx.Param))  # hard copy
    soft = soft_update(online, nnx.clone(target), fx.scalar("tau"))
    for name, module in (("online", online), ("target_soft", soft), ("target_hard", hard)):
        out.update({f"params/{name}/{k}": v for k, v in params_of(module).items()})
    return out
