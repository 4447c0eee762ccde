"""siamese_stop: BYOL's EMA target and SimSiam's stopped branch, the symmetric loss, one step.

Gradient flow: loss -> predictor -> online network, never the target branch: BYOL's target
projections are stopped, SimSiam stops the online network's own projections; simsiam_no_stop
lets the gradient through both branches. BYOL's target then moves by optax.incremental_update,
written with nnx.update; the optimizer holds online and predictor only.
Port note: jax.grad differentiates what it is asked to, so BYOL needs no stop_gradient once the
target is outside an nnx.DiffState filter (its JAX reference keeps one "to indicate" it, calling
it "not necessary"; tests/test_siamese_stop.py checks both); torch needs torch.no_grad() there.
This port stops it inside `targets`, as torch does, so that targets() means the same to any
caller. SimSiam's target is the online network itself: its stop_gradient is needed in both frameworks.
Shapes: B samples, D inputs, H hidden units, P projection dimensions.
Reference: Grill et al. 2020, arXiv:2006.07733; Chen & He 2021, arXiv:2011.10566 (simsiam/builder.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_scalar, check_variant, check_x64
from ._common import field, grads_of, load_params, numpy, params_of, scenario_run, transformation

__all__ = ["Network", "Siamese", "build_model", "targets", "symmetric_loss", "ema_update", "train_step", "run"]

LEARNED = nnx.All(nnx.Param, nnx.Not(nnx.PathContains("target")))  # online and predictor


class Network(nnx.Module):
    """f(x [B, D]) [B, P] = l2(tanh(l1(x))): encoder and projector."""

    def __init__(self, d: int, h: int, p: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.l2 = nnx.Linear(h, p, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jnp.tanh(self.l1(x)))


class Siamese(nnx.Module):
    """online f_θ, predictor q [P, P], target f_ξ (BYOL's EMA copy; unused by SimSiam)."""

    def __init__(self, d: int, h: int, p: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.online = Network(d, h, p, dtype, rngs)
        self.predictor = nnx.Linear(p, p, param_dtype=dtype, rngs=rngs)
        self.target = Network(d, h, p, dtype, rngs)


def build_model(fx) -> Siamese:
    """A Siamese model loaded with the fixture's canonical parameters."""
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)  # a float64 fixture outside x64: float32 arrays
    params = fx.under("params")
    dims = fx.dims
    return load_params(
        nnx.eval_shape(lambda: Siamese(dims["D"], dims["H"], dims["P"], jnp.dtype(fx.dtype), nnx.Rngs(0))), params
    )


def targets(model: Siamese, z1: jax.Array, z2: jax.Array, views, variant: str) -> tuple[jax.Array, jax.Array]:
    """(t1, t2) [B, P]: the target network's projections of the views (byol), or z1, z2 stopped (simsiam) or not."""
    check_variant("siamese_stop", variant)
    if variant == "byol":
        # GRAD-FLOW: the target branch is a constant for the online network (BYOL)
        return jax.lax.stop_gradient(model.target(views[0])), jax.lax.stop_gradient(model.target(views[1]))
    if variant == "simsiam":
        # GRAD-FLOW: SimSiam's target is the online projection, stopped
        return jax.lax.stop_gradient(z1), jax.lax.stop_gradient(z2)
    return z1, z2


def symmetric_loss(p1, p2, t1, t2, variant: str) -> tuple[jax.Array, jax.Array]:
    """(D(p1, t2), D(p2, t1)) of predictions and targets [B, P]: mean(2 − 2 cos) (BYOL) or ½·(−mean cos) (SimSiam).

    Raises ValueError on an unknown variant or a shape mismatch. Reference: BYOL eq. 2; SimSiam eq. 1-2.
    """
    check_variant("siamese_stop", variant)
    check_same_shape("symmetric_loss", p1=p1.shape, t2=t2.shape, p2=p2.shape, t1=t1.shape)
    if variant == "byol":
        return (2 - 2 * optax.cosine_similarity(p1, t2)).mean(), (2 - 2 * optax.cosine_similarity(p2, t1)).mean()
    return -0.5 * optax.cosine_similarity(p1, t2).mean(), -0.5 * optax.cosine_similarity(p2, t1).mean()


def ema_update(online: nnx.Module, target: nnx.Module, tau: float) -> nnx.Module:
    """BYOL's ξ ← τ·ξ + (1 − τ)·θ, in place; returns target. Raises ValueError unless τ is in [0, 1]."""
    check_scalar("ema_update", "tau", tau, 0.0, 1.0)
    online_p, target_p = nnx.state(online, nnx.Param), nnx.state(target, nnx.Param)
    # GRAD-FLOW: the EMA target update is a parameter write, outside any graph
    nnx.update(target, optax.incremental_update(new_tensors=online_p, old_tensors=target_p, step_size=1.0 - tau))
    return target


@nnx.jit(static_argnames="variant")
def train_step(model: Siamese, optimizer: nnx.Optimizer, views: tuple, tau: jax.Array, variant: str):
    """One SGD step of online and predictor, then BYOL's EMA target update; returns (loss before the
    step, gradient State, {term: the views' gradients (x1, x2) [B, D]} in the simsiam variants)."""

    def terms(model: Siamese, views: tuple) -> tuple[jax.Array, jax.Array]:
        z1, z2 = model.online(views[0]), model.online(views[1])
        t1, t2 = targets(model, z1, z2, views, variant)
        return symmetric_loss(model.predictor(z1), model.predictor(z2), t1, t2, variant)

    view_grads = {}
    if variant != "byol":
        for i, name in enumerate(("term12", "term21")):
            view_grads[name] = jax.grad(lambda v, i=i: terms(model, v)[i])(views)
    loss, grads = nnx.value_and_grad(lambda m: sum(terms(m, views)))(model)
    optimizer.update(model, nnx.filter_state(grads, LEARNED))
    if variant == "byol":
        ema_update(model.online, model.target, tau)
    return loss, grads, view_grads


@scenario_run("siamese_stop")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/<net>/<param> and params/<net>/<param> after one step for online, predictor
    (and target for byol); view_grads/{term12,term21}/{x1,x2} [B, D] (simsiam variants)."""
    model = build_model(fx)
    before = params_of(model)
    # GRAD-FLOW: the optimizer holds online and predictor only
    optimizer = nnx.Optimizer(model, transformation(optax.sgd, fx.scalar("lr")), wrt=LEARNED)
    views = (field(fx, "x1"), field(fx, "x2"))
    loss, grads, view_grads = train_step(model, optimizer, views, field(fx, "tau"), variant)
    out = {}
    for name, (g1, g2) in view_grads.items():
        out.update({f"view_grads/{name}/x1": g1, f"view_grads/{name}/x2": g2})
    nets = ("online", "predictor", "target") if variant == "byol" else ("online", "predictor")
    out.update({f"grads/{k}": g for k, g in grads_of(grads, before).items() if k.split("/")[0] in nets})
    out.update({f"params/{k}": v for k, v in params_of(model).items() if k.split("/")[0] in nets})
    out["loss"] = numpy(loss)
    return out
