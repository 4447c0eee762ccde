"""dp_no_sync: gradient accumulation over micro-batches inside shard_map, one pmean, one SGD step.

Gradient flow: inside shard_map each device differentiates its micro-batch's (loss / M) with
respect to device-varying parameters (`jax.lax.pcast(params, "data", to="varying")`), so the
gradient stays local; they accumulate and one `jax.lax.pmean` averages the sum at the step's
micro-batch: the mirror of `ddp.no_sync()`. `sync_every_micro_batch` is the jit-with-shardings
style: each micro-batch's gradient of the global mean (XLA all-reduces it), averaged over M by
`optax.MultiSteps(every_k_schedule=M)`. `step_on_first_micro_batch` steps at `i % M == 0`.
Port note: optax.MultiSteps accumulates in float32 by default (accumulator_dtype, optax 0.2.8):
give it the parameters' dtype. Differentiating with respect to the replicated parameters themselves would sum the
devices' gradients at every micro-batch (the transpose of their broadcast is a psum): that is
syncing every micro-batch, not no_sync; pcast to varying is what keeps the gradient local.
Shapes: B = W·M·b samples (M micro-batches of b per device), D inputs, H hidden, O outputs; W = 2.
Reference: optax.MultiSteps; jax.shard_map (jax 0.10); Goyal et al. 2017, arXiv:1706.02677.
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
from ._common import MLP, field, flat, load_params, scenario_run
from ._distributed import data_mesh, gather_ranks, on_ranks

__all__ = [
    "build_model",
    "micro_batches",
    "micro_loss",
    "is_step",
    "accumulate",
    "full_batch_grads",
    "run_rank",
    "run",
]


def build_model(fx) -> MLP:
    """An MLP loaded with the fixture's canonical parameters."""
    params = fx.under("params")
    d, h, o = fx.dims["D"], fx.dims["H"], fx.dims["O"]
    return load_params(nnx.eval_shape(lambda: MLP(d, h, o, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def micro_batches(fx, key: str) -> list[jax.Array]:
    """M global arrays [W·b, ...] sharded over "data": device r holds its own micro-batch i in the i-th."""
    m, value = int(fx["micro_batches"]), np.asarray(fx[key])
    blocks = value.reshape(fx.spec.constants["world"], m, -1, *value.shape[1:])  # [W, M, b, ...]: by rank, micro-batch
    sharding = NamedSharding(data_mesh(), P("data"))
    out = []
    for i in range(m):
        part = blocks[:, i].reshape(-1, *value.shape[1:])
        out.append(jax.make_array_from_callback(part.shape, sharding, lambda idx, part=part: part[idx]))
    return out


def micro_loss(pred: jax.Array, y: jax.Array) -> jax.Array:
    """mean ½‖pred - y‖² of one micro-batch. Raises ValueError unless pred and y are both [b, O]."""
    check_same_shape("micro_loss", pred=pred.shape, y=y.shape)
    return 0.5 * ((pred - y) ** 2).sum(axis=1).mean()


def is_step(i: int, m: int, variant: str) -> bool:
    """Whether micro-batch i (of M) ends the accumulation: the last, or the first in the off-by-one loop."""
    check_variant("dp_no_sync", variant)
    return i % m == 0 if variant == "step_on_first_micro_batch" else (i + 1) % m == 0


def _varying_zeros(tree):
    return jax.tree.map(lambda v: jax.lax.pcast(jnp.zeros_like(v), "data", to="varying"), tree)


def accumulate(graphdef, params, xs, ys, variant: str, lr: float):
    """Inside shard_map: one round over the micro-batches; returns (params after, pending local sum, mean loss)."""
    m, tx = len(xs), optax.sgd(lr)
    acc, losses = _varying_zeros(params), []

    def loss_fn(p, x, y):
        return micro_loss(nnx.merge(graphdef, p)(x), y) / m

    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        local = jax.lax.pcast(params, "data", to="varying")  # GRAD-FLOW: accumulate locally, no all-reduce
        loss, grads = jax.value_and_grad(loss_fn)(local, x, y)
        acc = jax.tree.map(jnp.add, acc, grads)
        losses.append(jax.lax.pmean(loss * m, "data"))
        if is_step(i, m, variant):
            synced = jax.lax.pmean(acc, "data")  # the one all-reduce of the round
            updates, _ = tx.update(synced, tx.init(params), params)
            params, acc = optax.apply_updates(params, updates), _varying_zeros(params)
    return params, acc, jnp.mean(jnp.stack(losses))


@functools.cache
def _round(graphdef, variant: str, m: int, lr: float):
    def round_(params, xs, ys):
        after, pending, loss = accumulate(graphdef, params, xs, ys, variant, lr)
        return after, jax.tree.map(lambda v: v[None], pending), loss  # pending: one row per device

    data = (P("data"),) * m
    specs = {"mesh": data_mesh(), "in_specs": (P(), data, data), "out_specs": (P(), P("data"), P())}
    return jax.jit(jax.shard_map(round_, **specs))


@functools.cache
def _multi_steps(graphdef, m: int, lr: float, dtype: str):
    # optax 0.2.8 accumulates in float32 unless told: a float64 run would round every micro-batch
    tx = optax.MultiSteps(optax.sgd(lr), every_k_schedule=m, accumulator_dtype=jnp.dtype(dtype))

    def micro_step(params, state, x, y):  # x, y: one global micro-batch; XLA all-reduces the gradient
        loss, grads = jax.value_and_grad(lambda p: micro_loss(nnx.merge(graphdef, p)(x), y))(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    return tx, jax.jit(micro_step)


def full_batch_grads(fx) -> dict[str, np.ndarray]:
    """The single-device gradient of the mean loss over all B rows: what every round should step on."""
    graphdef, params = nnx.split(build_model(fx), nnx.Param)
    return flat(_full_batch(graphdef)(params, field(fx, "x"), field(fx, "y")))


@functools.cache
def _full_batch(graphdef):
    return jax.jit(lambda params, x, y: jax.grad(lambda p: micro_loss(nnx.merge(graphdef, p)(x), y))(params))


def run_rank(fx, variant: str) -> dict[str, np.ndarray]:
    """One process's outputs: loss [], moved/<param>, pending/<param> (rank 0); the off-by-one loop adds gap/<param>."""
    graphdef, initial = nnx.split(build_model(fx), nnx.Param)
    before = flat(initial)
    params = jax.device_put(initial, NamedSharding(data_mesh(), P()))  # replicated parameters
    xs, ys = micro_batches(fx, "x"), micro_batches(fx, "y")
    m, lr = len(xs), fx.scalar("lr")
    if variant == "sync_every_micro_batch":
        tx, micro_step = _multi_steps(graphdef, m, lr, fx.dtype)
        state, losses = tx.init(params), []
        for x, y in zip(xs, ys, strict=True):
            params, state, loss = micro_step(params, state, x, y)
            losses.append(loss)
        loss, pending = jnp.mean(jnp.stack(losses)), flat(state.acc_grads)  # MultiSteps resets it on its step
    else:
        params, rows, loss = _round(graphdef, variant, m, lr)(params, tuple(xs), tuple(ys))
        pending = {k: gather_ranks(v)[0] for k, v in _leaves(rows).items()}  # rank 0's row
    after = flat(params)
    out = {"loss": np.asarray(loss)}
    out.update({f"moved/{k}": after[k] - before[k] for k in after})
    out.update({f"pending/{k}": pending[k] for k in after})
    if variant == "step_on_first_micro_batch":  # the trap: not the step of one device on the full batch
        full = full_batch_grads(fx)
        out.update({f"gap/{k}": (after[k] - before[k]) + lr * full[k] for k in after})
    return out


def _leaves(state) -> dict:
    return {"/".join(map(str, path)): v.get_value() for path, v in nnx.to_flat_state(state)}


@scenario_run("dp_no_sync")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs of process 0 (W = 2 devices): loss [], moved/*, pending/*; gap/* (vs one full-batch step) in the trap."""
    return on_ranks("dp_no_sync", fx, variant)
