"""dp_frozen_unused: a frozen backbone and a detached probe in a sharded NNX step, AdamW steps.

Gradient flow: loss -> head flows; the backbone is outside nnx.DiffState (no gradient); the
probe's loss is added under stop_gradient (reported, never trained: its gradient is zero). The
batch is sharded over "data", the model replicated; nnx.jit's partitioner all-reduces the
gradient. AdamW decays every leaf it is given, so the optimizer gets the head only (wrt=HEAD),
as torch's AdamW skips the probe's .grad of None; every frozen leaf stays bit-identical on
every device (`rank_gap`, each device's own buffer gathered).
Port note: there is no reducer to tell about unused parameters: `find_unused_parameters`,
`static_graph` and `unused_not_declared` run the same JAX step; torch's `unused_not_declared`
desynchronises at step 1 and raises at step 2, its port does neither (declared to diverge).
Shapes: B = W·b samples (b per device), D inputs, H features, O outputs; W = 2 devices.
Reference: Li et al. 2020, arXiv:2006.15704 §3.2.3 (unused parameters); flax.nnx.Optimizer(wrt=...).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..shared.core.checks import check_same_shape, check_variant
from ._common import grads_of, load_params, params_of, scenario_run
from ._distributed import data_mesh, on_ranks, rank_gap, shard

__all__ = ["Model", "build_model", "make_optimizer", "data_parallel", "total_loss", "train", "run_rank", "run"]

TRAINABLE = nnx.All(nnx.Param, nnx.Not(nnx.PathContains("backbone")))  # what torch leaves requires_grad
HEAD = nnx.All(nnx.Param, nnx.PathContains("head"))  # what gets a gradient: the probe's is stopped


class Model(nnx.Module):
    """pred [b, O] = head(f), probe [b] = probe(f), f = tanh(backbone(x [b, D]))."""

    def __init__(self, d: int, h: int, o: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.backbone = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.head = nnx.Linear(h, o, param_dtype=dtype, rngs=rngs)
        self.probe = nnx.Linear(h, 1, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        features = jnp.tanh(self.backbone(x))
        return self.head(features), self.probe(features)[:, 0]


def build_model(fx) -> Model:
    """A Model loaded with the fixture's canonical parameters."""
    params = fx.under("params")
    d, h, o = fx.dims["D"], fx.dims["H"], fx.dims["O"]
    return load_params(nnx.eval_shape(lambda: Model(d, h, o, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def make_optimizer(model: Model, fx) -> nnx.Optimizer:
    """optax.adamw over the head only (the backbone is frozen, the probe gets no gradient)."""
    names = ("lr", "b1", "b2", "eps", "weight_decay")
    tx = _adamw(*(fx.scalar(k) for k in names))
    return nnx.Optimizer(model, tx, wrt=HEAD)  # GRAD-FLOW: no gradient: no moments, no decay


@functools.cache
def _adamw(lr: float, b1: float, b2: float, eps: float, weight_decay: float) -> optax.GradientTransformation:
    # one transformation object per setting: nnx.jit keys its cache on it
    return optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)


def data_parallel(model: Model, variant: str) -> Model:
    """The model replicated over the "data" mesh (every variant: JAX has no unused-parameter bookkeeping)."""
    check_variant("dp_frozen_unused", variant)
    nnx.update(model, jax.device_put(nnx.state(model), NamedSharding(data_mesh(), P())))
    return model


def total_loss(pred: jax.Array, probe: jax.Array, y: jax.Array, t: jax.Array) -> jax.Array:
    """mean ½‖pred - y‖² plus the probe's mean ½(probe - t)², the latter stopped. Raises ValueError on shapes."""
    check_same_shape("total_loss", pred=pred.shape, y=y.shape)
    check_same_shape("total_loss", probe=probe.shape, t=t.shape)
    probe_loss = 0.5 * ((probe - t) ** 2).mean()
    task = 0.5 * ((pred - y) ** 2).sum(axis=1).mean()
    return task + jax.lax.stop_gradient(probe_loss)  # GRAD-FLOW: the probe is reported in the loss, never trained


def _loss(model, x, y, t):
    return total_loss(*model(x), y, t)


@nnx.jit
def _step(model: Model, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array, t: jax.Array):
    diff = nnx.DiffState(0, TRAINABLE)  # GRAD-FLOW: the frozen backbone gets no gradient
    loss, grads = nnx.value_and_grad(_loss, argnums=diff)(model, x, y, t)
    optimizer.update(model, nnx.filter_state(grads, HEAD))
    return loss, grads


def train(model: Model, optimizer: nnx.Optimizer, x, y, t, steps: int) -> tuple[jax.Array, dict, int]:
    """`steps` AdamW steps of the sharded step; returns (step-1 loss, step-1 grads, steps done)."""
    params = params_of(model)
    loss0, grads0 = None, None
    for _ in range(steps):
        loss, grads = _step(model, optimizer, x, y, t)
        if loss0 is None:
            loss0, grads0 = loss, grads_of(grads, params)
    return loss0, grads0, int(optimizer.step.get_value())  # the optimizer's own step count


def run_rank(fx, variant: str) -> dict[str, np.ndarray]:
    """One process's outputs: loss [] (step 1), grads/<param> (step 1), moved/<param>, rank_gap/<param>, steps_done []."""
    model = build_model(fx)
    optimizer = make_optimizer(data_parallel(model, variant), fx)
    before = params_of(model)
    loss0, grads0, done = train(model, optimizer, shard(fx, "x"), shard(fx, "y"), shard(fx, "t"), int(fx["steps"]))
    after = params_of(model)
    out = {"loss": np.asarray(loss0)}
    out.update({f"grads/{k}": g for k, g in grads0.items()})
    out.update({f"moved/{k}": after[k] - before[k] for k in after})
    state = {"/".join(map(str, path)): v.get_value() for path, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    out.update({f"rank_gap/{k}": g for k, g in rank_gap(state).items()})
    out["steps_done"] = np.array(done)
    return out


@scenario_run("dp_frozen_unused")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs of process 0 (W = 2 devices): loss, grads/*, moved/*, rank_gap/* (over devices), steps_done."""
    return on_ranks("dp_frozen_unused", fx, variant)
