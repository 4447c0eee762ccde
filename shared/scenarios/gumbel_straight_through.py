"""gumbel_straight_through: the straight-through Gumbel-softmax: a one-hot forward, the soft sample's gradient.

Shapes: B samples, C categories, K decoder outputs.
  y_soft = softmax((logits + g)/τ)                  [B, C], g the fixture's Gumbel(0, 1) noise
  y_hard = one_hot(argmax y_soft)                   [B, C]
  hard:   y = y_hard − sg(y_soft) + y_soft          (F.gumbel_softmax(..., hard=True), same order)
  soft:   y = y_soft                                (hard=False)
  hard_no_straight_through: y = y_hard              (the bug: argmax has no gradient)
  L = 0.5·mean((y W + b − target)²)                 a decoder reads the sample
Gradient on the logits: hard and soft both go through y_soft (hard evaluates the decoder's
gradient at the one-hot value); without the straight-through it is exactly zero. The noise
is resampled until every row's best category leads by > MARGIN, so float32 argmax agrees.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

MARGIN = 0.1

SCHEMA = {
    "logits": Field(("B", "C"), doc="unnormalised log-probabilities of the categorical"),
    "gumbels": Field(("B", "C"), doc="Gumbel(0, 1) noise −log(−log u), u ~ U(0, 1)"),
    "tau": Field((), low=0.0, low_open=True, doc="temperature τ"),
    "params/decoder/kernel": Field(("C", "K"), doc="decoder kernel, canonical layout"),
    "params/decoder/bias": Field(("K",), doc="decoder bias"),
    "target": Field(("B", "K"), doc="regression target of the decoded sample"),
}


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    b, c, k = int(rng.integers(3, 6)), int(rng.integers(3, 6)), int(rng.integers(2, 4))
    logits = rng.normal(size=(b, c))
    while True:
        gumbels = -np.log(-np.log(rng.uniform(1e-6, 1.0 - 1e-6, size=(b, c))))
        top2 = np.sort(logits + gumbels, axis=1)[:, -2:]
        if (top2[:, 1] - top2[:, 0]).min() > MARGIN:
            break
    out = {"logits": logits, "gumbels": gumbels, "tau": np.array(rng.uniform(0.5, 1.5))}
    out.update({"params/decoder/kernel": rng.normal(size=(c, k)), "params/decoder/bias": rng.normal(size=k)})
    out["target"] = rng.normal(size=(b, k))
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    soft0 = softmax((a["logits"] + a["gumbels"]) / a["tau"])
    index = np.argmax(soft0, axis=1)
    hard0 = np.eye(soft0.shape[1])[index]

    def sample(logits):
        soft = softmax((logits + a["gumbels"]) / a["tau"])
        if variant == "soft":
            return soft
        return hard0 if variant == "hard_no_straight_through" else hard0 - soft0 + soft  # soft0, hard0 stopped

    def loss(p):
        y = sample(p["logits"])
        return 0.5 * np.mean((y @ p["decoder/kernel"] + p["decoder/bias"] - a["target"]) ** 2)

    p0 = {"logits": a["logits"], "decoder/kernel": a["params/decoder/kernel"], "decoder/bias": a["params/decoder/bias"]}
    grads = fd_grad(loss, p0)
    out = {"sample": sample(a["logits"]), "soft_sample": soft0, "index": index, "loss": np.array(loss(p0))}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    return out


_DECODER = ("grads/decoder/*", "nonzero")
PATTERN = {
    "hard": (("grads/logits", "nonzero"), _DECODER, ("sample", "nonzero")),
    "soft": (("grads/logits", "nonzero"), _DECODER, ("sample", "nonzero")),
    "hard_no_straight_through": (("grads/logits", "zero"), _DECODER, ("sample", "nonzero")),
}

SPEC = Scenario(
    name="gumbel_straight_through",
    title="Straight-through Gumbel-softmax: F.gumbel_softmax(hard=True) with the fixture's noise",
    family="advanced",
    order=6,
    claims=(),
    source=(
        "Jang et al. 2017, arXiv:1611.01144 §2-3 (straight-through Gumbel-softmax); "
        "PyTorch torch/nn/functional.py gumbel_softmax"
    ),
    lesson=(
        "With hard=True the forward value is one-hot (y_hard − y_soft + y_soft) and the gradient on the "
        "logits is the soft sample's, taken at the one-hot value; an argmax one-hot alone gives the logits "
        "exactly zero gradient. Both ports need the same noise: the fixture's, not each framework's RNG."
    ),
    variants=("hard", "soft", "hard_no_straight_through"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern=PATTERN,
    porting=Porting(
        torch=(
            "F.gumbel_softmax(logits, tau, hard=True), i.e. y_hard − y_soft.detach() + y_soft with its own "
            "noise −log(Exp(1)); with given noise: the same three lines"
        ),
        jax=(
            "g = jax.random.gumbel(key, logits.shape) (or the given noise); y_soft = jax.nn.softmax((logits + g) / τ); "
            "y_hard = jax.nn.one_hot(argmax); y_hard − jax.lax.stop_gradient(y_soft) + y_soft"
        ),
        trap=(
            "The two frameworks' RNGs never give the same Gumbel noise: parity needs the noise passed in. "
            "jax.nn.one_hot(jnp.argmax(...)) without the straight-through term compiles and runs, with a "
            "zero gradient on the logits; the hot entry of y_hard − y_soft + y_soft is 1 up to one rounding."
        ),
    ),
)
