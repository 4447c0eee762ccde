"""distillation: a student trained on a teacher's temperature-softened outputs plus the hard labels.

Gradient flow: L -> student; the teacher's logits come from teacher.eval() and are stopped, so
the gradient over the whole model gives the teacher exact zeros and its nnx.BatchNorm uses (and
keeps) its running statistics. teacher_train_mode: stopped, but teacher.train(): batch
statistics, running mean moves. teacher_not_stopped: no stop and an optimizer over the whole
model: the teacher learns.
Port note: torch.no_grad() becomes jax.lax.stop_gradient; the mode switch .eval() / .train()
exists in nnx too (use_running_average, deterministic) and is a separate decision in both.
nnx.BatchNorm(momentum=0.9) is torch's momentum=0.1; the BatchStat update happens inside
nnx.grad as in torch's forward. optax.losses.kl_divergence_with_log_targets(...).mean() is F.kl_div's
reduction="batchmean" with log_target=True.
Shapes: B samples, D inputs, H hidden units, C classes.
Reference: Hinton et al. 2015, arXiv:1503.02531.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_scalar, check_variant, check_x64
from ._common import field, grads_of, load_params, numpy, params_of, scenario_run, transformation

__all__ = ["Student", "Teacher", "Distiller", "build_model", "teacher_logits", "distillation_loss", "train_step", "run"]


class Student(nnx.Module):
    """s(x [B, D]) [B, C] = l2(tanh(l1(x)))."""

    def __init__(self, d: int, h: int, c: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.l2 = nnx.Linear(h, c, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jnp.tanh(self.l1(x)))


class Teacher(nnx.Module):
    """t(x [B, D]) [B, C] = l2(tanh(bn(l1(x)))), nnx.BatchNorm(momentum=0.9, epsilon=1e-5)."""

    def __init__(self, d: int, h: int, c: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.bn = nnx.BatchNorm(h, momentum=0.9, epsilon=1e-5, dtype=dtype, param_dtype=dtype, rngs=rngs)
        self.l2 = nnx.Linear(h, c, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jnp.tanh(self.bn(self.l1(x))))


class Distiller(nnx.Module):
    """student and teacher in one model (as a training script holds them)."""

    def __init__(self, d: int, h: int, c: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.student = Student(d, h, c, dtype, rngs)
        self.teacher = Teacher(d, h, c, dtype, rngs)


def build_model(fx) -> Distiller:
    """A Distiller loaded with the fixture's parameters and the teacher's running statistics."""
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)  # a float64 fixture outside x64: float32 arrays
    params = fx.under("params")
    dims = fx.dims
    model = nnx.eval_shape(lambda: Distiller(dims["D"], dims["H"], dims["C"], jnp.dtype(fx.dtype), nnx.Rngs(0)))
    load_params(model, params)
    model.teacher.bn.mean.set_value(field(fx, "running_mean"))  # nnx.BatchStat: not a parameter
    model.teacher.bn.var.set_value(field(fx, "running_var"))
    return model


def teacher_logits(teacher: Teacher, x: jax.Array, variant: str) -> jax.Array:
    """t(x) [B, C]: in eval mode and stopped (distill), in train mode (trap), or not stopped (trap)."""
    check_variant("distillation", variant)
    if variant == "teacher_train_mode":
        teacher.train()
    else:
        teacher.eval()  # running statistics, no dropout: the teacher's inference behaviour
    if variant == "teacher_not_stopped":
        return teacher(x)
    return jax.lax.stop_gradient(teacher(x))  # GRAD-FLOW: the teacher is a constant for the student's loss


def distillation_loss(s: jax.Array, t: jax.Array, labels: jax.Array, temperature: float, alpha: float):
    """(α·T²·KL(softmax(t/T) ‖ softmax(s/T)) batch mean, (1 − α)·CE(s, labels)) of logits s, t [B, C], labels [B].

    Raises ValueError if s and t differ in shape, temperature <= 0 or alpha outside [0, 1].
    Reference: Hinton et al. 2015 §2.
    """
    check_scalar("distillation_loss", "temperature", temperature, 0.0, low_open=True)
    check_scalar("distillation_loss", "alpha", alpha, 0.0, 1.0)
    check_same_shape("distillation_loss", student=s.shape, teacher=t.shape)
    log_s, log_t = jax.nn.log_softmax(s / temperature, axis=-1), jax.nn.log_softmax(t / temperature, axis=-1)
    soft = optax.losses.kl_divergence_with_log_targets(log_s, log_t).mean()
    hard = optax.softmax_cross_entropy_with_integer_labels(s, labels).mean()
    return alpha * temperature**2 * soft, (1 - alpha) * hard


@nnx.jit(static_argnames="variant")
def train_step(model: Distiller, optimizer: nnx.Optimizer, x, labels, temperature, alpha, variant: str):
    """One SGD step on the distillation loss; returns (loss, soft, hard [], soft targets [B, C], gradient State
    of every parameter), all before the step. Jitted."""

    def loss_fn(m):
        t = teacher_logits(m.teacher, x, variant)  # the one teacher forward of the step
        soft, hard = distillation_loss(m.student(x), t, labels, temperature, alpha)
        return soft + hard, (soft, hard, t)

    # the gradient over the whole model, as torch's backward() computes it
    (loss, (soft, hard, t)), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    if variant == "teacher_not_stopped":
        optimizer.update(model, grads)
    else:
        optimizer.update(model.student, grads["student"])
    return loss, soft, hard, jax.nn.softmax(t / temperature, axis=-1), grads


@scenario_run("distillation")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, loss/{soft,hard} []; soft_targets [B, C]; grads/<param>, moved/<param> (one SGD step) of
    student and teacher; teacher_stats/mean_moved [H] (the BatchNorm running mean's change)."""
    model = build_model(fx)
    trained = model if variant == "teacher_not_stopped" else model.student  # the trap trains the teacher too
    optimizer = nnx.Optimizer(trained, transformation(optax.sgd, fx.scalar("lr")), wrt=nnx.Param)
    before, mean_before = params_of(model), model.teacher.bn.mean[...]
    hyper = (field(fx, "temperature"), field(fx, "alpha"))
    loss, soft, hard, soft_targets, grads = train_step(
        model, optimizer, field(fx, "x"), field(fx, "labels"), *hyper, variant
    )
    out = {"loss": numpy(loss), "loss/soft": numpy(soft), "loss/hard": numpy(hard), "soft_targets": soft_targets}
    out.update({f"grads/{k}": g for k, g in grads_of(grads).items()})
    out.update({f"moved/{k}": v - before[k] for k, v in params_of(model).items()})
    out["teacher_stats/mean_moved"] = numpy(model.teacher.bn.mean[...] - mean_before)
    return out
