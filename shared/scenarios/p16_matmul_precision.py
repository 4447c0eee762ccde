"""p16_matmul_precision (pitfall P16): float32 matmul precision, pinned vs an accelerator default.

Shapes: B rows, I inputs, O outputs. y = x @ W, loss = sum(g * y) with fixed
weights g, gradients with respect to x and W.
JAX's default float32 matmul runs one bfloat16 pass on TPUs (TF32 on recent
GPUs); torch defaults to full float32 (allow_tf32 = False). On CPU both are
exact, so the accelerator default cannot be observed here: the "naive" JAX
variant EMULATES it, rounding every matmul operand (forward and backward) to
bfloat16 and accumulating in the fixture dtype. That emulation diverges from
torch by about 1e-2 relative; the "ported" variant relies on the package's one
pin, jax.default_matmul_precision("highest") entered for every scenario call
(jax_impl._common.numerics: nothing global), and agrees with torch.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

SCHEMA = {
    "x": Field(("B", "I"), doc="inputs"),
    "kernel": Field(("I", "O"), doc="dense kernel, canonical [in, out]"),
    "g": Field(("B", "O"), doc="loss weights: loss = sum(g * y)"),
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    if case == "handed":  # P16 states no numbers: thirds and tenths are not bfloat16 numbers
        return {
            "x": np.array([[0.1, 0.2, 0.3], [1.0 / 3.0, -0.7, 1.1]]),
            "kernel": np.array([[1.01, -0.3], [0.7, 2.0 / 3.0], [-1.3, 0.9]]),
            "g": np.array([[1.0, -1.0], [0.5, 2.0]]),
        }
    return {"x": rng.normal(size=(2, 3)), "kernel": rng.normal(size=(3, 2)), "g": rng.normal(size=(2, 2))}


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    x, w, g = a["x"], a["kernel"], a["g"]
    # torch's reference in both variants: exact matmuls (closed form of d sum(g * xW))
    return {"y": x @ w, "grads/x": g @ w.T, "grads/kernel": x.T @ g}


def bfloat16(a: np.ndarray) -> np.ndarray:
    """Round to the nearest bfloat16 (8 significant bits, ties to even), returned as float64.

    Exact for the normal numbers used here (bfloat16 has float32's exponent range).
    """
    mantissa, exponent = np.frexp(np.asarray(a, dtype=np.float64))
    return np.ldexp(np.rint(mantissa * 2.0**8), exponent - 8)


def naive_oracle(fx, variant: str) -> dict[str, np.ndarray]:
    """The emulated bfloat16 pass: y = bf(x) bf(W) accumulated exactly; the backward dots take the
    cotangent g as is and the other operand rounded, and their result is rounded to bfloat16 (the
    transpose of the operand cast): grads/x = bf(g bf(W)ᵀ), grads/kernel = bf(bf(x)ᵀ g)."""
    a = fx.float64()
    x, w, g = bfloat16(a["x"]), bfloat16(a["kernel"]), a["g"]
    return {"y": x @ w, "grads/x": bfloat16(g @ w.T), "grads/kernel": bfloat16(x.T @ g)}


SPEC = Scenario(
    name="p16_matmul_precision",
    title="float32 matmul precision (JAX accelerator default vs torch full float32)",
    family="pitfalls",
    claims=(),
    source="P16",
    lesson=(
        "On TPU / recent GPUs a default-precision float32 matmul in JAX is a bfloat16 / TF32 pass; torch "
        "computes full float32. Pin jax_default_matmul_precision='highest' (and torch allow_tf32=False) once."
    ),
    variants=("ported", "naive"),
    cases=("handed", "random"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={
        "ported": (("y", "nonzero"), ("grads/*", "nonzero")),
        "naive": (("y", "nonzero"), ("grads/*", "nonzero")),
    },
    porting=Porting(
        torch="`torch.backends.cuda.matmul.allow_tf32 = False` (the default): full float32",
        jax='`jax.config.update("jax_default_matmul_precision", "highest")` once, at import',
        trap="JAX's default float32 matmul is one bfloat16 (TPU) or TF32 (GPU) pass; CPU hides it",
    ),
    diverges={"naive": ("y", "grads/*")},
    naive_oracle=naive_oracle,
)
