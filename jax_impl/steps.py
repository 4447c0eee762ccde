"""steps: one training step of each scenario, built once and called many times (JAX jit).

What it teaches: the benchmark's view of a scenario. `scenario_step(name, fx)` does the
set-up (model from the fixture, optimizer, arrays) and returns a zero-argument callable
that performs exactly one step of what the scenario's `run` trains or differentiates:
forward, every gradient `run` computes, the optimizer update where there is one.
Gradient flow: each step's own, from jax_impl/<name>.py; nothing here stops anything.
Port note: every step calls the scenario's own jitted functions (nnx.jit / jax.jit,
compiled on the first call) and returns after jax.block_until_ready on all they return.
nnx.jit writes the updated model and optimizer back as outputs of that same execution,
so they are ready with the loss; blocking on nnx.state(...) as well would add a graph
traversal (0.1-0.4 ms on CPU) to every step. The torch twin (torch_impl/steps.py) is eager.
Shapes: those of each scenario's fixture; every step returns a 0-d float32 loss.
Reference: JAX docs, "Asynchronous dispatch" (jax.block_until_ready); shared/bench.py.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jax_impl import (
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
from jax_impl._common import array
from shared.fixtures import Fixture, require
from shared.registry import get
from shared.scenarios.grad_clipping import REGIMES
from shared.scenarios.tbptt import CELLS, window

__all__ = ["STEPS", "scenario_step"]

Step = Callable[[], jax.Array]

# basics jits jax.grad of each loss, which drops the value; the step also returns loss_total,
# so it takes value_and_grad of the scenario's own loss_total (one compile per variant, module-wide)
_basics_value_and_grad_total = jax.jit(jax.value_and_grad(basics.loss_total), static_argnames="variant")


def _basics(fx: Fixture, variant: str) -> Step:
    """d/dx of loss_via_z and of loss_total (both gradients of run); returns loss_total."""
    x = array(fx, "x")
    c, d = array(fx, "c"), array(fx, "d")

    def step() -> jax.Array:
        g_via_z = basics._grad_via_z(x, c, variant)
        loss, g_total = _basics_value_and_grad_total(x, c, d, variant)

        return jax.block_until_ready((loss, g_via_z, g_total))[0]

    return step


def _linear_regression(fx: Fixture, variant: str) -> Step:
    """Gradients of the squared error for w, b and x (no update: run takes none); returns the loss."""
    w, b, x = (array(fx, k) for k in ("w", "b", "x"))
    y = array(fx, "y")

    def step() -> jax.Array:
        loss, grads = linear_regression._value_and_grads(w, b, x, y, variant)

        return jax.block_until_ready((loss, grads))[0]

    return step


def _frozen_backbone(fx: Fixture, variant: str) -> Step:
    """One AdamW train_step of the classifier; returns the cross-entropy before the update."""
    model = frozen_backbone.build_model(fx)
    optimizer = frozen_backbone.make_optimizer(model, fx, variant)
    x, labels = array(fx, "x"), array(fx, "labels")

    def step() -> jax.Array:
        return jax.block_until_ready(frozen_backbone.train_step(model, optimizer, x, labels, variant))[0]

    return step


def _multitask(fx: Fixture, variant: str) -> Step:
    """One backward of loss1 + loss2 (loss_and_grads, no update: run takes none); returns the total."""
    model = multitask.build_model(fx)
    x, y1, labels = array(fx, "x"), array(fx, "y1"), array(fx, "labels")

    def step() -> jax.Array:
        return jax.block_until_ready(multitask.loss_and_grads(model, x, y1, labels, variant))[0]

    return step


def _dqn_target(fx: Fixture, variant: str) -> Step:
    """One SGD train_step of the online net (run's target updates are one-off, not per step); returns the TD loss."""
    online, target = dqn_target.build_networks(fx)
    optimizer = nnx.Optimizer(online, optax.sgd(fx.scalar("lr")), wrt=nnx.Param)
    batch = {k: array(fx, k) for k in ("obs", "actions", "rewards", "next_obs", "dones")}
    gamma = array(fx, "gamma")

    def step() -> jax.Array:
        return jax.block_until_ready(dqn_target.train_step(online, target, optimizer, batch, gamma, variant))[0]

    return step


def _actor_critic(fx: Fixture, variant: str) -> Step:
    """Acting, A2C losses, the policy loss's critic gradient, the total's gradient (no update); returns the total."""
    model = actor_critic.build_model(fx)
    batch = {k: array(fx, k) for k in ("obs", "actions", "returns", "noise")}
    vf_coef, ent_coef = array(fx, "vf_coef"), array(fx, "ent_coef")

    def step() -> jax.Array:
        # run's jitted _step: acting, the losses, the total's gradient and the policy loss's gradient
        return jax.block_until_ready(actor_critic._step(model, batch, vf_coef, ent_coef, variant))[0]

    return step


def _maml(fx: Fixture, variant: str) -> Step:
    """One meta-gradient: d/dθ, d/d support_y, per-task query gradients (no outer update); returns the meta-loss."""
    graphdef, params = nnx.split(maml.build_model(fx))

    tasks = tuple(array(fx, k) for k in ("support_x", "support_y", "query_x", "query_y"))
    alpha, steps = array(fx, "alpha"), int(fx["inner_steps"])

    def step() -> jax.Array:
        # run's jitted _meta_step returns the per-task losses [T]; the meta-loss is their sum, as meta_loss's
        out = maml._meta_step(graphdef, params, tasks, alpha, steps, variant)
        return jax.block_until_ready((jnp.sum(out[0]), out))[0]

    return step


def _attention_detach(fx: Fixture, variant: str) -> Step:
    """Backward of the attention head's squared error into the kernels and x (no update); returns the loss."""
    model = attention_detach.build_model(fx)
    x, mask, target = array(fx, "x"), array(fx, "mask"), array(fx, "target")

    def step() -> jax.Array:
        (loss, _), grads = attention_detach._grads(model, x, mask, target, variant)

        return jax.block_until_ready((loss, grads))[0]

    return step


def _gan(fx: Fixture, variant: str) -> Step:
    """One discriminator_step then one generator_step (Adam each); returns L_D + L_G, each before its update."""
    model = gan.build_model(fx)
    d_opt, g_opt = gan.make_optimizers(model, fx)
    real, z = array(fx, "real"), array(fx, "z")

    def step() -> jax.Array:
        d_loss, d_grads = gan.discriminator_step(model, d_opt, real, z, variant)
        g_loss, g_grads = gan.generator_step(model, g_opt, z)
        return jax.block_until_ready((d_loss + g_loss, d_grads, g_grads))[0]

    return step


def _tbptt(fx: Fixture, variant: str) -> Step:
    """Both cells, as run: per-window backward and d(last loss)/dx; returns the loss summed over steps and cells."""
    t_steps = fx.dims["T"]
    k = window(variant, t_steps)
    cells = [(cell, tbptt.build_model(fx, cell)[1]) for cell in CELLS]
    x, targets, h0 = array(fx, "x"), array(fx, "targets"), array(fx, "h0")

    def step() -> jax.Array:
        # run's jitted _grads per cell: one forward, both backward passes, the loss summed over steps
        outs = [tbptt._grads(params, x, h0, targets, cell, k) for cell, params in cells]
        total = jnp.zeros((), dtype=targets.dtype)
        for out in outs:
            total = total + out[0]
        return jax.block_until_ready((total, outs))[0]

    return step


def _grad_clipping(fx: Fixture, variant: str) -> Step:
    """One window's train_step (clip, SGD) in regime "above"; calls walk the windows, carrying h; returns its loss."""
    _, params = grad_clipping.build_model(fx)
    lr = array(fx, "lr")
    r, k = REGIMES.index("above"), int(fx["window"])  # "above": the gradient norm exceeds max_norm, clipping acts
    max_norm, weight = jnp.asarray(fx["max_norm"][r]), array(fx, "loss_weight")
    x, targets, masks = array(fx, "x"), array(fx, "targets"), array(fx, "mask")
    windows = [(x[s : s + k], targets[s : s + k], masks[r, s : s + k]) for s in range(0, x.shape[0], k)]
    h0 = array(fx, "h0")
    h, i = h0, 0

    def step() -> jax.Array:
        nonlocal params, h, i
        params, stats, h = grad_clipping.train_step(params, h, *windows[i], max_norm, weight, lr, variant)
        i = (i + 1) % len(windows)
        if i == 0:
            h = h0  # the next pass over the sequence starts again from h0, as run's loop does
        return jax.block_until_ready((stats[0], params, h))[0]

    return step


def _no_grad_inference(fx: Fixture, variant: str) -> Step:
    """The validation pass (validate: forward and loss, no gradient); returns the validation loss."""
    model = no_grad_inference.build_model(fx)
    x, labels = array(fx, "x"), array(fx, "labels")

    def step() -> jax.Array:
        return jax.block_until_ready(no_grad_inference.validate(model, x, labels, variant))[1]

    return step


def _feature_stats(fx: Fixture, variant: str) -> Step:
    """One monitored train_step: gradients and the stopped feature statistics (no update); returns the loss."""
    model = feature_stats.build_model(fx)
    x, y = array(fx, "x"), array(fx, "y")

    def step() -> jax.Array:
        return jax.block_until_ready(feature_stats.train_step(model, x, y, variant))[0]

    return step


def _mixed_precision(fx: Fixture, variant: str) -> Step:
    """One loss-scaled bf16 train_step (Adam, scale update), no injected overflow; returns the unscaled loss."""
    x, y = array(fx, "x"), array(fx, "y")
    hp = {k: array(fx, k) for k in ("lr", "b1", "b2", "eps")}
    graphdef, params = nnx.split(mixed_precision.build_model(fx), nnx.Param)
    skip, one = variant != "naive_no_skip", jnp.asarray(1.0, x.dtype)
    opt_state, scaler = mixed_precision.make_optimizer(hp, skip).init(params), mixed_precision.make_scaler(fx, variant)

    def step() -> jax.Array:
        nonlocal params, opt_state, scaler
        out = mixed_precision.train_step(graphdef, params, opt_state, scaler, hp, x, y, one, skip)
        params, opt_state, scaler, loss, _, _ = jax.block_until_ready(out)
        return loss

    return step


def _data_vs_detach(fx: Fixture, variant: str) -> Step:
    """One step (σ forward, the zero write spelled `variant`, d loss / dx); returns the loss."""
    x = array(fx, "x")
    c = array(fx, "c")

    def step() -> jax.Array:
        return jax.block_until_ready(data_vs_detach.step(x, c, variant))[0]

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
      step() -> 0-d float32 jax.Array, ready (blocked on): one step's loss, before that step's
      update (what each step is and which loss: the docstrings of the builders in STEPS).
      Every call takes one more step: parameters, optimizer state and carries advance.
    Raises:
      ValueError: unknown name; fx not a Fixture of `name` or not float32; unknown variant.
    """
    if name not in STEPS:
        raise ValueError(f"scenario_step: name expected one of {list(STEPS)}, got {name!r}")
    require(fx, name, "float32", "scenario_step")  # float32 only: JAX would need x64 on for the step's lifetime
    spec = get(name)
    variant = spec.variants[0] if variant is None else spec.check_variant(variant)
    return STEPS[name](fx, variant)
