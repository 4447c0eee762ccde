"""maml: meta-gradient of few-shot sinusoid regression through n inner SGD steps.

Gradient flow: θ -> θ' = θ - α ∇L_sup(θ) -> L_query(θ') -> θ, through the inner
gradient too (second_order: jax.grad of a function that calls jax.grad) or around
it (first_order: stop_gradient on the inner gradient, so dθ'/dθ = I).
Port note: there is no create_graph or retain_graph: jax.grad returns an ordinary
traceable function, so the inner gradient is differentiable by default and FOMAML
must say stop_gradient; nothing is kept or freed between the two gradients.
nnx.split / nnx.merge play the part of torch.func.functional_call.
Shapes: T tasks, S support and Q query points, D inputs, H hidden units, O outputs.
Reference: Finn et al. 2017, arXiv:1703.03400; Nichol et al. 2018, arXiv:1803.02999.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_int, check_same_shape, check_scalar, check_variant, check_x64
from ._common import MLP, StepCall, field, flat, grads_of, load_params, numpy, scenario_run, scenario_step, step_of

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
    """An MLP loaded with the fixture's initial (meta) parameters θ.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under("params")
    d, h, o = fx.dims["D"], fx.dims["H"], fx.dims["O"]
    return load_params(nnx.eval_shape(lambda: MLP(d, h, o, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def mse_loss(pred: jax.Array, y: jax.Array) -> jax.Array:
    """mean((pred - y)²) over pred [N, O], y [N, O]. Raises ValueError on a shape mismatch."""
    check_same_shape("mse_loss", pred=pred.shape, y=y.shape)
    return jnp.mean((pred - y) ** 2)


def task_loss(graphdef: nnx.GraphDef, params: nnx.State, x: jax.Array, y: jax.Array) -> jax.Array:
    """L(θ) = mse(f_θ(x), y) with θ given as an nnx.State (nnx.merge, the functional_call of NNX)."""
    return mse_loss(nnx.merge(graphdef, params)(x), y)


def adapt(
    graphdef: nnx.GraphDef,
    params: nnx.State,
    x: jax.Array,
    y: jax.Array,
    alpha: jax.Array,
    steps: int,
    variant: str,
) -> nnx.State:
    """`steps` SGD steps θ ← θ - α ∇L(θ; x [S, D], y [S, O]); returns θ'_t, a traceable function of θ.

    Raises ValueError unless steps is an int in [1, 10] (the loop is unrolled: 100 steps once took
    190 s to compile) and α is a number > 0.
    """
    check_variant("maml", variant)
    check_int("adapt", "steps", steps, 1, MAX_INNER_STEPS)
    check_scalar("adapt", "alpha", alpha, 0.0, low_open=True)
    for _ in range(steps):
        grads = jax.grad(task_loss, argnums=1)(graphdef, params, x, y)
        if variant == "first_order":
            grads = jax.lax.stop_gradient(grads)  # GRAD-FLOW: FOMAML treats the inner gradient as a constant
        params = jax.tree.map(lambda p, g: p - alpha * g, params, grads)
    return params


def meta_loss(graphdef: nnx.GraphDef, params: nnx.State, tasks, alpha: jax.Array, steps: int, variant: str):
    """Σ_t L_query(adapt(θ, support_t)); returns (meta-loss [], (per-task losses [T], adapted θ'_t stacked [T, ...])).

    `tasks` holds support_x [T, S, D], support_y [T, S, O], query_x [T, Q, D], query_y [T, Q, O].
    """
    check_variant("maml", variant)
    sx, sy, qx, qy = tasks
    adapted = jax.vmap(lambda x, y: adapt(graphdef, params, x, y, alpha, steps, variant))(sx, sy)
    losses = jax.vmap(lambda p, x, y: task_loss(graphdef, p, x, y))(adapted, qx, qy)  # [T]
    return losses.sum(), (losses, adapted)


@functools.partial(jax.jit, static_argnames=("graphdef", "steps", "variant"))
def meta_step(graphdef: nnx.GraphDef, params: nnx.State, tasks, alpha: jax.Array, steps: int, variant: str):
    """One meta-gradient, jitted: (meta-loss [], per-task query losses [T], adapted θ'_t [T, ...], query
    gradients ∇L_q(θ'_t) [T, ...], d meta-loss / dθ, d meta-loss / d support_y [T, S, O])."""

    def objective(params: nnx.State, support_y: jax.Array):
        sx, _, qx, qy = tasks
        return meta_loss(graphdef, params, (sx, support_y, qx, qy), alpha, steps, variant)

    grad_fn = jax.value_and_grad(objective, argnums=(0, 1), has_aux=True)
    (total, (losses, adapted)), (meta, g_support_y) = grad_fn(params, tasks[1])
    query_grads = jax.vmap(lambda p, x, y: jax.grad(task_loss, argnums=1)(graphdef, p, x, y))(adapted, *tasks[2:])
    return total, losses, adapted, query_grads, meta, g_support_y


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one meta_step on the fixture's tasks (no outer update; the meta-loss first)."""
    graphdef, params = nnx.split(build_model(fx))
    tasks = tuple(field(fx, k) for k in ("support_x", "support_y", "query_x", "query_y"))
    alpha, steps = field(fx, "alpha"), int(fx["inner_steps"])
    return [StepCall(meta_step, (), (graphdef, params, tasks, alpha, steps), {"variant": variant})]


@scenario_step("maml")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One meta-gradient: d/dθ, d/d support_y, per-task query gradients (no outer update); returns the meta-loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("maml")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: adapted/<param> [T, ...], query_loss [T], query_grads/<param> [T, ...] (∇L_q at θ'_t),
    meta_grads/<param> (d meta-loss / dθ), data_grads/support_y [T, S, O]."""
    graphdef, params = nnx.split(build_model(fx))

    tasks = tuple(field(fx, k) for k in ("support_x", "support_y", "query_x", "query_y"))
    alpha, steps = field(fx, "alpha"), int(fx["inner_steps"])
    _, losses, adapted, query_grads, meta, g_support_y = meta_step(graphdef, params, tasks, alpha, steps, variant)

    out = {f"adapted/{k}": v for k, v in flat(adapted).items()}
    out["query_loss"] = numpy(losses)
    out.update({f"query_grads/{k}": v for k, v in grads_of(query_grads).items()})
    out.update({f"meta_grads/{k}": v for k, v in flat(meta).items()})
    out["data_grads/support_y"] = numpy(g_support_y)
    return out
