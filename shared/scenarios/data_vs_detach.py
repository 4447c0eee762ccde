"""data_vs_detach: writing into an activation autograd saved, via .data, detach() or a copy.

Shapes: N elements. out = σ(x) [N], loss = Σ c·out; then zeros are written into a
stopped handle on out, then backward. σ's backward reads its saved output w:
dL/dx = c·w·(1 − w).
  detach_clone  — torch out.detach().clone(), JAX stop_gradient(out).at[:].set(0): the
                  write lands in a copy, w = σ(x), the gradient is right in both.
  data_inplace  — torch out.data.zero_(): same storage, no version bump, so backward reads
                  w = 0 and returns 0 without a word. JAX has no way to write into `out`:
                  the same program gives the right gradient.
The third spelling, out.detach().zero_(), bumps the shared version counter and backward
raises RuntimeError (tests/test_data_vs_detach.py asserts type and message).

Oracle of `data_inplace` (listed in `diverges`): the closed form of what torch computes,
c·w·(1 − w) with w the overwritten saved output (0) — *not* the true gradient. The runner
then requires torch == that value and JAX != torch; the tests add that JAX equals the
true gradient c·σ(x)(1 − σ(x)), i.e. here JAX is right and torch is silently wrong.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "x": Field(("N",), doc="pre-activation"),
    "c": Field(("N",), doc="loss weights: L = sum(c * sigmoid(x))"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    n = 4
    return {"x": rng.normal(size=n), "c": rng.uniform(0.5, 2.0, size=n)}


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """Closed form; `out_after_write` is the saved output σ's backward reads (w)."""
    a = fx.float64()
    out = sigmoid(a["x"])
    saved = np.zeros_like(out) if variant == "data_inplace" else out  # torch: .data writes through
    return {
        "out": out,
        "written": np.zeros_like(out),
        "out_after_write": saved,
        "grads/x": a["c"] * saved * (1.0 - saved),
    }


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """What JAX computes for `data_inplace` (the reverse case: here torch is the odd one out): the write lands
    in a new array, so the saved output is σ(x) and the gradient is the true c·σ(x)(1 − σ(x))."""
    a = fx.float64()
    out = sigmoid(a["x"])
    return {"out_after_write": out, "grads/x": a["c"] * out * (1.0 - out)}


SPEC = Scenario(
    name="data_vs_detach",
    title="In-place writes after detach() and .data: an error, a silently wrong gradient, and JAX",
    family="scenarios",
    order=15,
    step_loss=lambda o, a: (a["c"] * o["out"]).sum(),
    claims=("C01", "C21"),
    source="A1 §2.1, A2 intro, A3 §3.2",
    lesson=(
        "out.detach() shares storage and version counter with out: writing into it in place makes "
        "backward raise. out.data shares the storage but not the counter: backward silently reads the "
        "overwritten values (gradient 0 instead of c·σ′(x)). Snapshot with .detach().clone(); JAX "
        "arrays are immutable, .at[].set returns a new array and the gradient stays right."
    ),
    variants=("detach_clone", "data_inplace"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "detach_clone": (
            ("out", "nonzero"),
            ("written", "zero"),
            ("out_after_write", "nonzero"),
            ("grads/x", "nonzero"),
        ),
        # torch: out_after_write and grads/x are 0; JAX: both unchanged (asserted in the tests)
        "data_inplace": (("out", "nonzero"), ("written", "zero")),
    },
    porting=Porting(
        torch="snap = out.detach().clone(); snap.zero_()  — never out.data, never out.detach().zero_()",
        jax="snap = jax.lax.stop_gradient(out).at[:].set(0.0)  (a new array; out is unchanged)",
        trap=(
            "Porting JAX to torch: x.at[i].set(v) is out-of-place; its torch twin must clone first. "
            ".data hides the write from the version counter, so backward uses the overwritten "
            "saved output and returns a wrong gradient with no error."
        ),
    ),
    diverges={"data_inplace": ("grads/x", "out_after_write")},
    naive_oracle=naive_oracle,
)
