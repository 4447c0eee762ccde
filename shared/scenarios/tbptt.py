"""tbptt: truncated backpropagation through time in an Elman tanh RNN and a GRU.

Shapes: T steps, B sequences, I inputs, H hidden units, G = 3H GRU gate units, O outputs.
Both cells run in every case (outputs prefixed `elman/` and `gru/`). Per step
y_t = h_t W_out + b_out, loss_t = 0.5 * mean((y_t - target_t)^2), loss = sum_t loss_t.
The carry is stopped at every window start t = 0, k, 2k, ...: variants `k=1`, `k=10`,
`k=T` (no truncation). Outputs: parameter gradients, the gradient of the summed loss
with respect to every input step (`grads/x` [T, B, I]) and the gradient of the LAST
step's loss with respect to each input step (`grads_last/x/tNN` [B, I]): exactly zero
before the last window's start, non-zero inside it.

Canonical cell layout (torch_impl/_layout.py RULES): `ih/kernel` = weight_ih.T [I, H]
or [I, 3H], `hh/kernel` = weight_hh.T, `ih/bias` = bias_ih, `hh/bias` = bias_hh; GRU
gate blocks along the last axis in torch's order r | z | n. The oracle is a hand-written
float64 backward pass (checked against finite differences in tests/test_tbptt.py).
"""

from __future__ import annotations

import numpy as np

from ..core.checks import truncation_length
from ..core.records import Porting, Scenario
from ..core.schema import Field

CELLS = ("elman", "gru")
LEAVES = ("cell/ih/kernel", "cell/ih/bias", "cell/hh/kernel", "cell/hh/bias", "readout/kernel", "readout/bias")
_SHAPES = {
    "elman": (("I", "H"), ("H",), ("H", "H"), ("H",), ("H", "O"), ("O",)),
    "gru": (("I", "G"), ("G",), ("H", "G"), ("G",), ("H", "O"), ("O",)),
}
PARAMS = {f"{cell}/{leaf}": shape for cell in CELLS for leaf, shape in zip(LEAVES, _SHAPES[cell], strict=True)}

SCHEMA = {
    "x": Field(("T", "B", "I"), doc="input sequence"),
    "targets": Field(("T", "B", "O"), doc="regression target per step"),
    "h0": Field(("B", "H"), doc="initial hidden state (a constant)"),
    **{f"params/{k}": Field(shape, doc="initial parameter, canonical layout") for k, shape in PARAMS.items()},
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"T": 24, "B": 2, "I": 2, "H": 3, "G": 9, "O": 1}
    out = {
        "x": rng.normal(size=(sizes["T"], sizes["B"], sizes["I"])),
        "targets": rng.normal(size=(sizes["T"], sizes["B"], sizes["O"])),
        "h0": 0.5 * rng.normal(size=(sizes["B"], sizes["H"])),
    }
    for key, shape in PARAMS.items():  # biases random too: the GRU's b_hn = hh/bias[2H:] is non-zero (P08)
        out[f"params/{key}"] = 0.6 * rng.normal(size=tuple(sizes[d] for d in shape))
    return out


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


def cell_step(cell: str, p: dict[str, np.ndarray], x: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, tuple]:
    """One cell step in float64: (h_new [B, H], cache for `cell_backward`). `p` keys without the cell prefix."""
    gi = x @ p["cell/ih/kernel"] + p["cell/ih/bias"]
    gh = h @ p["cell/hh/kernel"] + p["cell/hh/bias"]
    if cell == "elman":
        h_new = np.tanh(gi + gh)
        return h_new, (x, h, h_new)
    n_h = h.shape[-1]
    r = _sigmoid(gi[:, :n_h] + gh[:, :n_h])
    z = _sigmoid(gi[:, n_h : 2 * n_h] + gh[:, n_h : 2 * n_h])
    hn = gh[:, 2 * n_h :]  # W_hn h + b_hn: the term the reset gate multiplies
    n = np.tanh(gi[:, 2 * n_h :] + r * hn)
    return (1.0 - z) * n + z * h, (x, h, r, z, n, hn)


def cell_backward(cell: str, p: dict[str, np.ndarray], cache: tuple, dh_new: np.ndarray, grads: dict) -> tuple:
    """Backward of one step: accumulate parameter gradients into `grads`; return (dx [B, I], dh [B, H])."""
    if cell == "elman":
        x, h, h_new = cache
        dgi = dgh = dh_new * (1.0 - h_new**2)
        dh = dgh @ p["cell/hh/kernel"].T
    else:
        x, h, r, z, n, hn = cache
        dn = dh_new * (1.0 - z)
        dz = dh_new * (h - n)
        dan = dn * (1.0 - n**2)
        dar = dan * hn * r * (1.0 - r)
        daz = dz * z * (1.0 - z)
        dgi = np.concatenate([dar, daz, dan], axis=-1)
        dgh = np.concatenate([dar, daz, dan * r], axis=-1)
        dh = dh_new * z + dgh @ p["cell/hh/kernel"].T
    grads["cell/ih/kernel"] += x.T @ dgi
    grads["cell/ih/bias"] += dgi.sum(axis=0)
    grads["cell/hh/kernel"] += h.T @ dgh
    grads["cell/hh/bias"] += dgh.sum(axis=0)
    return dgi @ p["cell/ih/kernel"].T, dh


