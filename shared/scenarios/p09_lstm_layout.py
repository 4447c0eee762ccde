"""p09_lstm_layout (pitfall P09): torch nn.LSTMCell parameters and carry in a Flax nnx.LSTMCell.

Shapes: T steps, B sequences, D inputs, H hidden units, G = 4H gate columns in
torch's block order i | f | g | o. Canonical parameters are torch's, kernels
transposed to [in, out]: cell/ih/kernel [D, G], cell/hh/kernel [H, G],
cell/ih/bias [G], cell/hh/bias [G]. Unroll T steps from (h0, c0), loss =
0.5 * sum(h_T**2) + sum(c_T); gradients with respect to the canonical parameters.
torch has two biases and returns (h, c); nnx.LSTMCell has one bias per gate
(on the hidden-side Linear) and carries (c, h). The port: split the gate blocks,
bias = b_ih + b_hh, carry order swapped. The naive port loads b_ih only and
passes the carry in torch's order; with b_hh != 0 and h0 != c0 it diverges.
"""

from __future__ import annotations

import numpy as np

from ..core.oracle import fd_grad
from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {"cell/ih/kernel": ("D", "G"), "cell/hh/kernel": ("H", "G"), "cell/ih/bias": ("G",), "cell/hh/bias": ("G",)}

SCHEMA = {
    "x": Field(("T", "B", "D"), doc="input sequence"),
    "h0": Field(("B", "H"), doc="initial hidden state"),
    "c0": Field(("B", "H"), doc="initial cell state"),
    **{
        f"params/{k}": Field(s, doc="torch LSTMCell parameter, kernels [in, 4H], gates i|f|g|o")
        for k, s in PARAMS.items()
    },
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # P09 states no numbers: hand-written, with b_hh != 0 and h0 != c0
        t, b, d, h = 2, 1, 2, 2
        return {
            "x": np.array([[[1.0, -0.5]], [[0.3, 0.8]]]),
            "h0": np.array([[0.5, -0.2]]),
            "c0": np.array([[-1.0, 0.7]]),
            "params/cell/ih/kernel": np.linspace(-0.8, 0.8, d * 4 * h).reshape(d, 4 * h),
            "params/cell/hh/kernel": np.linspace(0.6, -0.6, h * 4 * h).reshape(h, 4 * h),
            "params/cell/ih/bias": np.linspace(-0.3, 0.4, 4 * h),
            "params/cell/hh/bias": np.linspace(0.5, -0.2, 4 * h),
        }
    t, b, d, h = 2, 1, 2, 2  # the handed shapes: compiled functions are reused
    sizes = {"D": d, "H": h, "G": 4 * h}
    out = {"x": rng.normal(size=(t, b, d)), "h0": 0.5 * rng.normal(size=(b, h)), "c0": 0.5 * rng.normal(size=(b, h))}
    for k, shape in PARAMS.items():
        out[f"params/{k}"] = 0.5 * rng.normal(size=tuple(sizes[s] for s in shape))
    return out


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def unroll(p: dict[str, np.ndarray], x: np.ndarray, h: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """torch.nn.LSTMCell semantics (two biases, gates i|f|g|o) over T steps; returns (h_T, c_T)."""
    for x_t in x:
        z = x_t @ p["cell/ih/kernel"] + p["cell/ih/bias"] + h @ p["cell/hh/kernel"] + p["cell/hh/bias"]
        i, f, g, o = np.split(z, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
    return h, c


def loss(h: np.ndarray, c: np.ndarray) -> float:
    return float(0.5 * np.sum(h**2) + np.sum(c))


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}
    # torch's reference in both variants
    h, c = unroll(params, a["x"], a["h0"], a["c0"])
    grads = fd_grad(lambda p: loss(*unroll(p, a["x"], a["h0"], a["c0"])), params)
    return {"h": h, "c": c, **{f"grads/{k}": g for k, g in grads.items()}}


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The naive port: b_hh dropped, and the carry passed as torch's (h, c) to nnx.LSTMCell, which reads it
    as (c, h): the first step starts from h = c0, c = h0, and the final (c_T, h_T) is read back as (h, c)."""
    a = fx.float64()
    params = {k: a[f"params/{k}"] for k in PARAMS}

    def forward(p: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        h_last, c_last = unroll({**p, "cell/hh/bias": np.zeros_like(p["cell/hh/bias"])}, a["x"], a["c0"], a["h0"])
        return c_last, h_last  # read back as (h, c)

    h, c = forward(params)
    grads = fd_grad(lambda p: loss(*forward(p)), params)  # b_hh is never read: its gradient is exactly 0
    return {"h": h, "c": c, **{f"grads/{k}": g for k, g in grads.items()}}


def _check_gates(arrays, dims) -> str | None:
    """An LSTM cell stacks four gates: G = 4H columns."""
    g, h = dims["G"], dims["H"]
    return (
        None if g == 4 * h else f"params/cell/hh/kernel: expected G = 4H = {4 * h} gate columns (i|f|g|o), got G = {g}"
    )


SPEC = Scenario(
    name="p09_lstm_layout",
    title="LSTM parameter layout (two biases, gate blocks, carry order)",
    family="pitfalls",
    claims=(),
    source="P09",
    lesson=(
        "torch's LSTMCell has b_ih and b_hh and returns (h, c); nnx.LSTMCell has one bias per gate and "
        "carries (c, h). Port: split the i|f|g|o blocks, bias = b_ih + b_hh, swap the carry."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "ported": (("h", "nonzero"), ("c", "nonzero"), ("grads/*", "nonzero")),
        "naive": (("h", "nonzero"), ("c", "nonzero"), ("grads/cell/*/kernel", "nonzero")),
    },
    porting=Porting(
        torch="`h, c = nn.LSTMCell(D, H)(x, (h, c))`: `weight_ih [4H, D]`, gates i|f|g|o, `bias_ih` + `bias_hh`",
        jax="`(c, h), _ = nnx.LSTMCell(D, H)((c, h), x)`: per-gate kernels, hidden-side bias = `b_ih + b_hh`",
        trap="loading `b_ih` alone and passing the carry as `(h, c)` runs without error and is wrong",
    ),
    diverges={"naive": ("h", "c", "grads/*")},
    naive_oracle=naive_oracle,
    checks=(_check_gates,),
)
