"""attention_detach: single-head scaled dot-product attention, attention weights stopped or not (C14).

Shapes: N tokens, E model width, K head width. Q = x Wq, K = x Wk, V = x Wv (kernels
[E, K], no bias), A = softmax(Q Kᵀ / √K) with masked scores set to −inf, context = A V,
loss = mean((context - target)²).

  none             every projection learns;
  weights_stopped  context = stop(A) V: A's only inputs are Q and K, so Wq and Wk get
                   exactly zero gradient, while dWv (and the value path into x) is
                   unchanged: A1 §7.1's "prunes unnecessary gradients" removes the only
                   gradient path to Q and K.
Cases (fixed inputs, one mask each): `unmasked`; `causal` (−inf above the diagonal);
`empty_row` (causal, and row 1 fully masked); `random` (inputs and mask drawn from the
seed, one row seeing two keys or more so that Q and K have a gradient to lose). An empty row is defined the same way
in both ports (pitfall P12): it attends to nothing, its weights are zeros. Scores of
an empty row are replaced by 0 before the softmax (double where, P13), so neither
the value nor the gradient is NaN.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {"q/kernel": ("E", "K"), "k/kernel": ("E", "K"), "v/kernel": ("E", "K")}

SCHEMA = {
    "x": Field(("N", "E"), doc="token features"),
    "mask": Field(("N", "N"), kind="bool", doc="mask[i, j]: token i may attend to token j"),
    "target": Field(("N", "K"), doc="regression target for the context"),
    **{f"params/{k}": Field(shape, doc="projection kernel, canonical [in, out]") for k, shape in PARAMS.items()},
}

CASES = ("unmasked", "causal", "empty_row")
EMPTY_ROW = 1
SEED = 1706  # the named cases are fixed: same x, target and kernels, only the mask differs (arXiv:1706.03762)


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    """The named cases share fixed inputs (the seed is ignored); `random` draws inputs and mask from the seed."""
    if case != "random":
        rng = np.random.Generator(np.random.PCG64(SEED))
    n, e, k = 4, 3, 2
    out = {"x": rng.normal(size=(n, e)), "target": rng.normal(size=(n, k))}
    out.update({f"params/{key}": rng.normal(size=(e, k)) for key in PARAMS})
    if case == "random":  # any mask, empty rows included, with one row that sees two keys or more:
        mask = rng.random((n, n)) < 0.5  # a row with one key has constant weights, Q and K would get no gradient
        row, cols = rng.integers(n), rng.choice(n, size=2, replace=False)
        mask[row, cols] = True
    else:
        mask = np.ones((n, n), dtype=bool) if case == "unmasked" else np.tril(np.ones((n, n), dtype=bool))
    if case == "empty_row":
        mask[EMPTY_ROW] = False
    out["mask"] = mask
    return out


def masked_softmax(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    live = mask.any(axis=-1, keepdims=True)  # [N, 1]
    s = np.where(live, np.where(mask, scores, -np.inf), 0.0)
    z = np.exp(s - s.max(axis=-1, keepdims=True))
    return np.where(live, z / z.sum(axis=-1, keepdims=True), 0.0)


def attention(p: dict[str, np.ndarray], x: np.ndarray, mask: np.ndarray, weights: np.ndarray | None = None):
    """(context [N, K], weights [N, N]); `weights` given means they were stopped (a constant)."""
    q, k, v = x @ p["q/kernel"], x @ p["k/kernel"], x @ p["v/kernel"]
    if weights is None:
        weights = masked_softmax(q @ k.T / np.sqrt(q.shape[-1]), mask)
    return weights @ v, weights


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    mask, target = a["mask"], a["target"]
    base = {"x": a["x"], **{k: a[f"params/{k}"] for k in PARAMS}}
    context, weights = attention(base, base["x"], mask)
    const = weights if variant == "weights_stopped" else None  # stopped: computed once, held fixed

    def loss(p: dict[str, np.ndarray]) -> float:
        return float(np.mean((attention(p, p["x"], mask, const)[0] - target) ** 2))

    grads = fd_grad(loss, base)
    out = {"loss": np.array(loss(base)), "context": context, "weights": weights}
    out.update({f"grads/{k}": g for k, g in grads.items()})
    return out


SPEC = Scenario(
    name="attention_detach",
    title="Attention with detached weights: Q and K stop learning",
    family="scenarios",
    order=8,
    step_loss=lambda o, a: o["loss"],
    claims=("C14",),
    source="A1 §7.1; P12",
    lesson=(
        "Detaching the attention weights removes the only gradient path to the Q and K projections: "
        "their gradients are exactly zero and they never learn, while V's gradient is unchanged. "
        "−inf masks give no NaN as long as no row is fully masked; a fully masked row needs a "
        "definition (here: zero weights) written the same way in both ports."
    ),
    variants=("none", "weights_stopped"),
    cases=(*CASES, "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "none": (("grads/*", "nonzero"), ("weights", "nonzero")),
        "weights_stopped": (
            ("grads/q/kernel", "zero"),
            ("grads/k/kernel", "zero"),
            ("grads/v/kernel", "nonzero"),
            ("grads/x", "nonzero"),
            ("weights", "nonzero"),
        ),
    },
    porting=Porting(
        torch=(
            "weights = torch.softmax(scores.masked_fill(~mask, -inf), -1); context = weights @ v "
            "(weights.detach() is the bug); an empty row: torch.where(live, softmax(torch.where(live, s, 0)), 0)"
        ),
        jax=(
            "weights = jax.nn.softmax(jnp.where(mask, s, -inf)); context = weights @ v "
            "(jax.lax.stop_gradient(weights) is the bug); jax.nn.softmax(s, where=mask) also gives zeros "
            "for an empty row, torch has no such argument: write the double where in both"
        ),
        trap=(
            "A fully masked row is NaN in both frameworks (softmax of all −inf), and the NaN reaches "
            "dV and x; a large finite negative fill instead gives a uniform row. Neither is an error."
        ),
    ),
)
