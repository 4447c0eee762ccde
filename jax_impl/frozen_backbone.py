"""frozen_backbone: train a new classifier head on a frozen MLP backbone with AdamW.

Gradient flow: loss -> head flows; head -/-> backbone (nnx.DiffState over the head
only, or stop_gradient on the features). Either way the backbone must also stay
out of the optimizer (nnx.Optimizer(..., wrt=HEAD)): optax.adamw decays every leaf
it is given, zero gradient or not.
Port note: `naive_stop_gradient` only adds stop_gradient and gives optax.adamw the
whole model: the "frozen" backbone shrinks by (1 - lr·wd) per step. torch's
AdamW skips .grad None, so the torch idiom has no such trap.
Shapes: B samples, D inputs, H features, C classes.
Reference: Yosinski et al. 2014, arXiv:1411.1792; Loshchilov & Hutter 2019, arXiv:1711.05101.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_variant, check_x64
from ._common import (
    StepCall,
    cross_entropy,
    field,
    grads_of,
    load_params,
    numpy,
    params_of,
    scenario_run,
    scenario_step,
    step_of,
    transformation,
)

__all__ = ["Backbone", "Classifier", "build_model", "make_optimizer", "train_step", "step_calls", "make_step", "run"]

STOPPED = ("detach_features", "naive_stop_gradient")
HEAD = nnx.All(nnx.Param, nnx.PathContains("head"))


class Backbone(nnx.Module):
    """features [B, H] = tanh(l2(tanh(l1(x [B, D]))))."""

    def __init__(self, d: int, h: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.l2 = nnx.Linear(h, h, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.tanh(self.l2(jnp.tanh(self.l1(x))))


class Classifier(nnx.Module):
    """logits [B, C] = head(backbone(x)); features stopped in the STOPPED variants."""

    def __init__(self, d: int, h: int, c: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.backbone = Backbone(d, h, dtype, rngs)
        self.head = nnx.Linear(h, c, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array, variant: str) -> jax.Array:
        check_variant("frozen_backbone", variant)
        features = self.backbone(x)
        if variant in STOPPED:
            features = jax.lax.stop_gradient(features)  # GRAD-FLOW: the head trains on fixed features
        return self.head(features)


def build_model(fx) -> Classifier:
    """A Classifier loaded with the fixture's canonical parameters.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under("params")
    d, h, c = fx.dims["D"], fx.dims["H"], fx.dims["C"]
    return load_params(nnx.eval_shape(lambda: Classifier(d, h, c, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def make_optimizer(model: Classifier, fx, variant: str) -> nnx.Optimizer:
    """optax.adamw over the trainable parameters; only the head unless the backbone trains.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_variant("frozen_backbone", variant)
    check_x64("make_optimizer", fx.dtype, jax.config.jax_enable_x64)
    wrt = nnx.Param
    if variant in ("freeze_params", "detach_features"):
        wrt = HEAD  # GRAD-FLOW: frozen leaves stay out of the optimizer
    b1, b2 = fx.scalar("b1"), fx.scalar("b2")
    adamw = transformation(
        optax.adamw, fx.scalar("lr"), b1=b1, b2=b2, eps=fx.scalar("eps"), weight_decay=fx.scalar("weight_decay")
    )
    return nnx.Optimizer(model, adamw, wrt=wrt)


@nnx.jit(static_argnames="variant")
def train_step(model: Classifier, optimizer: nnx.Optimizer, x: jax.Array, labels: jax.Array, variant: str):
    """One AdamW step; returns (loss before the step, gradient State)."""
    check_variant("frozen_backbone", variant)
    diff = HEAD if variant == "freeze_params" else nnx.Param  # GRAD-FLOW: differentiate the head only

    def loss_fn(model: Classifier) -> jax.Array:
        return cross_entropy(model(x, variant), labels)

    loss, grads = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, diff))(model)
    optimizer.update(
        model, grads if variant in ("full_finetune", "naive_stop_gradient") else nnx.filter_state(grads, HEAD)
    )
    return loss, grads


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one AdamW train_step of a classifier built from the fixture (loss first)."""
    model = build_model(fx)
    optimizer = make_optimizer(model, fx, variant)
    x, labels = field(fx, "x"), field(fx, "labels")
    return [StepCall(train_step, (model, optimizer), (x, labels), {"variant": variant})]


@scenario_step("frozen_backbone")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One AdamW train_step of the classifier; returns the cross-entropy before the update."""
    return step_of(step_calls(fx, variant))


@scenario_run("frozen_backbone")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/<param> of step 1; params/<param> after `steps`; moved/<param> = after - before."""
    model = build_model(fx)
    optimizer = make_optimizer(model, fx, variant)

    x, labels = field(fx, "x"), field(fx, "labels")
    before = params_of(model)
    for step in range(int(fx["steps"])):
        loss, grads = train_step(model, optimizer, x, labels, variant)
        if step == 0:
            loss0, grads0 = numpy(loss), grads_of(grads, before)
    after = params_of(model)
    out = {"loss": loss0}
    out.update({f"grads/{k}": g for k, g in grads0.items()})
    out.update({f"params/{k}": v for k, v in after.items()})
    out.update({f"moved/{k}": after[k] - before[k] for k in after})
    return out
