"""gumbel_straight_through: the straight-through Gumbel-softmax with the noise given.

Gradient flow: loss -> decoder, and -> logits through y_soft only: y_hard −
stop_gradient(y_soft) + y_soft is one-hot forward and y_soft's gradient backward (hard); soft
is y_soft itself; hard_no_straight_through feeds the argmax one-hot, which has no path to the logits.
Port note: torch's F.gumbel_softmax(logits, tau, hard=True) draws its own noise; this port
takes the fixture's noise (jax.random.gumbel(key, shape) for fresh noise) and writes the
three lines in torch's order, y_hard − stop_gradient(y_soft) + y_soft, so the forward values
round alike. jax.nn.one_hot(jnp.argmax(...)) alone has a zero gradient, silently.
Shapes: B samples, C categories, K decoder outputs.
Reference: Jang et al. 2017, arXiv:1611.01144; PyTorch torch/nn/functional.py gumbel_softmax.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_same_shape, check_scalar, check_variant
from ._common import field, grads_of, load_params, scenario_run

__all__ = ["gumbel_softmax", "one_hot_sample", "sample_categories", "decoder_loss", "sample_and_grads", "run"]


def gumbel_softmax(logits: jax.Array, gumbels: jax.Array, tau: float, hard: bool) -> jax.Array:
    """torch's F.gumbel_softmax(logits [B, C], tau, hard) with the Gumbel noise `gumbels` [B, C] given; [B, C].

    Raises ValueError if logits and gumbels differ in shape, or tau <= 0.
    """
    check_scalar("gumbel_softmax", "tau", tau, 0.0, low_open=True)
    check_same_shape("gumbel_softmax", logits=logits.shape, gumbels=gumbels.shape)
    y_soft = jax.nn.softmax((logits + gumbels) / tau, axis=-1)
    if not hard:
        return y_soft
    index = jnp.argmax(y_soft, axis=-1)
    y_hard = jax.nn.one_hot(index, logits.shape[-1], dtype=logits.dtype)
    # GRAD-FLOW: straight-through: forward one-hot, backward the soft sample's gradient
    return y_hard - jax.lax.stop_gradient(y_soft) + y_soft


def one_hot_sample(logits: jax.Array, gumbels: jax.Array, tau: float) -> jax.Array:
    """The bug: one_hot(argmax softmax((logits + gumbels)/τ)) [B, C], with a zero gradient."""
    index = jnp.argmax(jax.nn.softmax((logits + gumbels) / tau, axis=-1), axis=-1)
    return jax.nn.one_hot(index, logits.shape[-1], dtype=logits.dtype)


def sample_categories(logits: jax.Array, gumbels: jax.Array, tau: float, variant: str) -> jax.Array:
    """The variant's sample [B, C]: straight-through one-hot (hard), y_soft (soft) or the bare one-hot.

    Raises ValueError for an unknown variant.
    """
    check_variant("gumbel_straight_through", variant)
    if variant == "hard_no_straight_through":
        return one_hot_sample(logits, gumbels, tau)
    return gumbel_softmax(logits, gumbels, tau, hard=variant == "hard")


def decoder_loss(decoder: nnx.Linear, y: jax.Array, target: jax.Array) -> jax.Array:
    """0.5·mean((decoder(y [B, C]) − target [B, K])²). Raises ValueError on a shape mismatch."""
    decoded = decoder(y)
    check_same_shape("decoder_loss", decoded=decoded.shape, target=target.shape)
    return 0.5 * jnp.mean((decoded - target) ** 2)


@functools.partial(nnx.jit, static_argnames="variant")
def sample_and_grads(decoder: nnx.Linear, logits, gumbels, tau, target, variant: str):
    """(sample y [B, C], soft sample [B, C], index [B] int32, loss [], d loss / d logits [B, C], decoder
    gradient State) of the decoder's loss on the sample, jitted."""

    def loss_fn(dec, lg):
        y = sample_categories(lg, gumbels, tau, variant)
        return decoder_loss(dec, y, target), y

    (loss, y), (g_decoder, g_logits) = nnx.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(decoder, logits)
    soft = jax.nn.softmax((logits + gumbels) / tau, axis=-1)
    return y, soft, jnp.argmax(soft, axis=-1).astype(jnp.int32), loss, g_logits, g_decoder


@scenario_run("gumbel_straight_through")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: sample, soft_sample [B, C]; index [B] int32; loss []; grads/logits [B, C], grads/decoder/<param>."""
    c, k = fx.dims["C"], fx.dims["K"]
    decoder = load_params(
        nnx.eval_shape(lambda: nnx.Linear(c, k, param_dtype=jnp.dtype(fx.dtype), rngs=nnx.Rngs(0))),
        {"kernel": fx["params/decoder/kernel"], "bias": fx["params/decoder/bias"]},
    )
    logits, gumbels, tau = field(fx, "logits"), field(fx, "gumbels"), field(fx, "tau")
    y, soft, index, loss, g_logits, g_decoder = sample_and_grads(
        decoder, logits, gumbels, tau, field(fx, "target"), variant
    )
    out = {"sample": y, "soft_sample": soft, "index": index}
    out.update(loss=loss, **{"grads/logits": g_logits})
    out.update({f"grads/decoder/{name}": v for name, v in grads_of(g_decoder).items()})
    return out
