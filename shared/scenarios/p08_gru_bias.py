"""p08_gru_bias: torch's GRU cell has a hidden-side bias b_hn inside the reset gate; nnx.GRUCell has none.

Shapes: T steps, B sequences, I inputs, H hidden units, G = 3H gate rows (r, z, n).
torch nn.GRUCell:  r = σ(W_ir x + b_ir + W_hr h + b_hr),  z = σ(W_iz x + b_iz + W_hz h + b_hz),
                   n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn)),  h' = (1 − z) ⊙ n + z ⊙ h.
The fixture is a torch checkpoint (weight_ih [G, I], weight_hh [G, H], bias_ih, bias_hh [G]);
loss = sum(c ⊙ h_1..T). Handed case: PITFALLS P08 gives no numbers; ours, with b_hn = [0.1, −0.15],
make the naive hidden states differ by 8.9e-2 (the handed "9e-2").
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "x": Field(("T", "B", "I"), doc="input sequence, time major"),
    "h0": Field(("B", "H"), doc="initial hidden state"),
    "c": Field(("T", "B", "H"), doc="loss weights: loss = sum(c * h)"),
    "state_dict/weight_ih": Field(("G", "I"), doc="torch GRUCell weight_ih, rows r, z, n"),
    "state_dict/weight_hh": Field(("G", "H"), doc="torch GRUCell weight_hh, rows r, z, n"),
    "state_dict/bias_ih": Field(("G",), doc="b_ir, b_iz, b_in"),
    "state_dict/bias_hh": Field(("G",), doc="b_hr, b_hz, b_hn (b_hn ≠ 0 is the point)"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    t, b, i, h = 3, 2, 2, 2  # one shape for both cases: one compile serves both
    out = {
        "x": rng.normal(size=(t, b, i)),
        "h0": 0.5 * rng.normal(size=(b, h)),
        "c": rng.normal(size=(t, b, h)),
        "state_dict/weight_ih": 0.6 * rng.normal(size=(3 * h, i)),
        "state_dict/weight_hh": 0.6 * rng.normal(size=(3 * h, h)),
        "state_dict/bias_ih": 0.3 * rng.normal(size=3 * h),
        "state_dict/bias_hh": 0.3 * rng.normal(size=3 * h),
    }
    if case == "handed":  # a seeded case with a clearly non-zero b_hn
        out["state_dict/bias_hh"][2 * h :] = [0.1, -0.15]
    return out


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def unroll(sd: dict[str, np.ndarray], x: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Hidden states [T, B, H] of torch's GRU cell (float64)."""
    hs = []
    for x_t in x:
        gi = x_t @ sd["state_dict/weight_ih"].T + sd["state_dict/bias_ih"]
        gh = h @ sd["state_dict/weight_hh"].T + sd["state_dict/bias_hh"]
        i_r, i_z, i_n = np.split(gi, 3, axis=-1)
        h_r, h_z, h_n = np.split(gh, 3, axis=-1)
        r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)
        n = np.tanh(i_n + r * h_n)  # b_hn sits inside the reset gate
        h = (1.0 - z) * n + z * h
        hs.append(h)
    return np.stack(hs)


def _states_and_grads(sd: dict[str, np.ndarray], a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    grads = fd_grad(lambda p: float(np.sum(a["c"] * unroll(sd, p["x"], p["h0"]))), {"x": a["x"], "h0": a["h0"]})
    return {"h": unroll(sd, a["x"], a["h0"]), "grads/x": grads["x"], "grads/h0": grads["h0"]}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    return _states_and_grads(a, a)


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port: nnx.GRUCell with bias_ih + bias_hh as its input bias and no hidden bias, i.e. torch's
    cell with b_hn moved out of the reset gate: n = tanh(W_in x + b_in + b_hn + r ⊙ W_hn h)."""
    a = fx.float64()
    folded = {**a, "state_dict/bias_ih": a["state_dict/bias_ih"] + a["state_dict/bias_hh"]}
    folded["state_dict/bias_hh"] = np.zeros_like(a["state_dict/bias_hh"])
    return _states_and_grads(folded, a)


_PATTERN = (("h", "nonzero"), ("grads/x", "nonzero"), ("grads/h0", "nonzero"))


SPEC = Scenario(
    name="p08_gru_bias",
    title="GRU: torch's b_hn sits inside the reset gate; nnx.GRUCell has no slot for it",
    family="pitfalls",
    claims=(),
    source="P08",
    lesson=(
        "Folding bias_hh into the input bias (right for LSTM, and for the r and z gates) is wrong for the "
        "candidate: r ⊙ (W_hn h + b_hn) ≠ r ⊙ W_hn h + b_hn. With b_hn ≠ 0 the hidden states drift by ~1e-1."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={"ported": _PATTERN, "naive": _PATTERN},
    porting=Porting(
        torch="`nn.GRUCell(I, H)`: n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))",
        jax="a small NNX cell with a bias on the hidden-side candidate (`b_hn` inside `r ⊙ (·)`)",
        trap="`nnx.GRUCell` has no `b_hn`: folding `bias_hh` into the input bias changes n when r ≠ 1",
    ),
    diverges={"naive": ("h", "grads/*")},
    naive_oracle=naive_oracle,
)
