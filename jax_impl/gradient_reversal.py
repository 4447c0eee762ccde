"""gradient_reversal: custom backward passes, the gradient reversal layer (DANN) and a clip-gradient op.

Gradient flow: label loss -> label predictor -> features; domain loss -> domain classifier
-> R(h) -> features, where R is the identity forward and its backward is −λ·g (reversal),
g (no_reversal) or clip(g, lo, hi) (clipped): jax.custom_vjp functions.
Port note: each op is a jax.custom_vjp function with defvjp(fwd, bwd); bwd(residuals, g)
returns a tuple with one cotangent per primal input (zeros_like(λ), or None as the JAX guide
does for lo, hi). A custom_vjp function has no JVP: jax.jvp / jax.jacfwd raise; the torch
twin is a torch.autograd.Function with setup_context, which torch.func.grad accepts.
Shapes: B samples, D inputs, H features, C classes, O = 1 domain logit.
Reference: Ganin & Lempitsky 2015, arXiv:1409.7495; JAX docs, Custom derivative rules (clip_gradient).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_scalar, check_variant, check_x64
from ._common import field, grads_of, load_params, numpy, scenario_run

__all__ = [
    "DANN",
    "build_model",
    "reverse_gradient",
    "clip_gradient",
    "domain_input",
    "dann_losses",
    "losses_and_grads",
    "run",
]


class DANN(nnx.Module):
    """feature: x [B, D] -> h [B, H] (tanh); label: h -> logits [B, C]; domain: R(h) -> logit [B, O]."""

    def __init__(self, d: int, h: int, c: int, o: int, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.feature = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.label = nnx.Linear(h, c, param_dtype=dtype, rngs=rngs)
        self.domain = nnx.Linear(h, o, param_dtype=dtype, rngs=rngs)


def build_model(fx) -> DANN:
    """A DANN loaded with the fixture's canonical parameters."""
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)  # a float64 fixture outside x64: float32 arrays
    params = fx.under("params")
    dims = fx.dims
    return load_params(
        nnx.eval_shape(lambda: DANN(dims["D"], dims["H"], dims["C"], dims["O"], jnp.dtype(fx.dtype), nnx.Rngs(0))),
        params,
    )


@jax.custom_vjp
def reverse_gradient(x: jax.Array, lam: jax.Array) -> jax.Array:
    """The gradient reversal layer: x [B, H] unchanged forward; backward −λ·g, a zero cotangent for λ (0-d)."""
    return x


def _reverse_fwd(x, lam):
    return x, lam


def _reverse_bwd(lam, grad):
    return -lam * grad, jnp.zeros_like(lam)  # GRAD-FLOW: gradient reversal: identity forward, −λ·g backward


reverse_gradient.defvjp(_reverse_fwd, _reverse_bwd)


@jax.custom_vjp
def clip_gradient(lo: jax.Array, hi: jax.Array, x: jax.Array) -> jax.Array:
    """x unchanged forward; backward clip(g, lo, hi) elementwise, no cotangent (None) for lo, hi (0-d)."""
    return x


def _clip_fwd(lo, hi, x):
    return x, (lo, hi)


def _clip_bwd(bounds, grad):
    lo, hi = bounds
    return None, None, jnp.clip(grad, lo, hi)  # GRAD-FLOW: the cotangent is clipped elementwise to [lo, hi]


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


def domain_input(h: jax.Array, hyper: dict[str, jax.Array], variant: str) -> jax.Array:
    """R(h [B, H]) per variant: reverse_gradient(h, λ), h, or clip_gradient(lo, hi, h). Raises ValueError for an unknown variant or λ < 0."""
    check_variant("gradient_reversal", variant)
    if variant == "reversal":
        check_scalar("domain_input", "lam", hyper["lam"], 0.0)  # here, not in the op: it also runs under torch.func
        return reverse_gradient(h, hyper["lam"])
    if variant == "clipped":
        return clip_gradient(hyper["clip_lo"], hyper["clip_hi"], h)
    return h


def dann_losses(model: DANN, batch: dict[str, jax.Array], hyper: dict[str, jax.Array], variant: str):
    """(label loss [], domain loss [], h [B, H], R(h) [B, H]); label loss over source rows (domain 0) only.

    Raises ValueError on an unknown variant, or logits and targets of different shapes.
    Reference: Ganin & Lempitsky 2015, eq. 9-10.
    """
    h = jnp.tanh(model.feature(batch["x"]))  # [B, H]
    source = 1.0 - batch["domains"]  # [B], 1 on source rows
    label = (
        optax.softmax_cross_entropy_with_integer_labels(model.label(h), batch["labels"]) * source
    ).sum() / source.sum()
    reversed_h = domain_input(h, hyper, variant)
    logit = model.domain(reversed_h)[:, 0]  # [B]
    check_same_shape("dann_losses", domain_logit=logit.shape, domains=batch["domains"].shape)
    return label, optax.sigmoid_binary_cross_entropy(logit, batch["domains"]).mean(), h, reversed_h


@functools.partial(nnx.jit, static_argnames=("names", "variant"))
def losses_and_grads(model: DANN, batch: dict, hyper: dict, names: tuple[str, ...], variant: str):
    """(label loss [], domain loss [], {loss: parameter gradient State}, d domain / d R(h) at the head [B, H],
    d domain / dh the features receive [B, H], {name: d domain / d hyper[name]} for `names`), jitted."""
    label, domain, h, _ = dann_losses(model, batch, hyper, variant)
    grads = {
        "label_loss": nnx.grad(lambda m: dann_losses(m, batch, hyper, variant)[0])(model),
        "domain_loss": nnx.grad(lambda m: dann_losses(m, batch, hyper, variant)[1])(model),
    }
    head_loss = lambda r: optax.sigmoid_binary_cross_entropy(model.domain(r)[:, 0], batch["domains"]).mean()
    received = jax.grad(lambda z: head_loss(domain_input(z, hyper, variant)))(h)
    own = {k: hyper[k] for k in names}
    hyper_grads = jax.grad(lambda hp: dann_losses(model, batch, {**hyper, **hp}, variant)[1])(own) if own else {}
    return label, domain, grads, jax.grad(head_loss)(h), received, hyper_grads


@scenario_run("gradient_reversal")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss/{label,domain} []; grads/{label_loss,domain_loss}/<param>; feature_grads/{head,received}
    [B, H]; grads/hyper/<name> [] for the λ or the bounds the variant uses."""
    model = build_model(fx)
    batch = {k: field(fx, k) for k in ("x", "labels", "domains")}
    names = fx.spec.constants["hyper"][variant]  # the hyper-parameters the variant's op takes
    hyper = {k: field(fx, k) for k in ("lam", "clip_lo", "clip_hi")}
    label, domain, grads, head, received, hyper_grads = losses_and_grads(model, batch, hyper, tuple(names), variant)
    out = {"loss/label": numpy(label), "loss/domain": numpy(domain)}
    for name, g in grads.items():
        out.update({f"grads/{name}/{k}": v for k, v in grads_of(g).items()})
    out.update({"feature_grads/head": numpy(head), "feature_grads/received": numpy(received)})
    out.update({f"grads/hyper/{k}": numpy(g) for k, g in hyper_grads.items()})
    return out
