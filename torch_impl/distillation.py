"""distillation: a student trained on a teacher's temperature-softened outputs plus the hard labels.

Gradient flow: L -> student; the teacher's logits come from teacher.eval() under torch.no_grad(),
so the teacher gets no .grad and its BatchNorm uses (and keeps) its running statistics.
teacher_train_mode: still under no_grad, but teacher.train(): batch statistics, running mean
moves. teacher_not_stopped: no no_grad and an optimizer over model.parameters(): the teacher learns.
Port note: torch.no_grad() and .eval() are two switches (graph, mode); in JAX the graph switch is
jax.lax.stop_gradient (or not differentiating the teacher) and the mode switch nnx's .eval() /
.train(); nnx.BatchNorm(momentum=0.9) is torch's momentum=0.1. F.kl_div(..., log_target=True,
reduction="batchmean") is optax.losses.kl_divergence_with_log_targets(...).mean().
Shapes: B samples, D inputs, H hidden units, C classes.
Reference: Hinton et al. 2015, arXiv:1503.02531.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..shared.core.checks import check_same_shape, check_scalar, check_variant
from ._common import field, numpy, scenario_run
from ._layout import grads_of, load_params, params_of

__all__ = ["Student", "Teacher", "Distiller", "build_model", "teacher_logits", "distillation_loss", "train_step", "run"]


class Student(nn.Module):
    """s(x [B, D]) [B, C] = l2(tanh(l1(x)))."""

    def __init__(self, d: int, h: int, c: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(d, h, dtype=dtype)
        self.l2 = nn.Linear(h, c, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(x)))


class Teacher(nn.Module):
    """t(x [B, D]) [B, C] = l2(tanh(bn(l1(x)))), BatchNorm1d(momentum=0.1, eps=1e-5)."""

    def __init__(self, d: int, h: int, c: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(d, h, dtype=dtype)
        self.bn = nn.BatchNorm1d(h, momentum=0.1, eps=1e-5, dtype=dtype)
        self.l2 = nn.Linear(h, c, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.bn(self.l1(x))))


class Distiller(nn.Module):
    """student and teacher in one model (as a training script holds them)."""

    def __init__(self, d: int, h: int, c: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.student = Student(d, h, c, dtype)
        self.teacher = Teacher(d, h, c, dtype)


def build_model(fx) -> Distiller:
    """A Distiller loaded with the fixture's parameters and the teacher's running statistics."""
    params = fx.under("params")
    dims = fx.dims
    model = load_params(Distiller(dims["D"], dims["H"], dims["C"], getattr(torch, fx.dtype)), params)
    model.teacher.bn.running_mean.copy_(field(fx, "running_mean"))  # buffers: no graph to keep out of
    model.teacher.bn.running_var.copy_(field(fx, "running_var"))
    return model


def teacher_logits(teacher: Teacher, x: torch.Tensor, variant: str) -> torch.Tensor:
    """t(x) [B, C]: in eval mode and without a graph (distill), in train mode (trap), or with a graph (trap)."""
    check_variant("distillation", variant)
    if variant == "teacher_train_mode":
        teacher.train()
    else:
        teacher.eval()  # running statistics, no dropout: the teacher's inference behaviour
    if variant == "teacher_not_stopped":
        return teacher(x)
    with torch.no_grad():  # GRAD-FLOW: the teacher is a constant for the student's loss
        return teacher(x)


def distillation_loss(s: torch.Tensor, t: torch.Tensor, labels: torch.Tensor, temperature: float, alpha: float):
    """(α·T²·KL(softmax(t/T) ‖ softmax(s/T)) batch mean, (1 − α)·CE(s, labels)) of logits s, t [B, C], labels [B].

    Raises ValueError if s and t differ in shape, temperature <= 0 or alpha outside [0, 1].
    Reference: Hinton et al. 2015 §2.
    """
    check_scalar("distillation_loss", "temperature", temperature, 0.0, low_open=True)
    check_scalar("distillation_loss", "alpha", alpha, 0.0, 1.0)
    check_same_shape("distillation_loss", student=s.shape, teacher=t.shape)
    log_s, log_t = F.log_softmax(s / temperature, dim=-1), F.log_softmax(t / temperature, dim=-1)
    soft = F.kl_div(log_s, log_t, reduction="batchmean", log_target=True)
    return alpha * temperature**2 * soft, (1 - alpha) * F.cross_entropy(s, labels)


def train_step(model: Distiller, optimizer: torch.optim.Optimizer, x, labels, temperature, alpha, variant: str):
    """One SGD step on the distillation loss; returns (loss, soft, hard [], soft targets [B, C], canonical
    gradients of every parameter), all before the step."""
    t = teacher_logits(model.teacher, x, variant)  # the one teacher forward of the step
    soft, hard = distillation_loss(model.student(x), t, labels, temperature, alpha)
    optimizer.zero_grad(set_to_none=True)
    (soft + hard).backward()
    grads = grads_of(model)  # .grad None -> 0 (P11)
    optimizer.step()
    return soft + hard, soft, hard, F.softmax(t / temperature, dim=-1), grads


@scenario_run("distillation")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, loss/{soft,hard} []; soft_targets [B, C]; grads/<param>, moved/<param> (one SGD step) of
    student and teacher; teacher_stats/mean_moved [H] (the BatchNorm running mean's change)."""
    model = build_model(fx)
    trained = model if variant == "teacher_not_stopped" else model.student  # the trap trains the teacher too
    optimizer = torch.optim.SGD(trained.parameters(), lr=fx.scalar("lr"))
    before, mean_before = params_of(model), model.teacher.bn.running_mean.clone()
    hyper = (fx.scalar("temperature"), fx.scalar("alpha"))
    loss, soft, hard, soft_targets, grads = train_step(
        model, optimizer, field(fx, "x"), field(fx, "labels"), *hyper, variant
    )
    out = {"loss": numpy(loss), "loss/soft": numpy(soft), "loss/hard": numpy(hard), "soft_targets": soft_targets}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    out.update({f"moved/{k}": v - before[k] for k, v in params_of(model).items()})
    out["teacher_stats/mean_moved"] = numpy(model.teacher.bn.running_mean - mean_before)
    return out
