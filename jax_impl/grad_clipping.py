"""grad_clipping: truncated-BPTT training of an Elman RNN with global-norm clipping and optax.sgd.

Gradient flow: each window starts from a constant carry (truncation: h is a jit input that
value_and_grad does not differentiate, so no stop_gradient is needed); the window's loss
flows to every parameter; the clip transformation then rescales the gradient pytree by
one factor, direction kept. It needs no stop_gradient: it runs on the gradients, after
jax.grad.
Port note: optax.clip_by_global_norm leaves ‖g‖ < max_norm untouched and otherwise scales
by max_norm / ‖g‖; torch's clip_grad_norm_ always scales by min(max_norm / (‖g‖ + 1e-6), 1).
`clip_by_global_norm_torch` is torch's formula as an optax transformation (optax.stateless
+ optax.tree.scale), used by the `torch_formula` variant; `optax_default` uses plain optax.
Shapes: T = S·K steps, B sequences, I inputs, H hidden units, O outputs.
Reference: Pascanu et al. 2013, arXiv:1211.5063.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..shared.core.checks import check_same_shape, check_scalar, check_values, check_variant, check_x64
from ._common import field, flat, nested, numpy, scenario_run, scenario_step

__all__ = [
    "Recurrent",
    "build_model",
    "masked_loss",
    "clip_by_global_norm_torch",
    "train_step",
    "NO_STEP_CALLS",
    "make_step",
    "run",
]

TORCH_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6)


class Recurrent:
    """h_t = tanh(x_t W_ih + b_ih + h_{t-1} W_hh + b_hh) (torch's two biases); y_t [B, O] = readout(h_t).

    Stateless: params is the canonical pytree {"cell": {"ih", "hh"}, "readout"}, each {"kernel", "bias"}.
    """

    def __call__(self, params: dict, xs: jax.Array, h: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Unroll a window xs [K, B, I] from h [B, H]: (outputs [K, B, O], last hidden state [B, H])."""
        c, out = params["cell"], params["readout"]

        def step(h, x_t):
            h = jnp.tanh(x_t @ c["ih"]["kernel"] + c["ih"]["bias"] + h @ c["hh"]["kernel"] + c["hh"]["bias"])
            return h, h @ out["kernel"] + out["bias"]

        h, ys = jax.lax.scan(step, h, xs)
        return ys, h


def build_model(fx) -> tuple[Recurrent, dict]:
    """(Recurrent, canonical parameter pytree) from the fixture.

    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    return Recurrent(), nested(fx.under("params"))


def masked_loss(y: jax.Array, target: jax.Array, mask: jax.Array, weight: jax.Array) -> jax.Array:
    """weight * 0.5 * mean(mask * (y - target)^2) over y, target [K, B, O], mask [K, B] (0 = padding).

    Raises ValueError if y and target shapes differ, or mask is not [K, B] with values in {0, 1}.
    """
    check_same_shape("masked_loss", y=y.shape, target=target.shape)
    check_same_shape("masked_loss", y_steps=y.shape[:-1], mask=mask.shape)
    check_values("masked_loss", "mask", mask, choices=(0.0, 1.0))
    return weight * 0.5 * jnp.mean((mask[..., None] * (y - target)) ** 2)


def clip_by_global_norm_torch(max_norm: jax.Array | float) -> optax.GradientTransformation:
    """torch.nn.utils.clip_grad_norm_ as an optax transformation: g * min(max_norm / (‖g‖ + 1e-6), 1).

    Stateless. Only the norm's value is used, never differentiated (its gradient at an
    all-zero tree is NaN, P02); all-zero gradients give coefficient 1 and stay zero.
    Raises ValueError unless max_norm > 0 (a negative one flips g; a traced one is checked by its caller).
    """
    check_scalar("clip_by_global_norm_torch", "max_norm", max_norm, 0.0, low_open=True)

    def scale(updates, params=None):
        coef = jnp.minimum(max_norm / (optax.tree.norm(updates) + TORCH_EPS), 1.0)
        return optax.tree.scale(coef, updates)

    return optax.stateless(scale)


@functools.partial(jax.jit, static_argnames=("variant",))
def train_step(params, h, xs, targets, mask, max_norm, weight, lr, variant: str):
    """One window: forward from a constant carry (not differentiated), gradient, clip, SGD step.

    Returns (new params, stats [3] = loss, norm before and after clipping; carry for the next window).
    """
    check_variant("grad_clipping", variant)

    def loss_fn(p, h):
        ys, h = Recurrent()(p, xs, h)
        return masked_loss(ys, targets, mask, weight), h

    # GRAD-FLOW: truncation: the window starts from a constant carry
    (loss, h), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, h)  # argnums=0: h is never differentiated
    clip = clip_by_global_norm_torch(max_norm) if variant == "torch_formula" else optax.clip_by_global_norm(max_norm)
    sgd = optax.sgd(lr)  # the two stages of optax.chain(clip, sgd), apart to report the clipped norm
    clipped, _ = clip.update(grads, clip.init(params))
    updates, _ = sgd.update(clipped, sgd.init(params))
    stats = jnp.stack([loss, optax.tree.norm(grads), optax.tree.norm(clipped)])
    return optax.apply_updates(params, updates), stats, h


# no step_calls (the bench's tuned forms tune fixed calls): each call trains the next window, and the
# JAX step is a pure jax.jit whose parameters and carry pass from one call to the next
NO_STEP_CALLS = "its step walks the windows, threading the parameters and the carry from call to call"


@scenario_step("grad_clipping")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One window's train_step (clip, SGD) in regime "above"; calls walk the windows, carrying h; returns its loss."""
    _, params = build_model(fx)
    lr = field(fx, "lr")
    r, k = (
        fx.spec.constants["regimes"].index("above"),
        int(fx["window"]),
    )  # "above": the gradient norm exceeds max_norm, clipping acts
    max_norm, weight = jnp.asarray(fx["max_norm"][r]), field(fx, "loss_weight")
    x, targets, masks = field(fx, "x"), field(fx, "targets"), field(fx, "mask")
    windows = [(x[s : s + k], targets[s : s + k], masks[r, s : s + k]) for s in range(0, x.shape[0], k)]
    h0 = field(fx, "h0")
    h, i = h0, 0

    def step() -> jax.Array:
        nonlocal params, h, i
        params, stats, h = train_step(params, h, *windows[i], max_norm, weight, lr, variant)
        i = (i + 1) % len(windows)
        if i == 0:
            h = h0  # the next pass over the sequence starts again from h0, as run's loop does
        return jax.block_until_ready((stats[0], params, h))[0]

    return step


@scenario_run("grad_clipping")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs per regime: loss, norms, coefs, clipped_norms [S]; moved/<param> after S steps."""
    out = {}
    k = int(fx["window"])
    x, targets, masks = fx["x"], fx["targets"], fx["mask"]  # numpy: slicing compiles nothing
    for r, regime in enumerate(fx.spec.constants["regimes"]):
        _, params = build_model(fx)
        max_norm, weight, lr = fx["max_norm"][r], fx["loss_weight"], fx["lr"]
        before, h, rows = flat(params), field(fx, "h0"), []
        for start in range(0, x.shape[0], k):
            w = slice(start, start + k)
            params, stats, h = train_step(params, h, x[w], targets[w], masks[r, w], max_norm, weight, lr, variant)
            rows.append(numpy(stats))
        loss, norms, clipped = np.stack(rows).T
        out.update({f"{regime}/loss": loss, f"{regime}/norms": norms, f"{regime}/clipped_norms": clipped})
        out[f"{regime}/coefs"] = np.divide(clipped, norms, out=np.ones_like(norms), where=norms > 0)  # 1 where g = 0
        after = flat(params)
        out.update({f"{regime}/moved/{leaf}": after[leaf] - before[leaf] for leaf in before})
    return out
