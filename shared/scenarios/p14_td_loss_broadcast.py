"""p14_td_loss_broadcast (pitfall P14): Q(s, a) [B, 1] against a TD target [B].

Shapes: B transitions. loss = mean((q - target)**2), gradients with respect to q and to the
(stopped) target.
`q - target` with shapes [B, 1] and [B] broadcasts to [B, B]: every Q value is
compared with every target. Handed input Q = [[1], [2], [0.5], [-1]], target
[1.5, 1, 0, -0.5]: mse 1.8125 instead of 0.4375. torch F.mse_loss warns and
broadcasts, jnp.mean is silent: the naive variant computes the broadcast loss in
both frameworks (it does not diverge); the ported variant reshapes q to [B]
explicitly and calls a loss that checks shapes (shared.losses.check_same_shape).
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "q": Field(("B", 1), doc="Q(s, a) as a critic head returns it, [B, 1]"),
    "target": Field(("B",), doc="TD target r + gamma * max Q', [B], already a constant"),
}

HANDED = {"q": [[1.0], [2.0], [0.5], [-1.0]], "target": [1.5, 1.0, 0.0, -0.5]}  # PITFALLS.md P14


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":
        return {k: np.array(v) for k, v in HANDED.items()}
    return {"q": rng.normal(size=(4, 1)), "target": rng.normal(size=4)}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    q, t = a["q"], a["target"]
    if variant == "naive":
        diff = q - t[None, :]  # [B, B]: what the broadcast computes
        grads_q = 2.0 * diff.sum(axis=1, keepdims=True) / diff.size
        return {"loss": np.array(np.mean(diff**2)), "grads/q": grads_q, "grads/target": np.zeros_like(t)}
    diff = q[:, 0] - t
    grads_q = (2.0 * diff / diff.size)[:, None]
    return {"loss": np.array(np.mean(diff**2)), "grads/q": grads_q, "grads/target": np.zeros_like(t)}  # target stopped


SPEC = Scenario(
    name="p14_td_loss_broadcast",
    title="TD loss of Q [B, 1] against a target [B] broadcasts to [B, B]",
    family="pitfalls",
    claims=(),
    source="P14",
    lesson=(
        "A [B, 1] prediction minus a [B] target is a [B, B] matrix: the loss is wrong with no error. "
        "Reshape explicitly and let the loss refuse mismatched shapes."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "ported": (("loss", "nonzero"), ("grads/q", "nonzero"), ("grads/target", "zero")),
        "naive": (("loss", "nonzero"), ("grads/q", "nonzero"), ("grads/target", "zero")),
    },
    porting=Porting(
        torch="`F.mse_loss(q.squeeze(-1), target)` (a [B, 1] input only warns)",
        jax="`jnp.mean((q.squeeze(-1) - target) ** 2)` after a shape check",
        trap="`q [B, 1] - target [B]` broadcasts to `[B, B]`: torch warns, `jnp.mean` is silent",
    ),
)
