"""grad_clipping: truncated-BPTT training of an Elman RNN with global-norm clipping and SGD.

Shapes: T = S·K steps (S windows of K steps, one SGD step per window), B sequences, I inputs,
H hidden units, O outputs, R = 4 clipping regimes run in every case (outputs prefixed):
  above  max_norm = 0.5 · the smallest unclipped step norm: every step is clipped;
  at     max_norm = the first step's gradient norm, exactly;
  below  max_norm = 2 · the largest unclipped step norm: nothing is clipped;
  zero   mask all 0 (a batch of padding): every gradient is exactly 0, no NaN anywhere.
The loss carries a weight of 3e-4 (an auxiliary loss), so gradient norms are ~1e-3,
where torch's epsilon matters: clip_grad_norm_ scales by min(max_norm / (‖g‖ + 1e-6), 1),
optax.clip_by_global_norm by max_norm / ‖g‖ when ‖g‖ >= max_norm (else 1). The relative
gap is 1e-6 / ‖g‖: 1e-3 here, 1e-6 for ‖g‖ ~ 1 (below float32 tolerance, far above float64's).
The oracle follows torch's formula; `optax_default` (plain optax on the JAX side) diverges.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field
from .tbptt import backward, forward

REGIMES = ("above", "at", "below", "zero")
LEAVES = ("cell/ih/kernel", "cell/ih/bias", "cell/hh/kernel", "cell/hh/bias", "readout/kernel", "readout/bias")
PARAMS = dict(zip(LEAVES, (("I", "H"), ("H",), ("H", "H"), ("H",), ("H", "O"), ("O",)), strict=True))
TORCH_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6)

SCHEMA = {
    "x": Field(("T", "B", "I"), doc="input sequence, S windows of K steps"),
    "targets": Field(("T", "B", "O"), doc="regression targets, near the initial predictions"),
    "h0": Field(("B", "H"), doc="initial hidden state"),
    "mask": Field(
        (len(REGIMES), "T", "B"), choices=(0.0, 1.0), doc="loss mask per regime (1 = real step, 0 = padding)"
    ),
    "max_norm": Field((len(REGIMES),), low=0.0, low_open=True, doc="clipping threshold per regime, in REGIMES order"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
    "lr": Field((), low=0.0, low_open=True, doc="SGD learning rate"),
    "loss_weight": Field(
        (), low=0.0, low_open=True, doc="weight of the loss (an auxiliary loss): gradient norms ~1e-3"
    ),
    "window": Field((), kind="int", low=1, doc="K, steps per window (one optimizer step each)"),
}


def torch_coef(norm: float, max_norm: float) -> float:
    """torch.nn.utils.clip_grad_norm_: min(max_norm / (‖g‖ + 1e-6), 1), always applied."""
    return min(max_norm / (norm + TORCH_EPS), 1.0)


def optax_coef(norm: float, max_norm: float) -> float:
    """optax.clip_by_global_norm: g untouched when ‖g‖ < max_norm, else scaled by max_norm / ‖g‖."""
    return 1.0 if norm < max_norm else max_norm / norm


def train(a: dict[str, np.ndarray], regime: int, max_norm: float, coef_rule=torch_coef) -> dict[str, np.ndarray]:
    """Float64 training loop of one regime (clipping factor `coef_rule(‖g‖, max_norm)`, torch's by default):
    outputs without the regime prefix."""
    p = {leaf: a[f"params/{leaf}"].copy() for leaf in LEAVES}
    k, h = int(a["window"]), a["h0"]
    rows = {"loss": [], "norms": [], "coefs": [], "clipped_norms": []}
    for start in range(0, a["x"].shape[0], k):
        window = slice(start, start + k)
        y, hs, caches, h_next = forward("elman", p, a["x"][window], h)  # h: a constant carry
        mask = a["mask"][regime, window][..., None]
        resid = mask * (y - a["targets"][window])
        grads, _ = backward("elman", p, hs, caches, a["loss_weight"] * resid / resid.size, k)
        norm = np.sqrt(sum(np.sum(g**2) for g in grads.values()))
        coef = coef_rule(norm, max_norm)
        rows["loss"].append(0.5 * a["loss_weight"] * np.mean(resid**2))
        rows["norms"].append(norm)
        rows["coefs"].append(coef)
        rows["clipped_norms"].append(coef * norm)
        p = {leaf: p[leaf] - a["lr"] * coef * grads[leaf] for leaf in LEAVES}
        h = h_next
    out = {key: np.array(v) for key, v in rows.items()}
    out.update({f"moved/{leaf}": p[leaf] - a[f"params/{leaf}"] for leaf in LEAVES})
    return out


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"S": 3, "K": 4, "B": 2, "I": 2, "H": 3, "O": 1}
    t_steps = sizes["S"] * sizes["K"]
    a = {
        "x": rng.normal(size=(t_steps, sizes["B"], sizes["I"])),
        "h0": 0.5 * rng.normal(size=(sizes["B"], sizes["H"])),
        "lr": np.array(0.5),
        "loss_weight": np.array(3e-4),
        "window": np.array(sizes["K"]),
    }
    for key, shape in PARAMS.items():
        a[f"params/{key}"] = 0.6 * rng.normal(size=tuple(sizes[d] for d in shape))
    a["targets"] = rng.normal(size=(t_steps, sizes["B"], sizes["O"]))
    a["mask"] = np.ones((len(REGIMES), t_steps, sizes["B"]))
    a["mask"][REGIMES.index("zero")] = 0.0
    norms = train({**a, "mask": a["mask"][:1]}, 0, np.inf)["norms"]  # unclipped step norms
    a["max_norm"] = np.array([0.5 * norms.min(), norms[0], 2.0 * norms.max(), norms[0]])
    return a


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    out = {}
    for r, regime in enumerate(REGIMES):
        out.update({f"{regime}/{k}": v for k, v in train(a, r, float(a["max_norm"][r])).items()})
    return out


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """What plain optax computes (`optax_default`): the same loop with optax's clipping factor."""
    a = fx.float64()
    out = {}
    for r, regime in enumerate(REGIMES):
        trained = train(a, r, float(a["max_norm"][r]), optax_coef)
        out.update({f"{regime}/{k}": v for k, v in trained.items()})
    return out


_COMMON = (
    ("above/moved/*", "nonzero"),
    ("*/coefs", "nonzero"),  # the factor applied: 1 when nothing is clipped, never 0 or NaN
    ("above/norms", "nonzero"),
    ("zero/norms", "zero"),
    ("zero/loss", "zero"),
    ("zero/clipped_norms", "zero"),
    ("zero/moved/*", "zero"),  # all-zero gradients: parameters bit-identical, no NaN
)


def _window_divides_T(arrays, dims) -> str | None:
    """Every window has K steps: `window` must divide T (a short last window would pass silently)."""
    k, t = int(arrays["window"]), dims["T"]
    return None if t % k == 0 else f"field 'window': expected a divisor of T={t}, got {k}"


SPEC = Scenario(
    name="grad_clipping",
    title="Global-norm clipping in a truncated-BPTT loop: clip_grad_norm_ vs optax.clip_by_global_norm",
    family="scenarios",
    constants={"regimes": REGIMES},
    order=11,
    step_loss=lambda o, a: o["above/loss"][0],  # the first window, regime "above"
    step_updates=True,
    claims=("C18",),
    source="A2 §3",
    lesson=(
        "Clipping needs no detach: it rescales the whole gradient, direction kept. torch divides by "
        "‖g‖ + 1e-6 and always multiplies by min(coef, 1); optax divides by ‖g‖ only when ‖g‖ >= max_norm. "
        "The gap is 1e-6/‖g‖ relative: a float64 port needs torch's formula as an optax transformation."
    ),
    variants=("torch_formula", "optax_default"),
    schema=SCHEMA,
    checks=(_window_divides_T,),
    build=build,
    oracle=oracle,
    pattern={"torch_formula": _COMMON, "optax_default": _COMMON},
    porting=Porting(
        torch="loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); optimizer.step()",
        jax=(
            "optax.chain(optax.clip_by_global_norm(max_norm), optax.sgd(lr)) for new JAX code; when porting torch "
            "and checking float64 parity, or when gradient norms are small (the gap is 1e-6/‖g‖), torch's formula "
            "as optax.stateless(lambda g, _: optax.tree.scale(jnp.minimum(max_norm / (optax.tree.norm(g) + 1e-6), 1), g))"
        ),
        trap=(
            "Same name, two formulas: torch scales by max_norm / (‖g‖ + 1e-6) even exactly at the threshold; "
            "optax leaves ‖g‖ < max_norm untouched and scales by max_norm / ‖g‖. Invisible in float32 for "
            "‖g‖ ~ 1 (5e-7), 0.13 % at ‖g‖ = 8e-4. Only the norm's value is needed: its gradient at 0 is NaN in JAX (P02)."
        ),
    ),
    diverges={"optax_default": ("above/*", "at/*")},
    naive_oracle=naive_oracle,
)
