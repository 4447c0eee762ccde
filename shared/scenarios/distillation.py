"""distillation: a student trained on a teacher's temperature-softened outputs plus the hard labels.

Shapes: B samples, D inputs, H hidden units, C classes.
  student s(x) = l2(tanh(l1(x)))                       [B, C]
  teacher t(x) = l2(tanh(BN(l1(x))))                   [B, C], BatchNorm over the batch axis
  L = α·T²·mean_b KL(softmax(t/T) ‖ softmax(s/T)) + (1 − α)·CE(s, y)     (Hinton et al. 2015 §2)
One SGD step (lr). Variants:
  distill              teacher in eval mode (running statistics) and stopped; the optimizer holds the student
  teacher_train_mode   the trap: the teacher normalises with the batch statistics and its running
                       mean moves (m = 0.1 on the batch mean, torch's convention), although it is stopped
  teacher_not_stopped  the trap: the teacher's logits are not stopped and one optimizer holds the whole
                       model, so the teacher learns from the student's loss
The running variance is not an output: torch stores the unbiased batch variance, nnx.BatchNorm the
biased one (P06), a difference this scenario does not teach.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {
    "student/l1/kernel": ("D", "H"),
    "student/l1/bias": ("H",),
    "student/l2/kernel": ("H", "C"),
    "student/l2/bias": ("C",),
    "teacher/l1/kernel": ("D", "H"),
    "teacher/l1/bias": ("H",),
    "teacher/bn/scale": ("H",),
    "teacher/bn/bias": ("H",),
    "teacher/l2/kernel": ("H", "C"),
    "teacher/l2/bias": ("C",),
}
BN_EPS, BN_MOMENTUM = 1e-5, 0.1

SCHEMA = {
    "x": Field(("B", "D"), doc="inputs"),
    "labels": Field(("B",), kind="int", low=0, high="C", doc="hard labels in [0, C)"),
    **{f"params/{k}": Field(shape, doc="parameter, canonical layout") for k, shape in PARAMS.items()},
    "running_mean": Field(("H",), doc="the teacher's BatchNorm running mean"),
    "running_var": Field(("H",), low=0.0, low_open=True, doc="the teacher's BatchNorm running variance"),
    "temperature": Field((), low=0.0, low_open=True, doc="softmax temperature T"),
    "alpha": Field((), low=0.0, high=1.0, doc="weight α of the soft (distillation) term"),
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate"),
}


def student(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return np.tanh(x @ p["student/l1/kernel"] + p["student/l1/bias"]) @ p["student/l2/kernel"] + p["student/l2/bias"]


def teacher(p: dict[str, np.ndarray], a: dict[str, np.ndarray], train: bool) -> tuple[np.ndarray, np.ndarray]:
    """(logits [B, C], batch mean [H] of the BatchNorm input); eval normalises with the running statistics."""
    h = a["x"] @ p["teacher/l1/kernel"] + p["teacher/l1/bias"]
    mean, var = (h.mean(0), h.var(0)) if train else (a["running_mean"], a["running_var"])
    normed = (h - mean) / np.sqrt(var + BN_EPS) * p["teacher/bn/scale"] + p["teacher/bn/bias"]
    return np.tanh(normed) @ p["teacher/l2/kernel"] + p["teacher/l2/bias"], mean


def log_softmax(z: np.ndarray) -> np.ndarray:
    top = z.max(-1, keepdims=True)
    return z - top - np.log(np.sum(np.exp(z - top), -1, keepdims=True))


def losses(s: np.ndarray, t: np.ndarray, a: dict[str, np.ndarray]) -> tuple[float, float]:
    """(α·T²·KL soft term, (1 − α)·CE hard term) of student and teacher logits [B, C]."""
    temp, alpha = float(a["temperature"]), float(a["alpha"])
    log_t, log_s = log_softmax(t / temp), log_softmax(s / temp)
    soft = np.mean(np.sum(np.exp(log_t) * (log_t - log_s), -1))
    hard = -np.mean(log_softmax(s)[np.arange(len(s)), a["labels"]])
    return float(alpha * temp**2 * soft), float((1.0 - alpha) * hard)


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": int(rng.integers(4, 7)), "D": int(rng.integers(2, 5)), "H": int(rng.integers(2, 5))}
    sizes["C"] = int(rng.integers(2, 5))
    out = {"x": rng.normal(size=(sizes["B"], sizes["D"])), "labels": rng.integers(0, sizes["C"], size=sizes["B"])}
    out.update({f"params/{k}": rng.normal(size=tuple(sizes[d] for d in s)) for k, s in PARAMS.items()})
    out.update(running_mean=rng.normal(size=sizes["H"]), running_var=rng.uniform(0.5, 2.0, size=sizes["H"]))
    out.update(temperature=np.array(rng.uniform(2.0, 4.0)), alpha=np.array(0.7), lr=np.array(0.1))
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    p0 = {k: a[f"params/{k}"] for k in PARAMS}
    train = variant == "teacher_train_mode"
    t0, batch_mean = teacher(p0, a, train)  # stopped: computed once at the base point

    def loss(p):
        t = teacher(p, a, train)[0] if variant == "teacher_not_stopped" else t0
        return sum(losses(student(p, a["x"]), t, a))

    grads = fd_grad(loss, p0)
    soft, hard = losses(student(p0, a["x"]), t0, a)
    out = {"loss": np.array(soft + hard), "loss/soft": np.array(soft), "loss/hard": np.array(hard)}
    out["soft_targets"] = np.exp(log_softmax(t0 / float(a["temperature"])))
    out.update({f"grads/{k}": g for k, g in grads.items()})
    trained = [k for k in PARAMS if k.startswith("student/") or variant == "teacher_not_stopped"]
    out.update({f"moved/{k}": -float(a["lr"]) * grads[k] if k in trained else np.zeros_like(v) for k, v in p0.items()})
    moved = BN_MOMENTUM * (batch_mean - a["running_mean"]) if train else np.zeros_like(a["running_mean"])
    out["teacher_stats/mean_moved"] = moved
    return out


def _pattern(variant: str) -> tuple[tuple[str, str], ...]:
    learns = "nonzero" if variant == "teacher_not_stopped" else "zero"
    return (
        ("grads/student/*", "nonzero"),
        ("moved/student/*", "nonzero"),
        ("grads/teacher/*", learns),  # a stopped teacher gets no gradient from the student's loss
        ("moved/teacher/*", learns),
        ("teacher_stats/mean_moved", "nonzero" if variant == "teacher_train_mode" else "zero"),
        ("soft_targets", "nonzero"),
    )


VARIANTS = ("distill", "teacher_train_mode", "teacher_not_stopped")

SPEC = Scenario(
    name="distillation",
    title="Knowledge distillation: a teacher in eval mode and stopped, the T²-scaled soft loss",
    family="advanced",
    order=5,
    claims=(),
    source="Hinton et al. 2015, arXiv:1503.02531 §2 (soft targets, the T² scaling)",
    lesson=(
        "The teacher is a constant: stopped (torch.no_grad / stop_gradient) it gets no gradient and stays "
        "bit-identical; not stopped, with one optimizer over the whole model, it learns from the student's "
        "loss. Stopping is not eval mode: a stopped teacher in train mode normalises with the batch and its "
        "BatchNorm running mean still moves. The student's gradient is the same whether the teacher is "
        "stopped or not."
    ),
    variants=VARIANTS,
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={v: _pattern(v) for v in VARIANTS},
    porting=Porting(
        torch=(
            "teacher.eval(); with torch.no_grad(): t = teacher(x); loss = α·T²·F.kl_div(F.log_softmax(s/T), "
            "F.log_softmax(t/T), log_target=True, reduction='batchmean') + (1 − α)·F.cross_entropy(s, y)"
        ),
        jax=(
            "model.teacher.eval() (nnx: use_running_average, deterministic); t = jax.lax.stop_gradient(teacher(x)); "
            "optax.losses.kl_divergence_with_log_targets(...).mean()·T² + optax.softmax_cross_entropy_with_integer_labels"
        ),
        trap=(
            "torch.no_grad() and stop_gradient do not switch modes: a teacher left in train mode uses batch "
            "statistics, updates its running statistics (both frameworks, nnx under nnx.grad too) and applies "
            "dropout. Without the stop, backward() writes teacher gradients and an optimizer over "
            "model.parameters() trains it; F.kl_div's 'mean' reduction divides by B·C, not B ('batchmean')."
        ),
    ),
)
