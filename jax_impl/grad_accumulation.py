"""grad_accumulation: accumulate n micro-batch gradients (optax.MultiSteps, or a plain sum), then one step.

Gradient flow: each micro-batch's gradient is added to an accumulator, acc + g_k / n; the
mean of the micro-batch gradients is the full-batch gradient when the micro-batches are equal.
zero_grad_in_loop keeps the last one only (acc = g_k / n), as torch's misplaced zero_grad.
Port note: torch's (loss / n).backward() n times, step, zero_grad is
optax.MultiSteps(optax.sgd(lr), every_k_schedule=n): one update per micro-batch, the mean applied
every n-th, the accumulator reset. not_divided is the port of a torch loop without / n: MultiSteps
averages where torch summed, and the step is n times smaller (the JAX side differs).
MultiSteps accumulates in float32 unless given accumulator_dtype (optax 0.2.8): a float64 run
that forgets it agrees with torch to 1e-9 only.
Shapes: N examples of the full batch, D input features, H hidden units.
Reference: optax.MultiSteps (optax/transforms/_accumulation.py); Ott et al. 2018, arXiv:1806.00187.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant
from ._common import MLP, field, grads_of, load_params, numpy, params_of, scenario_run

__all__ = ["build_model", "mse", "micro_batches", "accumulate_grads", "make_optimizer", "run"]


def build_model(fx) -> MLP:
    """An MLP loaded with the fixture's canonical parameters (dtype of the fixture)."""
    params = fx.under("params")
    return load_params(
        nnx.eval_shape(lambda: MLP(fx.dims["D"], fx.dims["H"], 1, jnp.dtype(fx.dtype), nnx.Rngs(0))), params
    )


def mse(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    """mean((pred − y)²) over a (micro-)batch x [M, D], y [M]. Raises ValueError unless pred and y are both [M]."""
    pred = model(x).squeeze(-1)  # [M]
    check_same_shape("mse", pred=pred.shape, y=y.shape)
    return jnp.mean((pred - y) ** 2)


def micro_batches(x: jax.Array, y: jax.Array, n: int, variant: str) -> list[tuple[jax.Array, jax.Array]]:
    """The n micro-batches of x [N, D], y [N]: equal, or (mean_unequal) N − n + 1 examples then ones."""
    check_variant("grad_accumulation", variant)
    big = x.shape[0] - n + 1 if variant == "mean_unequal" else x.shape[0] // n
    cuts = [big + i * ((x.shape[0] - big) // (n - 1)) for i in range(n - 1)]
    return list(zip(jnp.split(x, cuts), jnp.split(y, cuts), strict=True))


@nnx.jit(static_argnames="variant")
def accumulate_grads(model: MLP, optimizer: nnx.Optimizer, batches: list, variant: str) -> nnx.State:
    """One accumulation cycle; returns the applied gradient Σ_k g_k / n (zero_grad_in_loop: the last g_k / n only).

    The plain sum is what torch's .grad holds; the optimizer gets it from MultiSteps, one micro-batch at a
    time (zero_grad_in_loop: the plain sum in one update). Jitted.
    """
    check_variant("grad_accumulation", variant)
    n = len(batches)
    acc = jax.tree.map(jnp.zeros_like, nnx.state(model, nnx.Param))
    for x, y in batches:
        grads = nnx.grad(mse)(model, x, y)
        if variant == "zero_grad_in_loop":
            acc = jax.tree.map(lambda g: g / n, grads)  # the trap: each micro-batch wipes the ones before it
        else:
            # GRAD-FLOW: .grad accumulates: each micro-batch adds its share
            acc = jax.tree.map(lambda a, g: a + g / n, acc, grads)
    if variant == "zero_grad_in_loop":
        optimizer.update(model, acc)
    else:  # one MultiSteps update per micro-batch: the mean is applied at the n-th
        for x, y in batches:
            optimizer.update(model, nnx.grad(mse)(model, x, y))
    return acc


def make_optimizer(model: MLP, fx, variant: str) -> nnx.Optimizer:
    """optax.MultiSteps(sgd(lr), n) over every parameter: it sums n updates and applies their mean at the n-th.

    zero_grad_in_loop: plain sgd(lr) (MultiSteps cannot lose micro-batches: the plain sum's step).
    """
    check_variant("grad_accumulation", variant)
    sgd = optax.sgd(fx.scalar("lr"))
    if variant == "zero_grad_in_loop":
        return nnx.Optimizer(model, sgd, wrt=nnx.Param)
    n = fx.spec.constants["micro_batches"]
    # accumulator_dtype: MultiSteps sums in float32 by default, whatever the parameters' dtype
    # GRAD-FLOW: the next cycle starts from no gradient
    multi = optax.MultiSteps(sgd, every_k_schedule=n, accumulator_dtype=jnp.dtype(fx.dtype))
    return nnx.Optimizer(model, multi, wrt=nnx.Param)


@scenario_run("grad_accumulation")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss [] (full batch, before); grads/<param> of the first cycle; full_grads/<param> (one grad
    over the full batch); gap/<param> = grads − full_grads; params/<param> after `steps` cycles."""
    model = build_model(fx)
    x, y = field(fx, "x"), field(fx, "y")
    loss, full = nnx.value_and_grad(mse)(model, x, y)  # the reference: the full-batch gradient
    full = grads_of(full)
    optimizer = make_optimizer(model, fx, variant)
    batches = micro_batches(x, y, fx.spec.constants["micro_batches"], variant)
    for step in range(int(fx["steps"])):
        grads = accumulate_grads(model, optimizer, batches, variant)
        if step == 0:
            first = grads_of(grads)
    out = {"loss": numpy(loss)}
    out.update({f"grads/{k}": g for k, g in first.items()})
    out.update({f"full_grads/{k}": g for k, g in full.items()})
    out.update({f"gap/{k}": first[k] - full[k] for k in full})
    out.update({f"params/{k}": v for k, v in params_of(model).items()})
    return out
