"""p19_drift (pitfall P19): 1,000 full-batch SGD steps with weight decay, ported or nearly.

Gradient flow: loss -> every parameter; optax.add_decayed_weights adds wd·θ to each gradient before
optax.sgd, torch SGD's coupled decay. What drifts between frameworks is rounding, or a porting bug.
Port note: torch.optim.SGD(params, lr, weight_decay=wd) is optax.chain(optax.add_decayed_weights(wd),
optax.sgd(lr)); optax.sgd has no weight_decay argument, and the naive port that drops it agrees to
5e-6 after one step, not after 1,000. Float noise is told from a bug by a float64 rerun (noise
vanishes) and by a same-framework run in another summation order, e.g. the batch permuted (noise is
that size). JAX runs the steps as one jitted jax.lax.scan over nnx.split's state.
Shapes: B samples, D inputs, H hidden units.
Reference: optax.add_decayed_weights, optax.sgd; Goldberg 1991, doi:10.1145/103162.103163.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, load_params, numpy, params_of, scenario_run

__all__ = ["MLP", "build_model", "make_optimizer", "train", "run"]


class MLP(nnx.Module):
    """pred [B, 1] = l2(tanh(l1(x [B, D])))."""

    def __init__(self, d: int, h: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.l2 = nnx.Linear(h, 1, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jnp.tanh(self.l1(x)))


def build_model(fx) -> MLP:
    """An MLP loaded with the fixture's canonical parameters (the same starting point on both sides)."""
    params = fx.under("params")
    return load_params(
        nnx.eval_shape(lambda: MLP(fx.dims["D"], fx.dims["H"], jnp.dtype(fx.dtype), nnx.Rngs(0))), params
    )


def make_optimizer(model: MLP, fx, variant: str) -> optax.GradientTransformation:
    """torch SGD(lr, weight_decay) as add_decayed_weights then sgd; naive: optax.sgd(lr) alone (the decay lost)."""
    check_variant("p19_drift", variant)
    if variant == "naive":
        return optax.sgd(fx.scalar("lr"))  # the straightforward port: optax.sgd takes no weight_decay
    return optax.chain(optax.add_decayed_weights(fx.scalar("weight_decay")), optax.sgd(fx.scalar("lr")))


@functools.partial(jax.jit, static_argnames=("graphdef", "tx", "steps"))
def _scan(graphdef, state, tx, x, y, steps):
    def loss_fn(s):
        pred = nnx.merge(graphdef, s)(x)
        check_same_shape("train", pred=pred.shape, y=y.shape)
        return jnp.mean((pred - y) ** 2)

    def step(carry, _):
        s, opt_state = carry
        loss, grads = jax.value_and_grad(loss_fn)(
            s
        )  # GRAD-FLOW: the same gradient on both sides: only rounding (or a bug) differs
        updates, opt_state = tx.update(grads, opt_state, s)
        return (optax.apply_updates(s, updates), opt_state), loss

    (state, _), losses = jax.lax.scan(step, (state, tx.init(state)), None, length=steps)
    return state, losses


def train(model: MLP, optimizer: optax.GradientTransformation, x: jax.Array, y: jax.Array, steps: int) -> jax.Array:
    """`steps` full-batch steps on mean((pred − y)²), in place; returns the loss before each step [steps].

    Raises ValueError unless pred and y are both [B, 1].
    """
    graphdef, state = nnx.split(model)
    state, losses = _scan(graphdef, state, optimizer, x, y, steps)
    nnx.update(model, state)
    return losses


@scenario_run("p19_drift")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: losses [steps] (before each step); params/<param> after `steps`."""
    model = build_model(fx)
    losses = train(model, make_optimizer(model, fx, variant), field(fx, "x"), field(fx, "y"), int(fx["steps"]))
    return {"losses": numpy(losses), **{f"params/{k}": v for k, v in params_of(model).items()}}
