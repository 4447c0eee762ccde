"""Worked port 1, JAX side: the CNN classifier with BatchNorm in Flax NNX, correct and with one bug each.

The correct port: nnx.Conv (kernels [kh, kw, in/groups, out], images transposed to channels
last), a BatchNorm with torch's running-statistics rule (momentum m on the batch, unbiased
running variance: nnx.BatchNorm has neither), nnx.Linear, optax SGD with momentum and
torch's coupled weight decay (optax.add_decayed_weights before the momentum trace).
Gradient flow: loss -> head -> fc -> bn2 -> conv2 -> bn1 -> conv1; the running statistics are
nnx.BatchStat, updated outside the gradient, as torch's buffers.
Port note: VARIANTS name each buggy port's pitfall. `bn_momentum` writes nnx.BatchNorm(momentum=0.1)
(the weight of the old statistics in nnx: P06); `bn_biased_var` writes nnx.BatchNorm(momentum=0.9),
right, but nnx keeps the biased batch variance (P06); `fc_layout` loads the weights with its own
loader that copies the square fc weight without the transpose (P07, checked with transfer=False).
Shapes: B batch, H, W image, C channels, K classes.
Reference: Flax docs, flax.nnx.BatchNorm and flax.nnx.Conv; Ioffe & Szegedy 2015, arXiv:1502.03167.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

__all__ = ["VARIANTS", "TorchBatchNorm", "Net", "build", "load_torch", "loss", "optimizer"]

VARIANTS = {"correct": None, "bn_momentum": "P06", "bn_biased_var": "P06", "fc_layout": "P07"}


class TorchBatchNorm(nnx.Module):
    """BatchNorm over the last axis of x [..., C] with torch's rule for the running statistics."""

    def __init__(self, features: int, momentum: float = 0.1, epsilon: float = 1e-5) -> None:
        self.scale = nnx.Param(jnp.ones(features))
        self.bias = nnx.Param(jnp.zeros(features))
        self.mean = nnx.BatchStat(jnp.zeros(features))
        self.var = nnx.BatchStat(jnp.ones(features))
        self.momentum, self.epsilon, self.use_running_average = momentum, epsilon, False

    def __call__(self, x: jax.Array) -> jax.Array:
        if self.use_running_average:
            mean, var = self.mean[...], self.var[...]
        else:
            axes, n = tuple(range(x.ndim - 1)), x.size // x.shape[-1]
            mean, var = x.mean(axis=axes), x.var(axis=axes)  # biased: what the batch is normalised with
            m = self.momentum
            self.mean[...] = (1 - m) * self.mean[...] + m * mean  # nnx.BatchStat: outside the gradient
            self.var[...] = (1 - m) * self.var[...] + m * var * n / (n - 1)  # torch keeps the unbiased variance
        return (x - mean) / jnp.sqrt(var + self.epsilon) * self.scale[...] + self.bias[...]


class Net(nnx.Module):
    """image [B, C, H, W] (torch's layout, transposed inside) -> logits [B, K]."""

    def __init__(self, channels: int, width: int, classes: int, variant: str = "correct") -> None:
        rngs = nnx.Rngs(0)
        if variant == "bn_momentum":
            norm = lambda f: nnx.BatchNorm(f, momentum=0.1, epsilon=1e-5, rngs=rngs)  # noqa: E731
        elif variant == "bn_biased_var":
            norm = lambda f: nnx.BatchNorm(f, momentum=0.9, epsilon=1e-5, rngs=rngs)  # noqa: E731
        else:
            norm = TorchBatchNorm
        self.conv1 = nnx.Conv(channels, width, (3, 3), padding=1, rngs=rngs)
        self.bn1 = norm(width)
        self.conv2 = nnx.Conv(width, 2 * width, (3, 3), strides=2, padding=1, feature_group_count=2, rngs=rngs)
        self.bn2 = norm(2 * width)
        self.fc = nnx.Linear(2 * width, 2 * width, rngs=rngs)
        self.head = nnx.Linear(2 * width, classes, rngs=rngs)

    def __call__(self, image: jax.Array) -> jax.Array:
        x = jnp.transpose(image, (0, 2, 3, 1))  # [B, H, W, C]
        x = jax.nn.relu(self.bn1(self.conv1(x)))
        x = jax.nn.relu(self.bn2(self.conv2(x)))
        return self.head(jax.nn.relu(self.fc(x.mean(axis=(1, 2)))))  # [B, K]


def build(variant: str = "correct", *, channels: int, width: int, classes: int, **_) -> Net:
    """The NNX port named by `variant` (a key of VARIANTS), freshly initialised."""
    if variant not in VARIANTS:
        raise ValueError(f"cnn: variant expected one of {list(VARIANTS)}, got {variant!r}")
    return Net(channels, width, classes, variant)


def load_torch(model: Net, state: dict[str, np.ndarray], variant: str = "correct") -> Net:
    """The user's own loader: torch state_dict arrays (by torch name) into the NNX model, in place.

    `fc_layout` copies fc.weight [out, in] as the kernel (square, so no shape error): the bug.
    """

    def put(var, value) -> None:
        var.set_value(jnp.asarray(value, dtype=var.get_value().dtype))

    for name in ("conv1", "conv2"):
        put(getattr(model, name).kernel, np.transpose(state[f"{name}.weight"], (2, 3, 1, 0)))
        put(getattr(model, name).bias, state[f"{name}.bias"])
    for name in ("bn1", "bn2"):
        bn = getattr(model, name)
        for leaf, attr in (("scale", "weight"), ("bias", "bias"), ("mean", "running_mean"), ("var", "running_var")):
            put(getattr(bn, leaf), state[f"{name}.{attr}"])
    for name in ("fc", "head"):
        weight = state[f"{name}.weight"]
        put(getattr(model, name).kernel, weight if (variant == "fc_layout" and name == "fc") else weight.T)
        put(getattr(model, name).bias, state[f"{name}.bias"])
    return model


def loss(model: Net, batch: dict[str, jax.Array]) -> jax.Array:
    """Mean cross-entropy of the logits against the integer labels, a scalar."""
    logits = model(batch["image"]).astype(jnp.float32)  # as torch's kernel: its log-softmax in float32
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()


def optimizer(variant: str = "correct") -> optax.GradientTransformation:
    """torch.optim.SGD(lr 0.05, momentum 0.9, weight_decay 1e-3): decay added to the gradient, then the trace."""
    return optax.chain(optax.add_decayed_weights(1e-3), optax.sgd(0.05, momentum=0.9))
