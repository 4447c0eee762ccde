"""dp_sync_batchnorm: nnx.BatchNorm statistics pmean'd over the data axis (sync BatchNorm) against per-device BatchNorm.

Gradient flow: in training mode the batch mean and variance are functions of the batch,
differentiated; with `axis_name="data"` nnx.BatchNorm pmeans them over the devices inside
shard_map, and the transpose of that pmean carries their gradient back to every device's features.
The running statistics are nnx.BatchStat, not nnx.Param: never differentiated.
Port note: torch's `nn.SyncBatchNorm.convert_sync_batchnorm(model)` is GPU-only in torch 2.13 (its
twin all-reduces the statistics itself on gloo); Flax's momentum is torch's 1 - m; the gradient is
that of the mean over devices of their losses: jax.grad of a pmean'd loss, the parameters replicated.
Shapes: B = W·b samples (b >= 2 per device), D inputs, H features, O outputs; W = 2 devices.
Reference: Ioffe & Szegedy 2015, arXiv:1502.03167; flax.nnx.BatchNorm(axis_name=...).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..shared.core.checks import check_same_shape, check_variant
from ._common import field, flat, load_params, scenario_run
from ._distributed import data_mesh, gather_ranks, on_ranks, shard

__all__ = ["SyncBatchNorm1d", "Model", "build_model", "shard_loss", "full_batch_grads", "run_rank", "run"]


class SyncBatchNorm1d(nnx.BatchNorm):
    """nnx.BatchNorm [n, H] whose training statistics are pmean'd over the "data" axis of the enclosing shard_map."""

    def __init__(self, h: int, *, epsilon: float, momentum: float, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        kw = {"epsilon": epsilon, "momentum": momentum, "dtype": dtype, "param_dtype": dtype, "rngs": rngs}
        super().__init__(h, axis_name="data", **kw)  # GRAD-FLOW: statistics all-reduced, gradient too


class Model(nnx.Module):
    """pred [b, O] = l2(tanh(bn(l1(x [b, D])))); bn synchronised or per device."""

    def __init__(self, d: int, h: int, o: int, dtype: jnp.dtype, sync: bool, eps: float, momentum: float, rngs) -> None:
        self.l1 = nnx.Linear(d, h, use_bias=False, param_dtype=dtype, rngs=rngs)
        norm = SyncBatchNorm1d if sync else functools.partial(nnx.BatchNorm, param_dtype=dtype)
        self.bn = norm(
            h, epsilon=eps, momentum=1 - momentum, dtype=dtype, rngs=rngs
        )  # Flax: running = m·running + (1-m)·batch
        self.l2 = nnx.Linear(h, o, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jnp.tanh(self.bn(self.l1(x))))


def build_model(fx, variant: str) -> Model:
    """The Model of a variant, loaded with the fixture's canonical parameters, in training mode."""
    check_variant("dp_sync_batchnorm", variant)
    params = fx.under("params")
    c, dtype = fx.spec.constants, jnp.dtype(fx.dtype)
    d, h, o, sync = fx.dims["D"], fx.dims["H"], fx.dims["O"], variant == "sync_batchnorm"
    model = load_params(Model(d, h, o, dtype, sync, c["eps"], c["momentum"], nnx.Rngs(0)), params)
    model.bn.mean.set_value(
        jnp.zeros(h, dtype)
    )  # nnx.BatchNorm keeps float32 statistics (flax 0.12.8), whatever param_dtype
    model.bn.var.set_value(jnp.ones(h, dtype))
    model.train()
    return model


def shard_loss(pred: jax.Array, y: jax.Array) -> jax.Array:
    """mean ½‖pred - y‖² over this device's rows. Raises ValueError unless pred and y are both [b, O]."""
    check_same_shape("shard_loss", pred=pred.shape, y=y.shape)
    return 0.5 * ((pred - y) ** 2).sum(axis=1).mean()


def full_batch_grads(fx) -> dict[str, np.ndarray]:
    """The single-device gradient: plain BatchNorm over all B rows."""
    graphdef, params, stats = nnx.split(build_model(fx, "local_batchnorm"), nnx.Param, nnx.BatchStat)
    return flat(_full_batch(graphdef)(params, stats, field(fx, "x"), field(fx, "y")))


@functools.cache
def _full_batch(graphdef):
    return jax.jit(jax.grad(lambda p, stats, x, y: shard_loss(nnx.merge(graphdef, p, stats, copy=True)(x), y)))


@functools.cache
def _step(graphdef, sync: bool):
    # running statistics, one row per device: synchronised ones are replicated (cast to varying to stack them)
    def rows(v):
        return (jax.lax.pcast(v, "data", to="varying") if sync else v)[None]

    def step(params, stats, x, y):
        def loss_fn(p):
            model = nnx.merge(graphdef, p, stats, copy=True)  # fresh Variables of this trace: BatchNorm updates them
            loss = jax.lax.pmean(shard_loss(model(x), y), "data")  # the mean over devices, as DDP averages
            return loss, nnx.state(model, nnx.BatchStat)

        (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return loss, grads, jax.tree.map(rows, stats)

    data = P("data")
    return jax.jit(jax.shard_map(step, mesh=data_mesh(), in_specs=(P(), P(), data, data), out_specs=(P(), P(), data)))


def run_rank(fx, variant: str) -> dict[str, np.ndarray]:
    """One process's outputs: loss [], grads/<param>, running/mean [H], rank_gap/running/mean [H]; gap/<param> (per device)."""
    graphdef, params, stats = nnx.split(build_model(fx, variant), nnx.Param, nnx.BatchStat)
    params, stats = jax.device_put((params, stats), NamedSharding(data_mesh(), P()))  # replicated
    loss, grads, stats = _step(graphdef, variant == "sync_batchnorm")(params, stats, shard(fx, "x"), shard(fx, "y"))
    grads = flat(grads)
    running = gather_ranks(stats["bn"]["mean"][...])  # GRAD-FLOW: running statistics are buffers, never parameters
    out = {"loss": np.asarray(loss)}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    if variant == "local_batchnorm":  # the trap: not the single-device gradient
        full = full_batch_grads(fx)
        out.update({f"gap/{k}": grads[k] - full[k] for k in grads})
    out["running/mean"] = running[0]
    out["rank_gap/running/mean"] = np.max(np.abs(running - running[0]), axis=0)
    return out


@scenario_run("dp_sync_batchnorm")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs of process 0 (W = 2 devices): loss, grads/*, running/mean, its rank gap; gap/* (vs one device) when per device."""
    return on_ranks("dp_sync_batchnorm", fx, variant)
