"""feature_stats: per-feature mean and std of stopped features, logged inside a training step.

Gradient flow: loss -> head -> features -> encoder flows; features -/-> monitor
(stop_gradient, returned as value_and_grad's aux), so the training gradient is
bit-for-bit the same with or without monitoring. Stopping the features the head
reads (`detach_features`, C22's "detach features promptly") stops the encoder's training.
Port note: jnp.std divides by B (ddof=0); torch's `x.std()` divides by B - 1. Port it
as `jnp.std(x, ddof=1)`; `naive_ddof0` is the port that forgets it (smaller by
sqrt((B-1)/B)). One sample (B = 1): ddof=1 gives NaN, as torch; ddof=0 would give 0.
Shapes: B samples, D inputs, H features, O outputs.
Reference: JAX docs, jax.numpy.std (ddof argument, default 0).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant, check_x64
from ._common import StepCall, field, grads_of, load_params, numpy, params_of, scenario_run, scenario_step, step_of

__all__ = ["Regressor", "build_model", "feature_stats", "mse", "train_step", "step_calls", "make_step", "run"]

DDOF = {"ported": 1, "population": 0, "detach_features": 1}


class Regressor(nnx.Module):
    """features [B, H] = tanh(encoder(x [B, D])); pred [B, O] = head(features)."""

    def __init__(self, d: int, h: int, o: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.encoder = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.head = nnx.Linear(h, o, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array, variant: str) -> tuple[jax.Array, jax.Array]:
        check_variant("feature_stats", variant)
        features = jnp.tanh(self.encoder(x))
        head_input = features
        if variant == "detach_features":
            head_input = jax.lax.stop_gradient(features)  # GRAD-FLOW: the head reads fixed features (C22)
        return self.head(head_input), features


def build_model(fx) -> Regressor:
    """A Regressor loaded with the fixture's canonical parameters.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under("params")
    d, h, o = fx.dims["D"], fx.dims["H"], fx.dims["O"]
    return load_params(nnx.eval_shape(lambda: Regressor(d, h, o, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def feature_stats(features: jax.Array, variant: str) -> tuple[jax.Array, jax.Array]:
    """Per-feature mean [H] and std [H] over the batch of features [B, H], stopped.

    std divisor: B - 1 (ddof=1, torch's default), B in variant "population".
    B = 1 gives std NaN with ddof=1 (0 / 0), as torch.
    """
    check_variant("feature_stats", variant)
    h = jax.lax.stop_gradient(features)  # GRAD-FLOW: monitoring reads the features, never trains them
    if variant == "naive_ddof0":
        return jnp.mean(h, axis=0), jnp.std(h, axis=0)  # the naive port: jnp's default ddof=0
    return jnp.mean(h, axis=0), jnp.std(h, axis=0, ddof=DDOF[variant])


def mse(pred: jax.Array, y: jax.Array) -> jax.Array:
    """mean((pred - y)²) over pred [B, O] and y [B, O]. Raises ValueError on a shape mismatch."""
    check_same_shape("mse", pred=pred.shape, y=y.shape)
    return jnp.mean((pred - y) ** 2)


@nnx.jit(static_argnames=("variant", "monitor"))
def train_step(model: Regressor, x: jax.Array, y: jax.Array, variant: str, monitor: bool = True):
    """Loss and gradients of one step, with the feature statistics when `monitor`.

    Returns (loss [], gradient State, (mean [H], std [H]) or None); aux is never differentiated.
    """
    check_variant("feature_stats", variant)

    def loss_fn(model: Regressor) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        pred, features = model(x, variant)
        stats = feature_stats(features, variant) if monitor else None
        return mse(pred, y), stats

    (loss, stats), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    return loss, grads, stats


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one monitored train_step of a model built from the fixture (the loss first)."""
    model = build_model(fx)
    x, y = field(fx, "x"), field(fx, "y")
    return [StepCall(train_step, (model,), (x, y), {"variant": variant})]


@scenario_step("feature_stats")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One monitored train_step: gradients and the stopped feature statistics (no update); returns the loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("feature_stats")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/<param> (canonical); stats/mean, stats/std [H] of the stopped features."""
    model = build_model(fx)
    x, y = field(fx, "x"), field(fx, "y")
    loss, grads, (mean, std) = train_step(model, x, y, variant)
    out = {"loss": numpy(loss), "stats/mean": numpy(mean), "stats/std": numpy(std)}
    out.update({f"grads/{k}": g for k, g in grads_of(grads, params_of(model)).items()})
    return out
