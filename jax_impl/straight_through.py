"""straight_through: a VQ-VAE quantizer's straight-through estimator, its two stopped losses, the EMA codebook.

Gradient flow: recon -> decoder, and -> encoder through z_e + stop_gradient(z_q − z_e) (never
the codebook); codebook loss mean((stop_gradient(z_e) − z_q)²) -> codebook only; commitment
mean((z_e − stop_gradient(z_q))²) -> encoder only. ema_codebook: the codebook is written with
nnx from the EMA statistics after the gradient, never by a gradient.
Port note: `.detach()` becomes `jax.lax.stop_gradient` on the same operand; jnp.round and
jnp.sign have zero derivatives, like torch.round / torch.sign, so the estimator is the only
path. Second order: nested jax.grad needs no flag and gives the identity's Hessian through
the estimator (1 for 0.5·(y − t)²), as torch's create_graph=True double backward does.
Shapes: B rows, D input features, K latent dimensions, C codebook entries.
Reference: van den Oord et al. 2017, arXiv:1711.00937; DeepMind Sonnet, sonnet/src/nets/vqvae.py.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_scalar, check_variant, check_x64
from ._common import field, grads_of, load_params, params_of, scenario_run, transformation

__all__ = [
    "VQVAE",
    "build_model",
    "straight_through",
    "quantize",
    "vq_losses",
    "ema_update",
    "second_order",
    "train_step",
    "run",
]


class _EmaStat(nnx.Variable):
    """EMA statistics of the codebook: state the EMA update writes, never a parameter (torch: a buffer)."""


class VQVAE(nnx.Module):
    """encoder: x [B, D] -> z_e [B, K]; codebook [C, K]; decoder: z [B, K] -> x̂ [B, D]; EMA statistics [C], [C, K]."""

    def __init__(self, d: int, k: int, c: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.encoder = nnx.Linear(d, k, param_dtype=dtype, rngs=rngs)
        self.codebook = nnx.Param(jnp.zeros((c, k), dtype))
        self.decoder = nnx.Linear(k, d, param_dtype=dtype, rngs=rngs)
        self.ema_count = _EmaStat(jnp.ones(c, dtype))
        self.ema_sum = _EmaStat(jnp.zeros((c, k), dtype))


def build_model(fx) -> VQVAE:
    """A VQVAE loaded with the fixture's parameters and EMA statistics."""
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)  # a float64 fixture outside x64: float32 arrays
    dims = fx.dims
    model = nnx.eval_shape(lambda: VQVAE(dims["D"], dims["K"], dims["C"], jnp.dtype(fx.dtype), nnx.Rngs(0)))
    load_params(model, fx.under("params"))
    model.ema_count.set_value(field(fx, "ema_count"))
    model.ema_sum.set_value(field(fx, "ema_sum"))
    return model


def straight_through(x: jax.Array, q: jax.Array) -> jax.Array:
    """x + stop_gradient(q − x): forward value q, gradient (and Hessian) of the identity in x. Same shapes."""
    check_same_shape("straight_through", x=x.shape, q=q.shape)
    return x + jax.lax.stop_gradient(q - x)  # GRAD-FLOW: straight-through: forward q, backward the identity


