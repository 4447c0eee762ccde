"""maml: meta-gradient of few-shot sinusoid regression through n inner SGD steps.

Gradient flow: θ -> θ' = θ - α ∇L_sup(θ) -> L_query(θ') -> θ, through the inner
gradient too (second_order, create_graph=True) or around it (first_order: the
inner gradient is built without a graph, a constant, so dθ'/dθ = I).
Port note: create_graph=True is what makes the inner gradient differentiable; the
default create_graph=False is FOMAML with no error and no detach. JAX has no such
flag: nested jax.grad is second order unless stop_gradient says otherwise. The
torch.func twin (functional_call + torch.func.grad, closest to JAX) is checked
against this file in tests/test_maml.py.
Shapes: T tasks, S support and Q query points, D inputs, H hidden units, O outputs.
Reference: Finn et al. 2017, arXiv:1703.03400; Nichol et al. 2018, arXiv:1803.02999.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch.func import functional_call

from ..shared.core.checks import check_int, check_same_shape, check_scalar, check_variant
from ._common import MLP, StepCall, field, grads_or_zeros, numpy, scenario_run, scenario_step, step_of
from ._layout import load_params, params_of

__all__ = [
    "MAX_INNER_STEPS",
    "build_model",
    "mse_loss",
    "task_loss",
    "adapt",
    "meta_loss",
    "meta_step",
    "step_calls",
    "make_step",
    "run",
]

MAX_INNER_STEPS = (
    10  # adapt's loop is unrolled: 100 steps once took 190 s to compile (the record's schema bounds inner_steps alike)
)


def build_model(fx) -> MLP:
    """An MLP loaded with the fixture's initial (meta) parameters θ."""
    params = fx.under("params")
    d, h, o = fx.dims["D"], fx.dims["H"], fx.dims["O"]
    return load_params(MLP(d, h, o, getattr(torch, fx.dtype)), params)


def mse_loss(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """mean((pred - y)²) over pred [N, O], y [N, O]. Raises ValueError on a shape mismatch."""
    check_same_shape("mse_loss", pred=pred.shape, y=y.shape)
    return ((pred - y) ** 2).mean()


def task_loss(model: MLP, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """L(θ) = mse(f_θ(x), y) with θ given as a dict keyed like named_parameters() (functional_call)."""
    return mse_loss(functional_call(model, params, (x,)), y)


def adapt(
    model: MLP,
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    alpha: float,
    steps: int,
    variant: str,
) -> dict[str, torch.Tensor]:
    """`steps` SGD steps θ ← θ - α ∇L(θ; x [S, D], y [S, O]); returns θ'_t, a function of θ for autograd.

    Raises ValueError unless steps is an int in [1, 10] (the loop is unrolled: 100 steps once took
    190 s to compile) and α is a number > 0.
    """
    check_variant("maml", variant)
    check_int("adapt", "steps", steps, 1, MAX_INNER_STEPS)
    check_scalar("adapt", "alpha", alpha, 0.0, low_open=True)
    for _ in range(steps):
        loss = task_loss(model, params, x, y)
        grads = torch.autograd.grad(
            loss,
            list(params.values()),
            create_graph=variant == "second_order",  # GRAD-FLOW: FOMAML treats the inner gradient as a constant
        )
        params = {k: p - alpha * g for (k, p), g in zip(params.items(), grads, strict=True)}
    return params


def meta_loss(model: MLP, params: dict[str, torch.Tensor], tasks, alpha: float, steps: int, variant: str):
    """Σ_t L_query(adapt(θ, support_t)); returns (meta-loss [], (per-task losses [T], adapted θ'_t per task)).

    `tasks` holds support_x [T, S, D], support_y [T, S, O], query_x [T, Q, D], query_y [T, Q, O].
    """
    check_variant("maml", variant)
    sx, sy, qx, qy = tasks
    losses, adapted = [], []
    for t in range(sx.shape[0]):
        params_t = adapt(model, params, sx[t], sy[t], alpha, steps, variant)
        losses.append(task_loss(model, params_t, qx[t], qy[t]))
        adapted.append(params_t)
    losses = torch.stack(losses)  # [T]
    return losses.sum(), (losses, adapted)


def meta_step(model: MLP, params: dict[str, torch.Tensor], tasks, alpha: float, steps: int, variant: str):
    """One meta-gradient: (meta-loss [], per-task query losses [T], adapted θ'_t per task, query
    gradients ∇L_q(θ'_t) per task, d meta-loss / dθ, d meta-loss / d support_y [T, S, O]); support_y requires grad."""
    total, (losses, adapted) = meta_loss(model, params, tasks, alpha, steps, variant)
    query_grads = []
    for t, params_t in enumerate(adapted):
        # retain_graph: the meta-gradient below walks the same graph again
        g_t = torch.autograd.grad(losses[t], list(params_t.values()), retain_graph=True)
        query_grads.append(dict(zip(params_t, g_t, strict=True)))
    *meta, g_support_y = grads_or_zeros(total, [*params.values(), tasks[1]])
    return total, losses, adapted, query_grads, dict(zip(params, meta, strict=True)), g_support_y


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one meta_step on the fixture's tasks (no outer update; the meta-loss first)."""
    model = build_model(fx)
    params = dict(model.named_parameters())
    support_y = field(fx, "support_y", requires_grad=True)  # to show the path through the inner gradient
    tasks = (field(fx, "support_x"), support_y, field(fx, "query_x"), field(fx, "query_y"))
    alpha, steps = fx.scalar("alpha"), int(fx["inner_steps"])
    return [StepCall(meta_step, (model, params), (tasks, alpha, steps), {"variant": variant})]


@scenario_step("maml")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """One meta-gradient: d/dθ, d/d support_y, per-task query gradients (no outer update); returns the meta-loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("maml")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: adapted/<param> [T, ...], query_loss [T], query_grads/<param> [T, ...] (∇L_q at θ'_t),
    meta_grads/<param> (d meta-loss / dθ), data_grads/support_y [T, S, O]."""
    model = build_model(fx)
    params = dict(model.named_parameters())
    support_y = field(fx, "support_y", requires_grad=True)  # to show the path through the inner gradient
    tasks = (field(fx, "support_x"), support_y, field(fx, "query_x"), field(fx, "query_y"))
    alpha, steps = fx.scalar("alpha"), int(fx["inner_steps"])
    _, losses, adapted, query_grads, meta, g_support_y = meta_step(model, params, tasks, alpha, steps, variant)
    adapted, query_grads = [params_of(model, p) for p in adapted], [params_of(model, g) for g in query_grads]
    out = {f"adapted/{k}": np.stack([p[k] for p in adapted]) for k in adapted[0]}
    out["query_loss"] = numpy(losses)
    out.update({f"query_grads/{k}": np.stack([g[k] for g in query_grads]) for k in query_grads[0]})
    out.update({f"meta_grads/{k}": v for k, v in params_of(model, meta).items()})
    out["data_grads/support_y"] = numpy(g_support_y)
    return out
