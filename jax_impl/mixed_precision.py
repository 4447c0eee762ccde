"""mixed_precision: bfloat16 forward by explicit casts, float32 master weights, loss scaling, a skipped overflow.

Gradient flow: loss × scale -> bf16 computation -> float32 gradients, unscaled by
1/scale before anyone reads them; a non-finite gradient never reaches the parameters
(optax.apply_if_finite keeps parameters and Adam's state, the scale backs off).
Port note: torch's CPU autocast is mirrored by hand: a Linear casts its operands to bf16,
accumulates in float32 (preferred_element_type), adds the bias and rounds to bf16 once —
nnx.Linear(dtype=bfloat16) rounds twice (before and after the bias) and differs by an ulp
in a quarter of the outputs. float64 arrays are never cast, as autocast. The scale rule is
torch.amp.GradScaler's, written as a pure function (jmp's DynamicLossScale uses one factor
for growth and backoff). Read the step count from Adam's state: nnx.Optimizer.step counts skipped updates too.
Shapes: B samples, D inputs, H features, O outputs.
Reference: optax docs, optax.apply_if_finite; Micikevicius et al. 2018, arXiv:1710.03740.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_scalar, check_variant, check_x64
from ._common import field, flat, grads_of, load_params, numpy, scenario_run, scenario_step

__all__ = [
    "Regressor",
    "build_model",
    "autocast",
    "linear",
    "mse",
    "LossScale",
    "make_scaler",
    "make_optimizer",
    "train_step",
    "NO_STEP_CALLS",
    "make_step",
    "run",
]


MAX_SKIPS = 2**30  # apply_if_finite's max_consecutive_errors: never give up and apply a NaN update


class Regressor(nnx.Module):
    """pred [B, O] = head(tanh(encoder(x [B, D]))); with autocast both Linear layers run in bf16."""

    def __init__(self, d: int, h: int, o: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.encoder = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.head = nnx.Linear(h, o, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array, use_autocast: bool = True) -> jax.Array:
        return linear(self.head, jnp.tanh(linear(self.encoder, x, use_autocast)), use_autocast)


def build_model(fx) -> Regressor:
    """A Regressor whose master weights are the fixture's canonical parameters (fixture dtype).

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under("params")
    d, h, o = fx.dims["D"], fx.dims["H"], fx.dims["O"]
    return load_params(nnx.eval_shape(lambda: Regressor(d, h, o, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def autocast(x: jax.Array) -> jax.Array:
    """torch's autocast cast rule for a Linear operand: float32 / bfloat16 -> bfloat16; float64 unchanged."""
    return x if x.dtype == jnp.float64 else x.astype(jnp.bfloat16)


def linear(layer: nnx.Linear, x: jax.Array, enabled: bool = True) -> jax.Array:
    """A Linear layer as torch's autocast runs it: bf16 operands, float32 sums, one rounding to bf16 [B, out].

    enabled False or float64 operands: the plain x @ kernel + bias in their dtype.
    """
    if not enabled or x.dtype == jnp.float64:
        return x @ layer.kernel[...] + layer.bias[...]
    z = jnp.dot(autocast(x), autocast(layer.kernel[...]), preferred_element_type=jnp.float32)
    return (z + autocast(layer.bias[...]).astype(jnp.float32)).astype(jnp.bfloat16)  # one rounding, as torch


def mse(pred: jax.Array, y: jax.Array) -> jax.Array:
    """mean((pred - y)²) in y's dtype; pred [B, O] (any float dtype), y [B, O]. Raises ValueError on a shape mismatch."""
    check_same_shape("mse", pred=pred.shape, y=y.shape)
    return jnp.mean((pred.astype(y.dtype) - y) ** 2)


class LossScale(NamedTuple):
    """Loss-scale state, a pytree: scale [] float32, growth_tracker [] int32 and the rule's constants.

    `update(finite)` is torch.amp.GradScaler.update (aten _amp_update_scale_): a non-finite
    step multiplies the scale by backoff_factor and resets the tracker; growth_interval
    finite steps in a row multiply it by growth_factor. A static scale (dynamic False) never changes.
    """

    scale: jax.Array
    growth_tracker: jax.Array
    growth_factor: jax.Array
    backoff_factor: jax.Array
    growth_interval: jax.Array
    dynamic: jax.Array

    def update(self, finite: jax.Array) -> LossScale:
        grow = self.growth_tracker + 1 >= self.growth_interval
        scale = jnp.where(
            finite, jnp.where(grow, self.scale * self.growth_factor, self.scale), self.scale * self.backoff_factor
        )
        tracker = jnp.where(finite & ~grow, self.growth_tracker + 1, 0)
        return self._replace(
            scale=jnp.where(self.dynamic, scale, self.scale), growth_tracker=jnp.where(self.dynamic, tracker, 0)
        )


def make_scaler(fx, variant: str) -> LossScale:
    """The initial LossScale from the fixture's hyper-parameters (static_scale for "static")."""
    check_variant("mixed_precision", variant)
    f32 = lambda key: jnp.asarray(fx.scalar(key), jnp.float32)  # noqa: E731  GradScaler keeps its scale in float32
    return LossScale(
        scale=f32("static_scale" if variant == "static" else "init_scale"),
        growth_tracker=jnp.asarray(0, jnp.int32),
        growth_factor=f32("growth_factor"),
        backoff_factor=f32("backoff_factor"),
        growth_interval=jnp.asarray(int(fx["growth_interval"]), jnp.int32),
        dynamic=jnp.asarray(variant != "static"),
    )


def make_optimizer(hp: dict[str, jax.Array], skip_nonfinite: bool) -> optax.GradientTransformation:
    """optax.adam from the hyper-parameters hp (lr, b1, b2, eps: arrays, so that one compile serves
    every fixture), wrapped in apply_if_finite unless skip_nonfinite is False (the naive port).

    Raises ValueError unless lr > 0, b1, b2 in [0, 1) and eps > 0 (traced values: checked by their caller)."""
    check_scalar("make_optimizer", "lr", hp["lr"], 0.0, low_open=True)
    for name in ("b1", "b2"):
        check_scalar("make_optimizer", name, hp[name], 0.0, 1.0, high_open=True)
    check_scalar("make_optimizer", "eps", hp["eps"], 0.0, low_open=True)
    tx = optax.adam(hp["lr"], b1=hp["b1"], b2=hp["b2"], eps=hp["eps"])
    if skip_nonfinite:
        tx = optax.apply_if_finite(tx, MAX_SKIPS)  # GRAD-FLOW: a non-finite gradient never reaches the parameters
    return tx


def _adam_count(opt_state) -> jax.Array:
    return optax.tree_utils.tree_get(opt_state, "count")


@functools.partial(jax.jit, static_argnames="graphdef")
def _full_grads(graphdef, params, x, y):
    """Gradients of the unscaled loss with autocast off (the fixture dtype throughout)."""
    return jax.grad(lambda p: mse(nnx.merge(graphdef, p)(x, False), y))(params)


@functools.partial(jax.jit, static_argnames=("graphdef", "skip_nonfinite"))
def train_step(graphdef, params, opt_state, scaler, hp, x, y, poison, skip_nonfinite: bool):
    """One scaled step on the parameter State of nnx.split(model). x [B, D], y [B, O]; poison: 1.0,
    or inf to inject an overflow; skip_nonfinite: False only in the naive port.

    Returns (params, opt_state, LossScale, loss [] unscaled, unscaled gradient State, skipped [] bool).
    """

    def scaled_loss(params: nnx.State) -> tuple[jax.Array, jax.Array]:
        loss = mse(nnx.merge(graphdef, params)(x), y) * poison
        return loss * scaler.scale, loss

    (_, loss), grads = jax.value_and_grad(scaled_loss, has_aux=True)(params)
    # 1/scale is exact (a power of two)
    grads = jax.tree.map(
        lambda g: g * (1.0 / scaler.scale).astype(g.dtype), grads
    )  # GRAD-FLOW: unscale the gradients before anything reads them
    finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]))
    updates, new_state = make_optimizer(hp, skip_nonfinite).update(grads, opt_state, params)
    skipped = _adam_count(new_state) == _adam_count(opt_state)
    return optax.apply_updates(params, updates), new_state, scaler.update(finite), loss, grads, skipped


