"""dp_stop_global_stat: DINO's center, a mean psum'd over the devices, used as a constant or differentiated.

Gradient flow: loss -> head and l1 flow directly; the center c = m·c0 + (1 - m)·(global mean
of h + probe) is computed inside shard_map with `jax.lax.psum`: under stop_gradient it is a
constant (stop_global_mean); without, the transpose of psum sums the center's cotangents over
the devices and hands the total back to each one: the gradient through every device's share
(through_global_mean). JAX has no in-place all-reduce: the port of torch's `dist.all_reduce`
(inplace_all_reduce) is psum, which differentiates where torch's did not (declared to diverge).
Port note: psum ports torch's autograd-aware functional all_reduce; stop_gradient(psum(...)) ports
`with torch.no_grad(): dist.all_reduce(s)`. The loss is pmean'd, as DDP averages its gradients.
Shapes: B = W·b samples (b per device), D inputs, H features, O outputs; W = 2 devices.
Reference: Caron et al. 2021 (DINO), arXiv:2104.14294, `update_center`; jax.lax.psum transpose.
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
from ._distributed import data_mesh, on_ranks, shard

__all__ = ["Model", "build_model", "global_center", "shard_loss", "run_rank", "run"]


class Model(nnx.Module):
    """features h [b, H] = tanh(l1(x [b, D])), pred [b, O] = head(h - c); probe [H]: zeros, in the center only."""

    def __init__(self, d: int, h: int, o: int, dtype: jnp.dtype, momentum: float, rngs: nnx.Rngs) -> None:
        self.momentum = momentum
        self.l1 = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.head = nnx.Linear(h, o, param_dtype=dtype, rngs=rngs)
        self.probe = nnx.Param(jnp.zeros(h, dtype))  # its gradient: what flows through the center

    def __call__(self, x: jax.Array, center0: jax.Array, variant: str) -> tuple[jax.Array, jax.Array]:
        h = jnp.tanh(self.l1(x))
        c = global_center(h + self.probe[...], center0, self.momentum, variant)
        return self.head(h - c), c


def build_model(fx) -> Model:
    """A Model loaded with the fixture's canonical parameters (the probe starts at zero)."""
    params = fx.under("params")
    params["probe"] = np.zeros(fx.dims["H"], fx.dtype)
    d, h, o, m = fx.dims["D"], fx.dims["H"], fx.dims["O"], fx.spec.constants["momentum"]
    return load_params(nnx.eval_shape(lambda: Model(d, h, o, jnp.dtype(fx.dtype), m, nnx.Rngs(0))), params)


def global_center(h: jax.Array, center0: jax.Array, m: float, variant: str) -> jax.Array:
    """Inside shard_map: c [H] = m·c0 + (1 - m)·Σ_devices Σ_b h / (b·W), constant or differentiated."""
    check_variant("dp_stop_global_stat", variant)
    n = h.shape[0] * jax.lax.psum(1, "data")
    total = jax.lax.psum(h.sum(axis=0), "data")  # transpose: the cotangents of every device, summed
    if variant == "stop_global_mean":
        total = jax.lax.stop_gradient(total)  # GRAD-FLOW: the center is a constant: no gradient through the all-reduce
    return m * center0 + (1 - m) * total / n


def shard_loss(pred: jax.Array, y: jax.Array) -> jax.Array:
    """mean ½‖pred - y‖² over this device's rows. Raises ValueError unless pred and y are both [b, O]."""
    check_same_shape("shard_loss", pred=pred.shape, y=y.shape)
    return 0.5 * ((pred - y) ** 2).sum(axis=1).mean()


@functools.cache
def _step(graphdef, variant: str):
    def step(params, x, y, center0):
        def loss_fn(p):
            pred, c = nnx.merge(graphdef, p)(x, center0, variant)
            return jax.lax.pmean(shard_loss(pred, y), "data"), c  # the mean over devices, as DDP averages

        (loss, c), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        return loss, c, grads

    data = P("data")
    return jax.jit(jax.shard_map(step, mesh=data_mesh(), in_specs=(P(), data, data, P()), out_specs=(P(), P(), P())))


def run_rank(fx, variant: str) -> dict[str, np.ndarray]:
    """One process's outputs: loss [], center [H], grads/<param> (replicated), grads/probe [H]."""
    graphdef, params = nnx.split(build_model(fx))
    rep = NamedSharding(data_mesh(), P())
    params, center0 = jax.device_put((params, field(fx, "center")), rep)  # replicated
    loss, c, grads = _step(graphdef, variant)(params, shard(fx, "x"), shard(fx, "y"), center0)
    out = {"loss": np.asarray(loss), "center": np.asarray(c)}
    out.update({f"grads/{k}": g for k, g in flat(grads).items()})
    return out


@scenario_run("dp_stop_global_stat")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs of process 0 (W = 2 devices): loss [], center [H], grads/<param>, grads/probe."""
    return on_ranks("dp_stop_global_stat", fx, variant)
