"""gan: one discriminator step and one generator step of a tiny GAN.

Gradient flow: D step: L_D -> D's parameters, and -/-> G through stop_gradient(G(z))
(without the stop, the gradient with respect to G is non-zero); G step: L_G ->
D(fake) -> through D (its gradient is computed but only G's optimizer steps) -> G.
Port note: jax.grad differentiates what it is asked to; the stop matters here
because the gradient is taken over the whole model (as torch's backward() does).
Each optimizer is given one network (nnx.Optimizer(model.disc, ...)). optax.adam
and torch.optim.Adam share eps = 1e-8; betas (0.5, 0.999) are set on both.
Shapes: B samples, Z noise, X data, H hidden units, O = 1 logit.
Reference: Goodfellow et al. 2014, arXiv:1406.2661.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_values, check_variant, check_x64
from ._common import (
    StepCall,
    field,
    grads_of,
    load_params,
    numpy,
    params_of,
    scenario_run,
    scenario_step,
    step_of,
    transformation,
)

__all__ = [
    "MLP",
    "GAN",
    "build_model",
    "make_optimizers",
    "bce_with_logits",
    "discriminator_loss",
    "generator_loss",
    "discriminator_step",
    "generator_step",
    "step_calls",
    "make_step",
    "run",
]


class MLP(nnx.Module):
    """y [B, out] = l2(tanh(l1(x [B, in])))."""

    def __init__(self, d_in: int, h: int, d_out: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(d_in, h, param_dtype=dtype, rngs=rngs)
        self.l2 = nnx.Linear(h, d_out, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jnp.tanh(self.l1(x)))


class GAN(nnx.Module):
    """gen: z [B, Z] -> sample [B, X]; disc: x [B, X] -> logit [B, O]."""

    def __init__(self, z: int, x: int, h: int, o: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.gen = MLP(z, h, x, dtype, rngs)
        self.disc = MLP(x, h, o, dtype, rngs)


def build_model(fx) -> GAN:
    """A GAN loaded with the fixture's canonical parameters.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under("params")
    dims = fx.dims
    return load_params(
        nnx.eval_shape(lambda: GAN(dims["Z"], dims["X"], dims["H"], dims["O"], jnp.dtype(fx.dtype), nnx.Rngs(0))),
        params,
    )


def make_optimizers(model: GAN, fx) -> tuple[nnx.Optimizer, nnx.Optimizer]:
    """(d_opt, g_opt): optax.adam(lr, b1, b2, eps) over the discriminator and over the generator.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("make_optimizers", fx.dtype, jax.config.jax_enable_x64)
    tx = transformation(optax.adam, fx.scalar("lr"), b1=fx.scalar("b1"), b2=fx.scalar("b2"), eps=fx.scalar("eps"))
    d_opt = nnx.Optimizer(model.disc, tx, wrt=nnx.Param)  # GRAD-FLOW: the discriminator step updates only D
    g_opt = nnx.Optimizer(model.gen, tx, wrt=nnx.Param)  # GRAD-FLOW: the generator step updates only G
    return d_opt, g_opt


def bce_with_logits(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean binary cross-entropy of logits [B, O] against labels [B, O] in [0, 1].

    Raises ValueError on a shape mismatch or a label outside [0, 1].
    """
    check_same_shape("bce_with_logits", logits=logits.shape, labels=labels.shape)
    check_values("bce_with_logits", "labels", labels, low=0.0, high=1.0)
    return optax.sigmoid_binary_cross_entropy(logits, labels).mean()


def discriminator_loss(gen: MLP, disc: MLP, real: jax.Array, z: jax.Array, variant: str) -> jax.Array:
    """L_D = bce(D(real [B, X]), 1) + bce(D(G(z [B, Z])), 0); the generated batch is stopped in "fake_stopped"."""
    check_variant("gan", variant)
    fake = gen(z)  # [B, X]
    if variant == "fake_stopped":
        fake = jax.lax.stop_gradient(fake)  # GRAD-FLOW: the discriminator step treats generated samples as data
    real_logits, fake_logits = disc(real), disc(fake)  # [B, O] each
    return bce_with_logits(real_logits, jnp.ones_like(real_logits)) + bce_with_logits(
        fake_logits, jnp.zeros_like(fake_logits)
    )


def generator_loss(gen: MLP, disc: MLP, z: jax.Array) -> jax.Array:
    """Non-saturating L_G = bce(D(G(z)), 1) = mean(-log σ(D(G(z)))); the gradient flows through D into G."""
    fake_logits = disc(gen(z))  # [B, O]
    return bce_with_logits(fake_logits, jnp.ones_like(fake_logits))


@nnx.jit(static_argnames="variant")
def discriminator_step(model: GAN, d_opt: nnx.Optimizer, real: jax.Array, z: jax.Array, variant: str):
    """One Adam step on D; returns (L_D before the step, gradient State of every parameter)."""
    check_variant("gan", variant)
    # the gradient over the whole model, as torch's backward() computes it
    loss, grads = nnx.value_and_grad(lambda m: discriminator_loss(m.gen, m.disc, real, z, variant))(model)
    d_opt.update(model.disc, grads["disc"])
    return loss, grads


@nnx.jit
def generator_step(model: GAN, g_opt: nnx.Optimizer, z: jax.Array):
    """One Adam step on G; returns (L_G before the step, gradient State of every parameter)."""
    loss, grads = nnx.value_and_grad(lambda m: generator_loss(m.gen, m.disc, z))(model)
    g_opt.update(model.gen, grads["gen"])
    return loss, grads


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one discriminator_step, then one generator_step, of a model built from the fixture."""
    model = build_model(fx)
    d_opt, g_opt = make_optimizers(model, fx)
    real, z = field(fx, "real"), field(fx, "z")
    return [
        StepCall(discriminator_step, (model, d_opt), (real, z), {"variant": variant}),
        StepCall(generator_step, (model, g_opt), (z,)),
    ]


@scenario_step("gan")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One discriminator_step then one generator_step (Adam each); returns L_D + L_G, each before its update."""
    return step_of(step_calls(fx, variant))


@scenario_run("gan")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs per step s in {d_step, g_step}: s/loss [], s/grads/<param>, s/params/<param> after the step,
    s/moved/<param> = after - before."""
    model = build_model(fx)
    d_opt, g_opt = make_optimizers(model, fx)
    real, z = field(fx, "real"), field(fx, "z")
    start = params_of(model)
    d_loss, d_grads = discriminator_step(model, d_opt, real, z, variant)
    mid = params_of(model)
    g_loss, g_grads = generator_step(model, g_opt, z)
    end = params_of(model)
    return {
        **_outputs("d_step", d_loss, grads_of(d_grads), start, mid),
        **_outputs("g_step", g_loss, grads_of(g_grads), mid, end),
    }


def _outputs(step, loss, grads, before, after):
    out = {f"{step}/loss": numpy(loss)}
    out.update({f"{step}/grads/{k}": g for k, g in grads.items()})
    out.update({f"{step}/params/{k}": v for k, v in after.items()})
    out.update({f"{step}/moved/{k}": after[k] - before[k] for k in after})
    return out