def forward(cell: str, p: dict[str, np.ndarray], x: np.ndarray, h0: np.ndarray):
    """Unroll over T steps: (outputs y [T, B, O], hidden states [T, B, H], caches, last hidden)."""
    h, caches, hs = h0, [], []
    for t in range(x.shape[0]):
        h, cache = cell_step(cell, p, x[t], h)
        caches.append(cache)
        hs.append(h)
    hs = np.stack(hs)
    return hs @ p["readout/kernel"] + p["readout/bias"], hs, caches, h


def backward(cell: str, p: dict[str, np.ndarray], hs, caches, dy: np.ndarray, k: int):
    """Truncated BPTT: gradient of sum(dy * y) with the carry stopped at t = 0, k, 2k, ...

    Returns (parameter gradients without the cell prefix, dx [T, B, I]).
    """
    grads = {key: np.zeros_like(p[key]) for key in LEAVES}
    grads["readout/kernel"] = np.einsum("tbh,tbo->ho", hs, dy)
    grads["readout/bias"] = dy.sum(axis=(0, 1))
    dx = np.zeros((len(caches),) + caches[0][0].shape)
    dh = np.zeros_like(hs[0])
    for t in reversed(range(len(caches))):
        dh = dh + dy[t] @ p["readout/kernel"].T
        dx[t], dh = cell_backward(cell, p, caches[t], dh, grads)
        if t % k == 0:
            dh = np.zeros_like(dh)  # the carry into step t was stopped: nothing flows further back
    return grads, dx


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    x, targets, h0 = a["x"], a["targets"], a["h0"]
    t_steps, n = x.shape[0], targets[0].size
    k = truncation_length(variant, t_steps)
    out = {}
    for cell in CELLS:
        p = {leaf: a[f"params/{cell}/{leaf}"] for leaf in LEAVES}
        y, hs, caches, _ = forward(cell, p, x, h0)
        resid = y - targets
        grads, dx = backward(cell, p, hs, caches, resid / n, k)
        dy_last = np.zeros_like(y)
        dy_last[-1] = resid[-1] / n
        _, dx_last = backward(cell, p, hs, caches, dy_last, k)
        out[f"{cell}/loss"] = np.array(0.5 * np.sum(np.mean(resid**2, axis=(1, 2))))
        out.update({f"{cell}/grads/{leaf}": g for leaf, g in grads.items()})
        out[f"{cell}/grads/x"] = dx
        out.update({f"{cell}/grads_last/x/t{t:02d}": dx_last[t] for t in range(t_steps)})
    return out


def _check_gates(arrays, dims) -> str | None:
    """A GRU stacks three gates (r, z, n): G = 3H columns."""
    g, h = dims["G"], dims["H"]
    return (
        None
        if g == 3 * h
        else f"field 'params/gru/cell/hh/kernel': expected G = 3H = {3 * h} gate columns (r|z|n), got G = {g}"
    )


def _pattern(zero_steps: tuple[str, ...], window_steps: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    rules = [("*/grads/cell/*", "nonzero"), ("*/grads/readout/*", "nonzero"), ("*/grads/x", "nonzero")]
    rules += [(f"*/grads_last/x/{g}", "zero") for g in zero_steps]
    rules += [(f"*/grads_last/x/{g}", "nonzero") for g in window_steps]
    return tuple(rules)


SPEC = Scenario(
    name="tbptt",
    title="Truncated BPTT: stop the hidden state every k steps (Elman tanh and GRU)",
    family="scenarios",
    order=10,
    step_loss=lambda o, a: o["elman/loss"] + o["gru/loss"],
    claims=("C10", "C11"),
    source="A1 §5.1–5.2",
    lesson=(
        "Stopping the carry at every window start cuts the gradient across time: the last step's "
        "loss reaches only the input steps of its own window (exact zeros before it); k=T is full BPTT."
    ),
    variants=("k=1", "k=10", "k=T"),
    schema=SCHEMA,
    checks=(_check_gates,),
    build=build,
    oracle=oracle,
    pattern={
        "k=1": _pattern(("t0?", "t1?", "t2[0-2]"), ("t23",)),
        "k=10": _pattern(("t0?", "t1?"), ("t2?",)),
        "k=T": _pattern((), ("t??",)),
    },
    porting=Porting(
        torch=(
            "for t: if t % k == 0: h = h.detach(); h = cell(x[t], h)  (nn.RNNCell / nn.GRUCell); a training "
            "loop calls backward once per window (train_windows)"
        ),
        jax=(
            "jax.lax.scan over the steps with h = jnp.where(t % k == 0, jax.lax.stop_gradient(h), h), or a "
            "scan over windows whose body starts with stop_gradient(h); for a training loop, a scan over "
            "windows with one value_and_grad each (train_windows); the GRU as a plain function of "
            "torch's fused weights with b_hn inside the reset gate"
        ),
        trap=(
            "nnx.GRUCell has no slot for torch's b_hn (r * (W_hn h + b_hn)): merging it into the input "
            "bias changes every hidden state (P08). Detach alone saves no memory with one summed loss "
            "(C11): the activations of all windows stay alive until backward; in JAX, stop_gradient under "
            "one jax.grad keeps every step's residuals too. A backward (value_and_grad) per window keeps "
            "peak memory flat in T (detach-parity bench tbptt)."
        ),
    ),
)
