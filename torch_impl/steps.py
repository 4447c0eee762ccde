"""steps: one training step of each scenario, built once and called many times (torch eager).

What it teaches: the benchmark's view of a scenario. `scenario_step(name, fx)` does the
set-up (model from the fixture, optimizer, tensors) and returns a zero-argument callable
that performs exactly one step of what the scenario's `run` trains or differentiates:
forward, every gradient `run` computes, the optimizer update where there is one.
Gradient flow: each step's own, from torch_impl/<name>.py. The one detach added here is
on the returned loss, so that no graph outlives a step (tests/test_steps.py checks it).
Port note: the JAX twin (jax_impl/steps.py) calls the scenarios' jitted functions and
blocks until the result is ready; here every step is eager. Where a scenario function
returns canonical numpy gradients (multitask, gan, feature_stats, mixed_precision), that
host copy is part of the step, as it is of `run`.
Shapes: those of each scenario's fixture; every step returns a 0-d float32 loss.
Reference: PyTorch docs, "Autograd mechanics"; shared/bench.py (the timing harness).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from shared.fixtures import Fixture, require
from shared.registry import get
from shared.scenarios.grad_clipping import REGIMES
from shared.scenarios.tbptt import CELLS, window
from torch_impl import (
    actor_critic,
    attention_detach,
    basics,
    data_vs_detach,
    dqn_target,
    feature_stats,
    frozen_backbone,
    gan,
    grad_clipping,
    linear_regression,
    maml,
    mixed_precision,
    multitask,
    no_grad_inference,
    tbptt,
)
from torch_impl._common import grads_or_zeros, tensor

__all__ = ["STEPS", "scenario_step"]

Step = Callable[[], torch.Tensor]


def _basics(fx: Fixture, variant: str) -> Step:
    """d/dx of loss_via_z and of loss_total (both gradients of run); returns loss_total."""
    x = tensor(fx, "x", requires_grad=True)
    c, d = tensor(fx, "c"), tensor(fx, "d")

    def step() -> torch.Tensor:
        grads_or_zeros(basics.loss_via_z(x, c, variant), [x])
        loss = basics.loss_total(x, c, d, variant)
        grads_or_zeros(loss, [x])
        return loss.detach()

    return step


def _linear_regression(fx: Fixture, variant: str) -> Step:
    """Gradients of the squared error for w, b and x (no update: run takes none); returns the loss."""
    w, b, x = (tensor(fx, k, requires_grad=True) for k in ("w", "b", "x"))
    y = tensor(fx, "y")

    def step() -> torch.Tensor:
        loss = linear_regression.mse_loss(linear_regression.predict(w, b, x, variant), y)
        grads_or_zeros(loss, [w, b, x])
        return loss.detach()

    return step


def _frozen_backbone(fx: Fixture, variant: str) -> Step:
    """One AdamW train_step of the classifier; returns the cross-entropy before the update."""
    model = frozen_backbone.build_model(fx)
    optimizer = frozen_backbone.make_optimizer(model, fx, variant)
    x, labels = tensor(fx, "x"), tensor(fx, "labels")

    def step() -> torch.Tensor:
        return frozen_backbone.train_step(model, optimizer, x, labels, variant).detach()

    return step


def _multitask(fx: Fixture, variant: str) -> Step:
    """One backward of loss1 + loss2 (loss_and_grads, no update: run takes none); returns the total."""
    model = multitask.build_model(fx)
    x, y1, labels = tensor(fx, "x"), tensor(fx, "y1"), tensor(fx, "labels")

    def step() -> torch.Tensor:
        total, _, _ = multitask.loss_and_grads(model, x, y1, labels, variant)
        return total.detach()

    return step


def _dqn_target(fx: Fixture, variant: str) -> Step:
    """One SGD train_step of the online net (run's target updates are one-off, not per step); returns the TD loss."""
    online, target = dqn_target.build_networks(fx)
    optimizer = torch.optim.SGD(online.parameters(), lr=fx.scalar("lr"))
    batch = {k: tensor(fx, k) for k in ("obs", "actions", "rewards", "next_obs", "dones")}
    gamma = tensor(fx, "gamma")

    def step() -> torch.Tensor:
        loss, _, _ = dqn_target.train_step(online, target, optimizer, batch, gamma, variant)
        return loss.detach()

    return step


def _actor_critic(fx: Fixture, variant: str) -> Step:
    """Acting, A2C losses, the policy loss's critic gradient, the total's gradient (no update); returns the total."""
    model = actor_critic.build_model(fx)
    obs, actions, returns = tensor(fx, "obs"), tensor(fx, "actions"), tensor(fx, "returns")
    noise, vf_coef, ent_coef = tensor(fx, "noise"), fx.scalar("vf_coef"), fx.scalar("ent_coef")

    def step() -> torch.Tensor:
        # run does this inline (no public step function): the same calls, the gradients left in .grad
        logits, values = model(obs)
        actor_critic.select_actions(logits, noise)
        policy_loss, value_loss, entropy, _ = actor_critic.a2c_losses(logits, values, actions, returns, variant)
        loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
        grads_or_zeros(policy_loss, list(model.critic.parameters()), retain_graph=True)  # does it reach the critic?
        model.zero_grad(set_to_none=True)
        loss.backward()
        return loss.detach()

    return step


def _maml(fx: Fixture, variant: str) -> Step:
    """One meta-gradient: d/dθ, d/d support_y, per-task query gradients (no outer update); returns the meta-loss."""
    model = maml.build_model(fx)
    params = dict(model.named_parameters())
    support_y = tensor(fx, "support_y", requires_grad=True)
    tasks = (tensor(fx, "support_x"), support_y, tensor(fx, "query_x"), tensor(fx, "query_y"))
    alpha, steps = fx.scalar("alpha"), int(fx["inner_steps"])

    def step() -> torch.Tensor:
        # run does this inline (no public step function): the same calls, without the numpy outputs
        total, (losses, adapted) = maml.meta_loss(model, params, tasks, alpha, steps, variant)
        for t, params_t in enumerate(adapted):
            torch.autograd.grad(losses[t], list(params_t.values()), retain_graph=True)
        grads_or_zeros(total, [*params.values(), support_y])
        return total.detach()

    return step


def _attention_detach(fx: Fixture, variant: str) -> Step:
    """Backward of the attention head's squared error into the kernels and x (no update); returns the loss."""
    model = attention_detach.build_model(fx)
    x, mask, target = tensor(fx, "x", requires_grad=True), tensor(fx, "mask"), tensor(fx, "target")

    def step() -> torch.Tensor:
        model.zero_grad(set_to_none=True)  # backward accumulates: each step starts from no gradient, as run
        x.grad = None
        context, _ = model(x, mask, variant)
        loss = attention_detach.mse_loss(context, target)
        loss.backward()
        return loss.detach()

    return step


def _gan(fx: Fixture, variant: str) -> Step:
    """One discriminator_step then one generator_step (Adam each); returns L_D + L_G, each before its update."""
    model = gan.build_model(fx)
    d_opt, g_opt = gan.make_optimizers(model, fx)
    real, z = tensor(fx, "real"), tensor(fx, "z")

    def step() -> torch.Tensor:
        d_loss, _ = gan.discriminator_step(model, d_opt, real, z, variant)
        g_loss, _ = gan.generator_step(model, g_opt, z)
        return (d_loss + g_loss).detach()

    return step


def _tbptt(fx: Fixture, variant: str) -> Step:
    """Both cells, as run: per-window backward and d(last loss)/dx; returns the loss summed over steps and cells."""
    t_steps = fx.dims["T"]
    k = window(variant, t_steps)
    cells = [(tbptt.build_model(fx, cell), tensor(fx, "x", requires_grad=True)) for cell in CELLS]
    targets, h0 = tensor(fx, "targets"), tensor(fx, "h0")

    def step() -> torch.Tensor:
        # run does this inline (no public step function): the same calls, the gradients left in .grad
        total = torch.zeros((), dtype=targets.dtype)
        for model, x in cells:
            model.zero_grad(set_to_none=True)
            x.grad = None
            losses = [tbptt.step_loss(y, targets[t]) for t, y in enumerate(tbptt.unroll(model, x, h0, k))]
            torch.autograd.grad(losses[-1], x, retain_graph=True)
            for start in range(0, t_steps, k):  # one backward per window, as a TBPTT training loop does
                torch.stack(losses[start : start + k]).sum().backward()
            total = total + torch.stack(losses).sum().detach()
        return total

    return step


def _grad_clipping(fx: Fixture, variant: str) -> Step:
    """One window's train_step (clip, SGD) in regime "above"; calls walk the windows, carrying h; returns its loss."""
    model = grad_clipping.build_model(fx)
    optimizer = torch.optim.SGD(model.parameters(), lr=fx.scalar("lr"))
    r, k = REGIMES.index("above"), int(fx["window"])  # "above": the gradient norm exceeds max_norm, clipping acts
    max_norm, weight = float(fx["max_norm"][r]), fx.scalar("loss_weight")
    x, targets, masks = tensor(fx, "x"), tensor(fx, "targets"), tensor(fx, "mask")
    windows = [(x[s : s + k], targets[s : s + k], masks[r, s : s + k]) for s in range(0, x.shape[0], k)]
    h0 = tensor(fx, "h0")
    h, i = h0, 0

    def step() -> torch.Tensor:
        nonlocal h, i
        stats, h = grad_clipping.train_step(model, optimizer, h, *windows[i], max_norm, weight)
        i = (i + 1) % len(windows)
        if i == 0:
            h = h0  # the next pass over the sequence starts again from h0, as run's loop does
        return stats[0].detach()

    return step


def _no_grad_inference(fx: Fixture, variant: str) -> Step:
    """The validation pass (validate: forward and loss, no gradient); returns the validation loss."""
    model = no_grad_inference.build_model(fx)
    x, labels = tensor(fx, "x"), tensor(fx, "labels")

    def step() -> torch.Tensor:
        _, loss = no_grad_inference.validate(model, x, labels, variant)
        return loss  # validate records no graph in any variant: nothing to detach

    return step


def _feature_stats(fx: Fixture, variant: str) -> Step:
    """One monitored train_step: gradients and the stopped feature statistics (no update); returns the loss."""
    model = feature_stats.build_model(fx)
    x, y = tensor(fx, "x"), tensor(fx, "y")

    def step() -> torch.Tensor:
        loss, _, _ = feature_stats.train_step(model, x, y, variant)
        return loss.detach()

    return step


def _mixed_precision(fx: Fixture, variant: str) -> Step:
    """One loss-scaled bf16 train_step (Adam, scale update), no injected overflow; returns the unscaled loss."""
    x, y = tensor(fx, "x"), tensor(fx, "y")
    model = mixed_precision.build_model(fx)
    optimizer, scaler = mixed_precision.make_optimizer(model, fx, variant), mixed_precision.make_scaler(fx, variant)

    def step() -> torch.Tensor:
        loss, _, _ = mixed_precision.train_step(model, optimizer, scaler, x, y, 1.0)
        return loss.detach()

    return step


def _data_vs_detach(fx: Fixture, variant: str) -> Step:
    """One step (σ forward, the zero write spelled `variant`, d loss / dx); returns the loss."""
    x = tensor(fx, "x", requires_grad=True)
    c = tensor(fx, "c")

    def step() -> torch.Tensor:
        loss, _, _, _, _ = data_vs_detach.step(x, c, variant)
        return loss.detach()

    return step


STEPS: dict[str, Callable[[Fixture, str], Step]] = {
    "basics": _basics,
    "linear_regression": _linear_regression,
    "frozen_backbone": _frozen_backbone,
    "multitask": _multitask,
    "dqn_target": _dqn_target,
    "actor_critic": _actor_critic,
    "maml": _maml,
    "attention_detach": _attention_detach,
    "gan": _gan,
    "tbptt": _tbptt,
    "grad_clipping": _grad_clipping,
    "no_grad_inference": _no_grad_inference,
    "feature_stats": _feature_stats,
    "mixed_precision": _mixed_precision,
    "data_vs_detach": _data_vs_detach,
}


def scenario_step(name: str, fx: Fixture, variant: str | None = None) -> Step:
    """Set up one scenario and return its training step: a zero-argument callable.

    Args:
      name: a scenario of family "scenarios" (a key of STEPS).
      fx: that scenario's float32 Fixture (shared.fixtures.make(name, "float32", ...)).
      variant: one of the scenario's variants; None means its first (recommended) one.
    Returns:
      step() -> 0-d float32 tensor, no graph: one step's loss, before that step's update
      (what each step is and which loss: the docstrings of the builders in STEPS). Every
      call takes one more step: parameters, optimizer state and carries advance.
    Raises:
      ValueError: unknown name; fx not a Fixture of `name` or not float32; unknown variant.
    """
    if name not in STEPS:
        raise ValueError(f"scenario_step: name expected one of {list(STEPS)}, got {name!r}")
    require(fx, name, "float32", "scenario_step")  # float32 only: JAX would need x64 on for the step's lifetime
    spec = get(name)
    variant = spec.variants[0] if variant is None else spec.check_variant(variant)
    return STEPS[name](fx, variant)
