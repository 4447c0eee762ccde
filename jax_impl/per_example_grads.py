"""per_example_grads: per-example gradients with jax.vmap(jax.grad), and DP-SGD's per-example clipping plus noise.

Gradient flow: vmap(grad(ℓ_i)) gives g_i [B, ...] for every parameter, one per example (their
mean is the batch gradient); DP-SGD scales each g_i to norm ≤ C, sums, adds σ·C·z, divides by B.
Port note: torch.func.vmap(torch.func.grad(f), in_dims=(None, 0, 0)) with
torch.func.functional_call(model, params, (x,)) is jax.vmap(jax.grad(f), in_axes=(None, 0, 0))
over nnx.split's state (nnx.merge plays functional_call); the clipped sum is
optax.per_example_global_norm_clip. optax.clip_by_global_norm divides by ‖g‖, torch's
clip_grad_norm_ by ‖g‖ + 1e-6: clip_after_sum clips by hand on both sides.
Shapes: B examples, D input features, H hidden units.
Reference: Abadi et al. 2016, arXiv:1607.00133 (Algorithm 1); JAX autodiff cookbook (per-example
gradients); optax per_example_global_norm_clip.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant
from ._common import MLP, field, flat, grads_of, load_params, numpy, params_of, scenario_run

__all__ = ["build_model", "example_loss", "per_example_grads", "clip_per_example", "dp_gradient", "dp_step", "run"]


def build_model(fx) -> MLP:
    """An MLP loaded with the fixture's canonical parameters (dtype of the fixture)."""
    params = fx.under("params")
    return load_params(
        nnx.eval_shape(lambda: MLP(fx.dims["D"], fx.dims["H"], 1, jnp.dtype(fx.dtype), nnx.Rngs(0))), params
    )


def example_loss(graphdef: nnx.GraphDef, params: nnx.State, x_i: jax.Array, y_i: jax.Array) -> jax.Array:
    """ℓ_i = 0.5·(pred(x_i) − y_i)² of one example x_i [D], y_i [], the model merged from `params`."""
    pred = nnx.merge(graphdef, params)(x_i[None])  # [1, 1]
    return 0.5 * (pred[0, 0] - y_i) ** 2


def per_example_grads(model: MLP, x: jax.Array, y: jax.Array) -> nnx.State:
    """The parameter State with a leading B axis: the gradient of each example's loss ℓ_i, for x [B, D], y [B].

    Raises ValueError unless x and y agree on B.
    """
    check_same_shape("per_example_grads", x_batch=x.shape[:1], y=y.shape)
    graphdef, params = nnx.split(model, nnx.Param)
    grad_one = jax.grad(lambda p, x_i, y_i: example_loss(graphdef, p, x_i, y_i))
    return jax.vmap(grad_one, in_axes=(None, 0, 0))(
        params, x, y
    )  # GRAD-FLOW: one gradient per example, not the batch sum


def clip_per_example(per_example: nnx.State, l2_norm_clip: jax.Array) -> tuple[nnx.State, jax.Array]:
    """(Σ_i g_i·min(1, C/‖g_i‖) per parameter, number of examples clipped): optax.per_example_global_norm_clip.

    ‖g_i‖ is the global norm of example i over every parameter.
    """
    return optax.per_example_global_norm_clip(per_example, l2_norm_clip=l2_norm_clip)


def dp_gradient(per_example: nnx.State, noise: nnx.State, hyper: dict, variant: str) -> tuple[nnx.State, jax.Array]:
    """((clipped sum + σ·C·z) / B per parameter, number clipped); clip_after_sum clips the summed gradient.

    hyper: l2_norm_clip C, noise_multiplier σ (scalars); noise: z, a State like the parameters.
    Reference: Abadi et al. 2016, Algorithm 1.
    """
    check_variant("per_example_grads", variant)
    c, b = hyper["l2_norm_clip"], jax.tree.leaves(per_example)[0].shape[0]
    if variant == "dp_sgd":
        clipped, num_clipped = clip_per_example(per_example, l2_norm_clip=c)
    else:  # the wrong order: the batch gradient clipped as a whole
        summed = jax.tree.map(lambda g: g.sum(0), per_example)
        norm = optax.tree.norm(summed)
        clipped, num_clipped = jax.tree.map(lambda g: g * jnp.minimum(c / norm, 1.0), summed), (norm > c).sum()
    return jax.tree.map(lambda g, z: (g + hyper["noise_multiplier"] * c * z) / b, clipped, noise), num_clipped


@nnx.jit(static_argnames="variant")
def dp_step(model: MLP, noise_model: MLP, x: jax.Array, y: jax.Array, hyper: dict, variant: str):
    """The gradients of one DP-SGD step on x [B, D], y [B]: (loss [], gradient State of the mean loss,
    per-example gradients, DP gradient, number clipped, per-example norms [B]); noise_model holds z. Jitted."""
    per_example = per_example_grads(model, x, y)
    noise = nnx.state(noise_model, nnx.Param)
    dp, num_clipped = dp_gradient(per_example, noise, hyper, variant)
    norms = jax.vmap(optax.tree.norm)(per_example)
    loss, grads = nnx.value_and_grad(lambda m: 0.5 * jnp.mean((m(x).squeeze(-1) - y) ** 2))(model)  # the batch gradient
    return loss, grads, per_example, dp, num_clipped, norms


@scenario_run("per_example_grads")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; norms [B]; num_clipped [] int64; grads/<param> (batch gradient of the mean loss);
    per_example/<param> [B, ...]; dp_grads/<param>; params/<param> after one DP-SGD step."""
    model = build_model(fx)
    x, y = field(fx, "x"), field(fx, "y")
    noise_model = load_params(nnx.clone(model), fx.under("noise"))

    hyper = {k: field(fx, k) for k in ("l2_norm_clip", "noise_multiplier")}
    loss, grads, per_example, dp, num_clipped, norms = dp_step(model, noise_model, x, y, hyper, variant)

    out = {"loss": numpy(loss), "num_clipped": numpy(num_clipped).astype(np.int64)}
    out["norms"] = numpy(norms)
    out.update({f"grads/{k}": v for k, v in grads_of(grads).items()})

    out.update({f"per_example/{k}": v for k, v in flat(per_example).items()})
    out.update({f"dp_grads/{k}": v for k, v in flat(dp).items()})
    optimizer = nnx.Optimizer(model, optax.sgd(fx.scalar("lr")), wrt=nnx.Param)

    optimizer.update(model, dp)

    out.update({f"params/{k}": v for k, v in params_of(model).items()})
    return out
