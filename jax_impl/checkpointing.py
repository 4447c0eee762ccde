"""checkpointing: nnx.remat around a residual block on top of a frozen embedding.

Gradient flow: loss -> head and block (the embedding is frozen: left out of nnx.DiffState);
the rematerialised block keeps only its inputs for backward and recomputes the rest. JAX
has no reentrant mode: reentrant_frozen_input gets the true gradient here, where torch's
use_reentrant=True gives the block none (the frameworks differ, by torch's design).
Port note: torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False) becomes
nnx.remat(f)(block, h) (or jax.checkpoint of a pure function, a policy from
jax.checkpoint_policies choosing what is saved): the same gradients, less memory.
Shapes: B tokens, V vocabulary, E embedding width, H hidden units.
Reference: Chen et al. 2016, arXiv:1604.06174; JAX docs, jax.checkpoint; flax.nnx.remat.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant
from ._common import StepCall, field, grads_of, load_params, numpy, params_of, scenario_run, scenario_step, step_of

__all__ = [
    "Block",
    "Model",
    "build_model",
    "mse",
    "saved_activation_bytes",
    "loss_and_grads",
    "train_step",
    "step_calls",
    "make_step",
    "run",
]

TRAINABLE = nnx.All(nnx.Param, nnx.Not(nnx.PathContains("embed")))


class Block(nnx.Module):
    """l2(tanh(l1(h [B, E]))) [B, E]."""

    def __init__(self, e: int, h: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(e, h, param_dtype=dtype, rngs=rngs)
        self.l2 = nnx.Linear(h, e, param_dtype=dtype, rngs=rngs)

    def __call__(self, h: jax.Array) -> jax.Array:
        return self.l2(jnp.tanh(self.l1(h)))


class Model(nnx.Module):
    """pred [B] = head(h + block(h))[:, 0], h = embed(tokens [B]); the block rematerialised per variant."""

    def __init__(self, v: int, e: int, h: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(v, e, param_dtype=dtype, rngs=rngs)
        self.block = Block(e, h, dtype, rngs)
        self.head = nnx.Linear(e, 1, param_dtype=dtype, rngs=rngs)

    def __call__(self, tokens: jax.Array, variant: str) -> jax.Array:
        check_variant("checkpointing", variant)
        h = self.embed(tokens)
        if variant == "no_checkpoint":
            return self.head(h + self.block(h)).squeeze(-1)

        out = nnx.remat(Block.__call__)(self.block, h)  # GRAD-FLOW: the block's activations are recomputed in backward
        return self.head(h + out).squeeze(-1)


def build_model(fx) -> Model:
    """A Model loaded with the fixture's canonical parameters (the embedding [V, E] is frozen by TRAINABLE)."""
    params = fx.under("params")
    v, e, h = fx.dims["V"], fx.dims["E"], fx.dims["H"]
    return load_params(nnx.eval_shape(lambda: Model(v, e, h, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def mse(pred: jax.Array, y: jax.Array) -> jax.Array:
    """mean((pred − y)²) of pred [B], y [B]. Raises ValueError unless the shapes agree."""
    check_same_shape("mse", pred=pred.shape, y=y.shape)
    return jnp.mean((pred - y) ** 2)


def saved_activation_bytes(fx, variant: str) -> int:
    """Bytes of the residuals jax.vjp keeps for backward (the leaves of its vjp function; parameters included).

    What rematerialisation trades for recomputation: the block's internals are not kept. For the bench.
    """
    check_variant("checkpointing", variant)
    model = build_model(fx)
    graphdef, trainable, rest = nnx.split(model, TRAINABLE, ...)
    tokens, y = field(fx, "tokens"), field(fx, "y")
    with jax.enable_x64(fx.dtype == "float64"):
        _, vjp = jax.vjp(lambda t: mse(nnx.merge(graphdef, t, rest)(tokens, variant), y), trainable)
        return int(sum(leaf.nbytes for leaf in jax.tree.leaves(vjp)))


@nnx.jit(static_argnames="variant")
def loss_and_grads(model: Model, tokens: jax.Array, y: jax.Array, variant: str) -> tuple[jax.Array, nnx.State]:
    """(loss [], gradient State of the trainable parameters) of one value_and_grad through the block."""
    diff = nnx.DiffState(0, TRAINABLE)  # GRAD-FLOW: frozen: no input of the block requires grad
    return nnx.value_and_grad(lambda model: mse(model(tokens, variant), y), argnums=diff)(model)


@nnx.jit(static_argnames="variant")
def train_step(model: Model, optimizer: nnx.Optimizer, tokens: jax.Array, y: jax.Array, variant: str) -> jax.Array:
    """One SGD step of head and block; returns the loss before the step."""
    loss, grads = loss_and_grads(model, tokens, y, variant)
    optimizer.update(model, grads)
    return loss


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one SGD train_step of a model built from the fixture (the loss)."""
    model = build_model(fx)
    optimizer = nnx.Optimizer(model, optax.sgd(fx.scalar("lr")), wrt=TRAINABLE)
    tokens, y = field(fx, "tokens"), field(fx, "y")
    return [StepCall(train_step, (model, optimizer), (tokens, y), {"variant": variant}, loss=())]


@scenario_step("checkpointing")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One SGD step of head and block through the (rematerialised) block; returns the loss before the update."""
    return step_of(step_calls(fx, variant))


@scenario_run("checkpointing")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/{embed,block,head}/<param> (a frozen parameter: zeros)."""
    model = build_model(fx)
    loss, grads = loss_and_grads(model, field(fx, "tokens"), field(fx, "y"), variant)
    out = {"loss": numpy(loss)}
    out.update({f"grads/{k}": g for k, g in grads_of(grads, params_of(model)).items()})  # not differentiated -> zeros
    return out