def quantize(z_e: jax.Array, codebook: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(z_q [B, K] = codebook[k], k [B] int): the nearest code of each z_e [B, K] (first on a tie)."""
    distances = ((z_e[:, None, :] - codebook[None]) ** 2).sum(-1)  # [B, C]
    codes = jnp.argmin(distances, axis=1)
    return codebook[codes], codes


def vq_losses(model: VQVAE, x: jax.Array, variant: str) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    """({recon, codebook, commit} scalar losses of x [B, D], z_e [B, K], codes [B]); no codebook term with EMA.

    Raises ValueError for an unknown variant. Reference: van den Oord et al. 2017, eq. 3.
    """
    check_variant("straight_through", variant)
    z_e = model.encoder(x)
    z_q, codes = quantize(z_e, model.codebook[...])
    z = z_q if variant == "no_straight_through" else straight_through(z_e, z_q)
    losses = {"recon": jnp.mean((model.decoder(z) - x) ** 2)}
    if variant != "ema_codebook":
        # GRAD-FLOW: the codebook loss moves the codes only
        losses["codebook"] = jnp.mean((jax.lax.stop_gradient(z_e) - z_q) ** 2)
    # GRAD-FLOW: the commitment loss moves the encoder only
    losses["commit"] = jnp.mean((z_e - jax.lax.stop_gradient(z_q)) ** 2)
    return losses, z_e, codes


def ema_update(model: VQVAE, z_e: jax.Array, codes: jax.Array, decay: float, eps: float) -> None:
    """Sonnet's VectorQuantizerEMA step on z_e [B, K] assigned to codes [B]: statistics, then the codebook, in place.

    Raises ValueError unless decay is in [0, 1) and eps > 0.
    """
    check_scalar("ema_update", "decay", decay, 0.0, 1.0, high_open=True)
    check_scalar("ema_update", "eps", eps, 0.0, low_open=True)
    onehot = jax.nn.one_hot(codes, model.codebook.shape[0], dtype=z_e.dtype)  # [B, C]
    count = optax.incremental_update(onehot.sum(0), model.ema_count[...], 1.0 - decay)
    sums = optax.incremental_update(onehot.T @ z_e, model.ema_sum[...], 1.0 - decay)
    total = count.sum()
    smoothed = (count + eps) / (total + count.shape[0] * eps) * total  # Laplace
    # GRAD-FLOW: the EMA codebook update is a parameter write, outside any graph
    model.ema_count[...], model.ema_sum[...], model.codebook[...] = count, sums, sums / smoothed[:, None]


@functools.partial(jax.jit, static_argnames="rounding")
def second_order(u: jax.Array, t: jax.Array, rounding: str) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(y, dL/du, d²L/du² diagonal) of L = 0.5·Σ(y − t)², y = straight_through(u, round(u) or sign(u)), all [B, K]."""

    def loss(v):
        return 0.5 * jnp.sum((straight_through(v, jnp.round(v) if rounding == "round" else jnp.sign(v)) - t) ** 2)

    y = straight_through(u, jnp.round(u) if rounding == "round" else jnp.sign(u))
    # L is a sum over elements: its Hessian is diagonal
    return y, jax.grad(loss)(u), jax.grad(lambda v: jax.grad(loss)(v).sum())(u)


@nnx.jit(static_argnames="variant")
def train_step(model: VQVAE, optimizer: nnx.Optimizer, x, beta, decay, eps, variant: str):
    """One SGD step on recon + codebook + β·commit (then the EMA codebook update in ema_codebook); returns
    ({term: loss}, codes [B], quantized [B, K], {term: its gradient State}), all before the step. Jitted."""
    losses, _, codes = vq_losses(model, x, variant)
    terms = {n: nnx.grad(lambda m, n=n: vq_losses(m, x, variant)[0][n])(model) for n in losses}

    def total(m):
        parts, z_e, codes = vq_losses(m, x, variant)
        return parts["recon"] + parts.get("codebook", 0.0) + beta * parts["commit"], (z_e, codes)

    (_, (z_e, _)), grads = nnx.value_and_grad(total, has_aux=True)(model)
    quantized = model.codebook[...][codes]
    optimizer.update(model, grads)
    if variant == "ema_codebook":
        ema_update(model, z_e, codes, decay, eps)
    return losses, codes, quantized, terms


@scenario_run("straight_through")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss/<term> [], codes [B], quantized [B, K], grads/<term>/<param>, params/<param> after one
    SGD step (ema_codebook: codebook from the EMA, ema/count [C], ema/sum [C, K]), st/{round,sign}/{value,grad,second}."""
    model = build_model(fx)
    optimizer = nnx.Optimizer(model, transformation(optax.sgd, fx.scalar("lr")), wrt=nnx.Param)
    hyper = (field(fx, "beta"), field(fx, "decay"), field(fx, "ema_eps"))
    losses, codes, quantized, terms = train_step(model, optimizer, field(fx, "x"), *hyper, variant)
    out = {f"loss/{name}": value for name, value in losses.items()}
    out.update(codes=codes.astype(jnp.int32), quantized=quantized)
    for name, grads in terms.items():
        out.update({f"grads/{name}/{k}": g for k, g in grads_of(grads).items()})
    if variant == "ema_codebook":
        out.update({"ema/count": model.ema_count[...], "ema/sum": model.ema_sum[...]})
    out.update({f"params/{k}": v for k, v in params_of(model).items()})
    for rounding in ("round", "sign"):
        y, grad, second = second_order(field(fx, "u"), field(fx, "t"), rounding)
        out.update({f"st/{rounding}/value": y, f"st/{rounding}/grad": grad})
        out[f"st/{rounding}/second"] = second
    return out