# no step_calls (the bench's tuned forms tune fixed calls): the JAX step is a pure jax.jit whose
# state (parameters, Adam state, loss scale) passes from one call to the next
NO_STEP_CALLS = "its step threads the parameters, the Adam state and the loss scale from call to call"


@scenario_step("mixed_precision")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One loss-scaled bf16 train_step (Adam, scale update), no injected overflow; returns the unscaled loss."""
    x, y = field(fx, "x"), field(fx, "y")
    hp = {k: field(fx, k) for k in ("lr", "b1", "b2", "eps")}
    graphdef, params = nnx.split(build_model(fx), nnx.Param)
    skip, one = variant != "naive_no_skip", jnp.asarray(1.0, x.dtype)
    opt_state, scaler = make_optimizer(hp, skip).init(params), make_scaler(fx, variant)

    def step() -> jax.Array:
        nonlocal params, opt_state, scaler
        out = train_step(graphdef, params, opt_state, scaler, hp, x, y, one, skip)
        params, opt_state, scaler, loss, _, _ = jax.block_until_ready(out)
        return loss

    return step


@scenario_run("mixed_precision")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/, grads_full/<param> of step 1 (autocast on / off); params/<param> after
    `steps`; scale [steps] int64 after each update; skipped [steps] bool; optimizer_steps [] int64."""
    x, y = field(fx, "x"), field(fx, "y")
    hp = {k: field(fx, k) for k in ("lr", "b1", "b2", "eps")}
    graphdef, params = nnx.split(build_model(fx), nnx.Param)
    one, inf = jnp.asarray(1.0, x.dtype), jnp.asarray(jnp.inf, x.dtype)
    skip = variant != "naive_no_skip"
    opt_state = make_optimizer(hp, skip).init(params)
    grads_full = _full_grads(graphdef, params, x, y)
    scaler = make_scaler(fx, variant)
    scales, skipped = [], []
    for step in range(1, int(fx["steps"]) + 1):
        poison = inf if step == int(fx["overflow_at"]) else one
        params, opt_state, scaler, loss, grads, skipped_now = train_step(
            graphdef, params, opt_state, scaler, hp, x, y, poison, skip
        )
        if step == 1:
            loss0, grads0 = numpy(loss), grads_of(grads)
        scales.append(float(scaler.scale))
        skipped.append(bool(skipped_now))
    out = {"loss": loss0}
    out.update({f"grads/{k}": g for k, g in grads0.items()})
    out.update({f"grads_full/{k}": g for k, g in grads_of(grads_full).items()})
    out.update({f"params/{k}": v for k, v in flat(params).items()})
    out.update(scale=np.array(scales, dtype=np.int64), skipped=np.array(skipped))
    out["optimizer_steps"] = np.array(int(_adam_count(opt_state)), dtype=np.int64)
    return out
