"""p12_masked_attention_row (pitfall P12): attention with a query row whose keys are all masked.

Shapes: T queries, S keys, K key width, V value width. scores = q k^T / sqrt(K),
masked softmax over S, out = probs @ v, loss = sum(w * out) over the valid query
rows (rows with at least one key; padded queries are excluded from the loss).
Masking with -inf makes the softmax of a fully masked row 0/0 = NaN in both
frameworks. The loss looks fine (the row is excluded), but NaN * 0 = NaN in
probs^T @ dout makes the whole V gradient NaN ("naive", in torch and JAX alike:
not a divergence, the NaN is asserted). "ported" defines an empty row as zeros in
both ports (jax.nn.softmax(where=mask) semantics; torch: masked_fill(-inf),
softmax, masked_fill(0)): finite gradients, the same loss.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "q": Field(("T", "K"), doc="queries"),
    "k": Field(("S", "K"), doc="keys"),
    "v": Field(("S", "V"), doc="values"),
    "mask": Field(("T", "S"), kind="bool", doc="True: query t may attend to key s; the last row is all False"),
    "w": Field(("T", "V"), doc="loss weights"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # P12 states no numbers: 3 queries, the last one padded (no key at all)
        return {
            "q": np.array([[1.0, 0.5], [-0.5, 2.0], [0.3, -1.0]]),
            "k": np.array([[0.2, 1.0], [1.5, -0.5], [-1.0, 0.4]]),
            "v": np.array([[1.0, 2.0], [-1.0, 0.5], [0.5, -2.0]]),
            "mask": np.array([[True, True, True], [True, False, True], [False, False, False]]),
            "w": np.array([[1.0, -0.5], [0.7, 1.2], [2.0, 1.0]]),
        }
    t, s = 3, 3  # the handed shapes: compiled functions are reused
    mask = rng.random((t, s)) < 0.6
    mask[:, 0] = True  # every real query sees at least one key
    mask[-1] = False  # the padded query sees none
    if not (mask[:-1].sum(axis=1) >= 2).any():  # one key per real query: constant weights, zero q, k gradients
        mask[rng.integers(t - 1), rng.integers(1, s)] = True  # give one real query a second key (seed 21)
    return {
        "q": rng.normal(size=(t, 2)),
        "k": rng.normal(size=(s, 2)),
        "v": rng.normal(size=(s, 2)),
        "mask": mask,
        "w": rng.normal(size=(t, 2)),
    }


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    q, k, v, mask, w = a["q"], a["k"], a["v"], a["mask"], a["w"]
    valid = mask.any(axis=-1, keepdims=True)  # [T, 1]
    scores = np.where(mask, q @ k.T / np.sqrt(q.shape[1]), -np.inf)
    with np.errstate(invalid="ignore"):  # an all -inf row: exp(-inf - -inf) = nan, as in both frameworks
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = e / e.sum(axis=-1, keepdims=True)
    if variant == "ported":
        probs = np.where(mask, probs, 0.0)  # an empty row is zeros
    out = probs @ v
    loss = np.sum(np.where(valid, out, 0.0) * w)
    # closed-form backward (the oracle is the chain rule; NaN * 0 stays NaN as in IEEE arithmetic)
    dout = np.where(valid, w, 0.0)
    dv = probs.T @ dout
    dp = dout @ v.T
    ds = np.where(mask, probs * (dp - np.sum(dp * probs, axis=-1, keepdims=True)), 0.0)
    scale = 1.0 / np.sqrt(q.shape[1])
    return {"loss": np.array(loss), "out": out, "grads/q": ds @ k * scale, "grads/k": ds.T @ q * scale, "grads/v": dv}


SPEC = Scenario(
    name="p12_masked_attention_row",
    title="fully masked attention row (softmax of all -inf)",
    family="pitfalls",
    claims=(),
    source="P12",
    lesson=(
        "A query with no visible key gives softmax(all -inf) = NaN in both frameworks: the loss can look "
        "fine while the V gradient is NaN. Define an empty row as zeros, the same way in both ports."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "ported": (("loss", "nonzero"), ("out", "nonzero"), ("grads/*", "nonzero")),
        "naive": (("loss", "nonzero"), ("grads/q", "nonzero"), ("grads/k", "nonzero")),
    },
    porting=Porting(
        torch="`softmax(s.masked_fill(~mask, -inf), -1).masked_fill(~mask, 0)`",
        jax="`jax.nn.softmax(s, where=mask)` (an empty row is zeros)",
        trap="softmax of an all `-inf` row is NaN in both; a finite `-1e9` mask gives a uniform row instead",
    ),
    nonfinite_ok=("out", "grads/v"),
)
