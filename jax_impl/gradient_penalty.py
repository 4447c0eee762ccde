"""gradient_penalty: WGAN-GP's critic loss, with the gradient penalty differentiated to second order.

Gradient flow: L -> critic through D(fake), D(real) and, second order, through the input
gradient g = ∇ₓD(x̂) of the penalty (a jax.grad inside the loss that nnx.grad differentiates);
the generator's samples are stopped, so it gets no gradient. no_create_graph names torch's
mistake: JAX has no switch to forget, so this side is second order in both variants.
Port note: torch.autograd.grad(D(x̂).sum(), x̂, create_graph=True) becomes
jax.grad(lambda x: D(x).sum())(x̂) inside the loss; nested grads compose with no flag.
optax.safe_norm(g, 0.0) has gradient 0 at 0, as torch.linalg.vector_norm; jnp.linalg.norm
gives NaN at the zero-gradient row (P02).
Shapes: B samples, Z noise, X data, H hidden units, O = 1 critic output.
Reference: Gulrajani et al. 2017, arXiv:1704.00028 (igul222/improved_wgan_training).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_scalar, check_variant, check_x64
from ._common import field, grads_of, load_params, numpy, scenario_run

__all__ = ["Critic", "WGAN", "build_model", "interpolates", "gradient_penalty", "critic_loss", "loss_and_grads", "run"]


class Critic(nnx.Module):
    """D(x [B, X]) [B, O] = l2(relu(l1(x)))."""

    def __init__(self, x: int, h: int, o: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(x, h, param_dtype=dtype, rngs=rngs)
        self.l2 = nnx.Linear(h, o, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jax.nn.relu(self.l1(x)))


class WGAN(nnx.Module):
    """generator: z [B, Z] -> x [B, X] (linear); critic: x -> D(x) [B, O]."""

    def __init__(self, z: int, x: int, h: int, o: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.generator = nnx.Linear(z, x, param_dtype=dtype, rngs=rngs)
        self.critic = Critic(x, h, o, dtype, rngs)


def build_model(fx) -> WGAN:
    """A WGAN loaded with the fixture's canonical parameters."""
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)  # a float64 fixture outside x64: float32 arrays
    params = fx.under("params")
    dims = fx.dims
    return load_params(
        nnx.eval_shape(lambda: WGAN(dims["Z"], dims["X"], dims["H"], dims["O"], jnp.dtype(fx.dtype), nnx.Rngs(0))),
        params,
    )


def interpolates(real: jax.Array, fake: jax.Array, eps: jax.Array) -> jax.Array:
    """x̂ = ε·real + (1 − ε)·fake of real, fake [B, X] and ε [B, 1]. Raises ValueError on a shape mismatch."""
    check_same_shape("interpolates", real=real.shape, fake=fake.shape)
    return eps * real + (1 - eps) * fake


def gradient_penalty(critic: Critic, x_hat: jax.Array, variant: str) -> tuple[jax.Array, jax.Array]:
    """(mean_b (‖∇ₓD(x̂_b)‖ − 1)² [], ‖∇ₓD(x̂_b)‖ [B]) at x̂ [B, X].

    The same in both variants: a nested jax.grad is differentiable with no create_graph.
    Raises ValueError for an unknown variant. Reference: Gulrajani et al. 2017, eq. 3.
    """
    check_variant("gradient_penalty", variant)
    # the rows are independent: the gradient of the sum is the per-row gradient
    g = jax.grad(lambda x: critic(x).sum())(x_hat)
    norms = optax.safe_norm(g, 0.0, axis=1)  # [B]; gradient 0 at g = 0 (the zero-norm row)
    return ((norms - 1) ** 2).mean(), norms


def critic_loss(model: WGAN, batch: dict[str, jax.Array], gp_weight: float, variant: str):
    """(L = mean D(fake) − mean D(real) + λ·penalty, (wasserstein [], penalty [], norms [B])) of the batch
    real [B, X], z [B, Z], eps [B, 1]. Raises ValueError for an unknown variant or gp_weight < 0."""
    check_scalar("critic_loss", "gp_weight", gp_weight, 0.0)
    # GRAD-FLOW: the critic step treats generated samples as data
    fake = jax.lax.stop_gradient(model.generator(batch["z"]))
    wasserstein = model.critic(fake).mean() - model.critic(batch["real"]).mean()
    penalty, norms = gradient_penalty(model.critic, interpolates(batch["real"], fake, batch["eps"]), variant)
    return wasserstein + gp_weight * penalty, (wasserstein, gp_weight * penalty, norms)


@nnx.jit(static_argnames="variant")
def loss_and_grads(model: WGAN, batch: dict[str, jax.Array], gp_weight: jax.Array, variant: str):
    """(L [], (wasserstein [], penalty [], norms [B]), gradient State of L), jitted."""
    # GRAD-FLOW: the penalty's gradient is second order: it needs g's graph
    grad_fn = nnx.value_and_grad(lambda m: critic_loss(m, batch, gp_weight, variant), has_aux=True)
    (loss, aux), grads = grad_fn(model)
    return loss, aux, grads


@scenario_run("gradient_penalty")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss, loss/{wasserstein,penalty} []; grad_norms [B]; grads/<param> of L (generator and critic)."""
    model = build_model(fx)
    batch = {k: field(fx, k) for k in ("real", "z", "eps")}
    loss, (wasserstein, penalty, norms), grads = loss_and_grads(model, batch, field(fx, "gp_weight"), variant)
    out = {"loss": numpy(loss), "loss/wasserstein": numpy(wasserstein), "loss/penalty": numpy(penalty)}
    out["grad_norms"] = numpy(norms)
    out.update({f"grads/{k}": g for k, g in grads_of(grads).items()})
    return out
