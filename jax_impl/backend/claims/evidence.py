"""claims, evidence: how the JAX claim checks gather their evidence (the theme pairs claims_*.py use it).

What it teaches: how to observe a JAX gradient instead of timing it: the exception a port
really raises (often none), the residuals jax.grad would keep for the backward pass, whether
a gradient is zero or nonzero.
Gradient flow: none here; each theme module builds the smallest function that shows its claim.
Port note: torch_impl/backend/claims/evidence.py has the same names: `saved` here traces fn and counts
its residuals (jax.ad_checkpoint.print_saved_residuals), torch's packs the tensors autograd
saves while fn runs; a JAX gradient is never None, torch's "no path" shows here as zero.
Shapes: none of their own (any array or pytree).
Reference: JAX docs, "Autodiff Cookbook"; jax.ad_checkpoint.print_saved_residuals.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import print_saved_residuals

from ....shared.core.toys import check_evidence

__all__ = ["evidence", "array", "error", "saved", "grad_state", "rel_diff"]

_ITEMSIZE = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4, "bool": 1}


def evidence(check: Callable[[], dict]) -> Callable[[], dict]:
    """Decorate a check: float64 enabled around it (scoped, nothing leaks), its result checked as JSON data.

    The float64 toys stay float64; a check that wants float32 or bfloat16 casts explicitly.
    Raises: TypeError (shared.core.toys.check_evidence) if the evidence is not plain JSON data.
    """

    @functools.wraps(check)
    def run() -> dict:
        with jax.enable_x64(True):  # scoped: the caller's setting is restored
            return check_evidence(check.__name__, check())

    return run


def array(a: np.ndarray) -> jax.Array:
    """A toy array as a JAX array of its own dtype (float64 for the toys, under `evidence`)."""
    return jnp.asarray(a)


def error(fn: Callable[[], Any]) -> dict[str, str | None]:
    """The exception fn() raises, as {"type", "message"} (first line); type None if it returns."""
    try:
        fn()
    except Exception as exc:  # the check reports whatever the framework raises
        return {"type": type(exc).__name__, "message": str(exc).split("\n")[0]}
    return {"type": None, "message": ""}


def saved(fn: Callable, *args) -> dict[str, int]:
    """Residuals jax.grad would save for fn(*args): {"count", "bytes"} (jax.ad_checkpoint.print_saved_residuals).

    Traced, not run: the bytes are what the backward pass would keep alive.
    """
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_saved_residuals(fn, *args)
    count, nbytes = 0, 0
    for line in buf.getvalue().splitlines():
        if m := re.match(r"(\w+)\[([\d,]*)\]", line.strip()):
            count += 1
            nbytes += _ITEMSIZE.get(m.group(1), 8) * math.prod(int(n) for n in m.group(2).split(",") if n)
    return {"count": count, "bytes": nbytes}


def grad_state(grads) -> str:
    """ "zero" or "nonzero" (any entry of any leaf) of a gradient array or pytree."""
    return "nonzero" if any(np.any(np.asarray(g) != 0) for g in jax.tree.leaves(grads)) else "zero"


def rel_diff(a: jax.Array, b: jax.Array) -> float:
    """max |a − b| / max |b|: two computations of one gradient differ by rounding only (a few 1e-16)."""
    return float(np.abs(np.asarray(a - b)).max() / np.abs(np.asarray(b)).max())
