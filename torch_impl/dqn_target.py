"""dqn_target: DQN TD targets, who gets the gradient, one SGD step, soft and hard target updates.

Gradient flow: loss -> Q_online(s, a) only; y = r + γ·(1 − done)·v(s′) is detached,
so neither the target network nor the online network's Q(s′) gets a gradient.
residual_gradient drops the detach: the gradient also flows through Q_online(s′, a*).
Port note: `.detach()` becomes `jax.lax.stop_gradient`; `target_p.lerp_(online_p, τ)`
under torch.no_grad() becomes optax.incremental_update(new_tensors=online,
old_tensors=target, step_size=τ) (online first, P17). At a tie, `q.max(1).values`
sends the gradient to the first maximal index but torch.amax and jnp.max split it:
this port pins argmax + gather on both sides.
Shapes: B transitions, D observation features, H hidden units, A actions.
Reference: Mnih et al. 2015, doi:10.1038/nature14236; van Hasselt et al. 2016,
arXiv:1509.06461 (double DQN); Baird 1995 (residual gradient).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_rank, check_same_shape, check_scalar, check_values, check_variant
from ._common import StepCall, field, numpy, scenario_run, scenario_step, step_of
from ._layout import grads_of, load_params, params_of

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


class QNetwork(nn.Module):
    """Q(obs [B, D]) [B, A] = l2(tanh(l1(obs)))."""

    def __init__(self, d: int, h: int, a: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(d, h, dtype=dtype)
        self.l2 = nn.Linear(h, a, dtype=dtype)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(obs)))


def build_networks(fx) -> tuple[QNetwork, QNetwork]:
    """(online, target) Q-networks loaded with the fixture's canonical parameters."""
    d, h, a = fx.dims["D"], fx.dims["H"], fx.dims["A"]
    nets = []
    for net in ("online", "target"):
        params = fx.under(f"params/{net}")
        nets.append(load_params(QNetwork(d, h, a, getattr(torch, fx.dtype)), params))
    return nets[0], nets[1]


def greedy(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(max_a q [B], argmax_a q [B] int64) of q [B, A]; at a tie value and gradient go to the first maximal index.

    The same as q.max(1) in torch; unlike torch.amax / jnp.max, which split a tie's gradient equally.
    """
    a_star = q.argmax(dim=1)  # [B], first maximal index
    return q.gather(1, a_star[:, None]).squeeze(1), a_star


def td_targets(online: QNetwork, target: QNetwork, batch: dict, gamma: torch.Tensor, variant: str) -> torch.Tensor:
    """y [B] = r + γ·(1 − done)·v(s′) (v per variant, see the scenario); detached unless residual_gradient.

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
        v = target(next_obs).gather(1, a_star[:, None]).squeeze(1)
    else:
        v, _ = greedy(online(next_obs))
    check_same_shape("td_targets", rewards=rewards.shape, next_values=v.shape)
    y = rewards + gamma * (1.0 - dones) * v  # [B]
    if variant != "residual_gradient":
        y = y.detach()  # GRAD-FLOW: TD target is a constant for the online net
    return y


def td_loss(q_sa: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """0.5 · mean((y − Q(s, a))²) of q_sa [B] and y [B].

    Raises:
      ValueError: q_sa and y differ in shape, e.g. [B, 1] vs [B], which would broadcast to [B, B] (P14).
    Reference: Mnih et al. 2015.
    """
    check_same_shape("td_loss", q=q_sa.shape, target=y.shape)
    return 0.5 * torch.mean((y - q_sa) ** 2)


def train_step(
    online: QNetwork, target: QNetwork, optimizer: torch.optim.Optimizer, batch: dict, gamma, variant: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One SGD step of the online network; returns (loss, δ [B], y [B]) before the step. `.grad` keeps the gradients."""
    check_variant("dqn_target", variant)
    optimizer.zero_grad(set_to_none=True)
    target.zero_grad(set_to_none=True)
    q_sa = online(batch["obs"]).gather(1, batch["actions"][:, None]).squeeze(1)  # [B]
    y = td_targets(online, target, batch, gamma, variant)
    loss = td_loss(q_sa, y)
    loss.backward()
    optimizer.step()
    return loss, y - q_sa, y


def soft_update(online: nn.Module, target: nn.Module, tau: float) -> nn.Module:
    """target ← τ·online + (1 − τ)·target, in place; returns target. Reference: Lillicrap et al. 2016, arXiv:1509.02971.

    Raises ValueError unless tau is a number in [0, 1].
    """
    check_scalar("soft_update", "tau", tau, 0.0, 1.0)
    # GRAD-FLOW: a target update is a parameter write, outside any graph
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            t.lerp_(o, tau)
    return target


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one SGD train_step of the online net (run's target updates are one-off, not per step)."""
    online, target = build_networks(fx)
    optimizer = torch.optim.SGD(online.parameters(), lr=fx.scalar("lr"))
    batch = {k: field(fx, k) for k in ("obs", "actions", "rewards", "next_obs", "dones")}
    return [StepCall(train_step, (online, target, optimizer), (batch, field(fx, "gamma")), {"variant": variant})]


@scenario_step("dqn_target")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """One SGD train_step of the online net; returns the TD loss before the update."""
    return step_of(step_calls(fx, variant))


@scenario_run("dqn_target")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; td_errors, td_targets [B]; grads/{online,target}/<param>; params/{online,target_soft,target_hard}/<param>."""
    online, target = build_networks(fx)
    optimizer = torch.optim.SGD(online.parameters(), lr=fx.scalar("lr"))
    batch = {k: field(fx, k) for k in ("obs", "actions", "rewards", "next_obs", "dones")}
    loss, td, y = train_step(online, target, optimizer, batch, field(fx, "gamma"), variant)
    out = {"loss": numpy(loss), "td_errors": numpy(td), "td_targets": numpy(y)}
    for net, module in (("online", online), ("target", target)):
        out.update({f"grads/{net}/{k}": g for k, g in grads_of(module).items()})  # .grad None -> 0 (P11)
    hard = copy.deepcopy(target)
    hard.load_state_dict(online.state_dict())  # hard copy
    soft = soft_update(online, copy.deepcopy(target), fx.scalar("tau"))
    for name, module in (("online", online), ("target_soft", soft), ("target_hard", hard)):
        out.update({f"params/{name}/{k}": v for k, v in params_of(module).items()})
    return out
