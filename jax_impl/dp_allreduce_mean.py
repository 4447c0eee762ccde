"""dp_allreduce_mean: in shard_map the loss is averaged over the data axis; equal shards give the full batch.

Gradient flow: each device holds its shard; the loss is made global inside shard_map
(`pmean` of the shard means, or `psum(Σ m e) / psum(Σ m)` for the masked global mean), and
jax.grad with respect to the replicated parameters transposes their implicit broadcast into a
psum of the devices' cotangents: the full-batch gradient, replicated. `masked_mean_of_means`
averages per-shard masked means, as DDP does with a per-shard masked loss.
Port note: DDP averages after backward; the naive port `pmean_after_grad` does the same here,
`pmean(jax.grad(shard_loss)(params))`, and gets W times DDP's gradient: since JAX 0.7 (shard_map
with check_vma) the gradient of replicated parameters is already summed, and pmean of a replicated
value changes nothing.
Shapes: B = W·b samples (b per device), D inputs, H hidden, O outputs; W = 2 devices.
Reference: JAX docs, "shard_map: automatic differentiation" (jax.shard_map, jax 0.10); arXiv:2105.04663.
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
from ._common import MLP, field, flat, load_params, scenario_run
from ._distributed import data_mesh, on_ranks, shard

__all__ = ["build_model", "example_losses", "shard_loss", "full_batch_grads", "run_rank", "run"]


def build_model(fx) -> MLP:
    """An MLP loaded with the fixture's canonical parameters."""
    params = fx.under("params")
    d, h, o = fx.dims["D"], fx.dims["H"], fx.dims["O"]
    return load_params(nnx.eval_shape(lambda: MLP(d, h, o, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def example_losses(pred: jax.Array, y: jax.Array) -> jax.Array:
    """e [b] = ½‖pred - y‖² per example. Raises ValueError unless pred and y are both [b, O]."""
    check_same_shape("example_losses", pred=pred.shape, y=y.shape)
    return 0.5 * ((pred - y) ** 2).sum(axis=1)


def shard_loss(pred: jax.Array, y: jax.Array, mask: jax.Array, variant: str) -> jax.Array:
    """Inside shard_map: the objective of the variant, made global over the "data" axis.

    equal_shards: pmean of the shard means. masked_global_mean: psum(Σ m e) / psum(Σ m).
    masked_mean_of_means: pmean of the shard's Σ m e / Σ m. pmean_after_grad: the shard's own
    mean (device-varying), averaged after the grad by the naive port.
    """
    check_variant("dp_allreduce_mean", variant)
    e = example_losses(pred, y)
    if variant == "masked_global_mean":
        return jax.lax.psum((e * mask).sum(), "data") / jax.lax.psum(mask.sum(), "data")
    if variant == "masked_mean_of_means":
        return jax.lax.pmean((e * mask).sum() / mask.sum(), "data")
    if variant == "pmean_after_grad":
        return e.mean()
    return jax.lax.pmean(e.mean(), "data")  # GRAD-FLOW: backward averages the ranks' gradients


def full_batch_grads(fx, variant: str) -> dict[str, np.ndarray]:
    """The single-device gradient of the full batch's objective (the mean, or the global masked mean)."""
    graphdef, state = nnx.split(build_model(fx))
    grads = _full_batch(graphdef, variant.startswith("masked"))(
        state, field(fx, "x"), field(fx, "y"), field(fx, "mask")
    )
    return flat(grads)


@functools.cache
def _full_batch(graphdef, masked: bool):
    def grads(state, x, y, mask):
        def loss(s):
            e = example_losses(nnx.merge(graphdef, s)(x), y)
            return (e * mask).sum() / mask.sum() if masked else e.mean()

        return jax.grad(loss)(state)

    return jax.jit(grads)


@functools.cache
def _step(graphdef, variant: str):
    # compiled once per model structure and variant; the shardings come with the arguments
    def step(state, x, y, mask):
        def loss_fn(s):
            return shard_loss(nnx.merge(graphdef, s)(x), y, mask, variant)

        loss, grads = jax.value_and_grad(loss_fn)(state)
        if variant == "pmean_after_grad":  # the naive port: "average as DDP does" (the grad is already a sum)
            loss, grads = jax.lax.pmean(loss, "data"), jax.lax.pmean(grads, "data")
        return loss, grads

    data = P("data")
    return jax.jit(jax.shard_map(step, mesh=data_mesh(), in_specs=(P(), data, data, data), out_specs=(P(), P())))


def run_rank(fx, variant: str) -> dict[str, np.ndarray]:
    """One process's outputs: loss [] (the averaged objective), grads/<param> (replicated), gap/<param> (mean of means)."""
    model = build_model(fx)
    graphdef, state = nnx.split(model)
    state = jax.device_put(state, NamedSharding(data_mesh(), P()))  # replicated parameters
    x, y, mask = shard(fx, "x"), shard(fx, "y"), shard(fx, "mask")
    loss, grads = _step(graphdef, variant)(state, x, y, mask)
    grads = flat(grads)
    out = {"loss": np.asarray(loss)}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    if variant == "masked_mean_of_means":  # the trap: the gap to the global masked mean's gradient
        full = full_batch_grads(fx, variant)
        out.update({f"gap/{k}": grads[k] - full[k] for k in grads})
    return out


@scenario_run("dp_allreduce_mean")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs of process 0 (W = 2 devices): loss [], grads/<param>, gap/<param> (mean of means: vs the global masked mean)."""
    return on_ranks("dp_allreduce_mean", fx, variant)
