"""multitask: a shared trunk and two heads; isolate one task from the trunk.

Gradient flow: loss1 -> head1 -> trunk; loss2 -> head2 -/-> trunk when task 2 is
isolated (head2 reads jax.lax.stop_gradient(features)). The isolated head still
learns: the stop is on its input, not on its parameters.
Port note: `features.detach()` becomes `jax.lax.stop_gradient(features)`; one
backward of the scalar total (loss1 + loss2) becomes one nnx.value_and_grad.
jax.grad of a non-scalar function raises TypeError, as torch's backward() does.
Shapes: B samples, D inputs, H trunk features, C classes of task 2.
Reference: Caruana 1997, "Multitask Learning", doi:10.1023/A:1007379606734.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_rank, check_same_shape, check_values, check_variant, check_x64
from ._common import StepCall, field, grads_of, load_params, numpy, scenario_run, scenario_step, step_of

__all__ = ["MultiTaskNet", "build_model", "task_losses", "loss_and_grads", "step_calls", "make_step", "run"]


class MultiTaskNet(nnx.Module):
    """pred1 [B] = head1(f1), logits2 [B, C] = head2(f2), f = tanh(trunk(x [B, D])) [B, H]."""

    def __init__(self, d: int, h: int, c: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.trunk = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.head1 = nnx.Linear(h, 1, param_dtype=dtype, rngs=rngs)
        self.head2 = nnx.Linear(h, c, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array, variant: str) -> tuple[jax.Array, jax.Array]:
        check_variant("multitask", variant)
        features = jnp.tanh(self.trunk(x))  # [B, H]
        f1 = f2 = features
        if variant == "isolate_task1":
            f1 = jax.lax.stop_gradient(features)  # GRAD-FLOW: task 1 trains its head only, not the trunk
        if variant == "isolate_task2":
            f2 = jax.lax.stop_gradient(features)  # GRAD-FLOW: task 2 trains its head only, not the trunk
        return self.head1(f1).squeeze(-1), self.head2(f2)


def build_model(fx) -> MultiTaskNet:
    """A MultiTaskNet loaded with the fixture's canonical parameters (dtype of the fixture).

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under("params")
    d, h, c = fx.dims["D"], fx.dims["H"], fx.dims["C"]
    return load_params(nnx.eval_shape(lambda: MultiTaskNet(d, h, c, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def task_losses(pred1: jax.Array, y1: jax.Array, logits2: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(loss1, loss2): mean squared error of pred1 [B] vs y1 [B]; cross-entropy of logits2 [B, C] vs labels [B] int.

    Raises:
      ValueError: pred1 and y1 differ in shape (e.g. [B, 1] vs [B]), a batch size mismatch, or a label
        outside [0, C) (torch raises IndexError, optax silently gives a wrong loss).
    Reference: Caruana 1997.
    """
    check_same_shape("task_losses", pred1=pred1.shape, y1=y1.shape)
    check_rank("task_losses", "logits2", logits2.shape, "BC")
    check_same_shape("task_losses", logits2_batch=logits2.shape[:1], labels=labels.shape)
    check_values("task_losses", "labels", labels, low=0, high=logits2.shape[-1], high_open=True)
    return jnp.mean((pred1 - y1) ** 2), optax.softmax_cross_entropy_with_integer_labels(logits2, labels).mean()


@nnx.jit(static_argnames="variant")
def loss_and_grads(
    model: MultiTaskNet, x: jax.Array, y1: jax.Array, labels: jax.Array, variant: str
) -> tuple[jax.Array, tuple[jax.Array, jax.Array], nnx.State]:
    """(total, (loss1, loss2), gradient State of the total) from one nnx.value_and_grad of loss1 + loss2."""
    check_variant("multitask", variant)

    def loss_fn(model: MultiTaskNet) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        pred1, logits2 = model(x, variant)
        loss1, loss2 = task_losses(pred1, y1, logits2, labels)
        return loss1 + loss2, (loss1, loss2)

    (total, (loss1, loss2)), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    return total, (loss1, loss2), grads


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one loss_and_grads of a model built from the fixture (the total first)."""
    model = build_model(fx)
    x, y1, labels = field(fx, "x"), field(fx, "y1"), field(fx, "labels")
    return [StepCall(loss_and_grads, (model,), (x, y1, labels), {"variant": variant})]


@scenario_step("multitask")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One backward of loss1 + loss2 (loss_and_grads, no update: run takes none); returns the total."""
    return step_of(step_calls(fx, variant))


@scenario_run("multitask")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, loss_task1, loss_task2 []; grads/<param> of the total loss (trunk, head1, head2)."""
    model = build_model(fx)
    x, y1, labels = field(fx, "x"), field(fx, "y1"), field(fx, "labels")
    total, (loss1, loss2), grads = loss_and_grads(model, x, y1, labels, variant)
    out = {"loss": numpy(total), "loss_task1": numpy(loss1), "loss_task2": numpy(loss2)}
    out.update({f"grads/{k}": g for k, g in grads_of(grads).items()})
    return out
