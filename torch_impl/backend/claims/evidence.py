"""claims, evidence: how the torch claim checks gather their evidence (the theme pairs claims_*.py use it).

What it teaches: how to observe autograd instead of timing it: the exception a snippet really
raises, what autograd saves for backward (bytes that stay alive until backward), whether a
gradient is None, zero or nonzero.
Gradient flow: none here; each theme module builds the smallest graph that shows its claim.
Port note: jax_impl/backend/claims/evidence.py has the same names: `saved` there counts the residuals
jax.grad would keep (it traces a function), here the tensors autograd packs while fn runs;
torch's None gradient ("no path") is JAX's zero.
Shapes: none of their own (any tensor).
Reference: PyTorch docs, "Autograd mechanics" (saved tensors, torch.autograd.graph.saved_tensors_hooks).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from ....shared.core.toys import check_evidence

__all__ = ["evidence", "array", "error", "saved", "grad_state", "rel_diff"]


def evidence(check: Callable[[], dict]) -> Callable[[], dict]:
    """Decorate a check: torch's global generator forked around it, its result checked as JSON data.

    A check may build modules (nn.Linear draws its init from the global generator): the
    caller's random stream is left exactly as it was.
    Raises: TypeError (shared.core.toys.check_evidence) if the evidence is not plain JSON data.
    """

    @functools.wraps(check)
    def run() -> dict:
        with torch.random.fork_rng():  # a check never moves the caller's random stream
            return check_evidence(check.__name__, check())

    return run


def array(a: np.ndarray, requires_grad: bool = False) -> torch.Tensor:
    """A toy array as a tensor of its own dtype (float64 for the toys), copied: the toy stays untouched."""
    return torch.tensor(np.array(a), requires_grad=requires_grad)


def error(fn: Callable[[], Any]) -> dict[str, str | None]:
    """The exception fn() raises, as {"type", "message"} (first line); type None if it returns."""
    try:
        fn()
    except Exception as exc:  # the check reports whatever the framework raises
        return {"type": type(exc).__name__, "message": str(exc).split("\n")[0]}
    return {"type": None, "message": ""}


def saved(fn: Callable[[], Any]) -> tuple[dict[str, int], Any]:
    """What autograd saves for backward while fn() runs, and fn()'s result.

    {"count": tensors packed, "bytes": distinct storages they hold, "elements": the same in
    elements}. A parameter saved at every step or a view of the input counts once: this is the
    memory the saved graph keeps alive, not the number of references to it.
    """
    count, storages = [0], {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        count[0] += 1
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = (storage.nbytes(), t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    tally = {
        "count": count[0],
        "bytes": sum(n for n, _ in storages.values()),
        "elements": sum(n // size for n, size in storages.values()),
    }
    return tally, out


def grad_state(grads: Iterable[torch.Tensor | None]) -> str:
    """ "none" (every .grad is None: no path reached them), "zero" or "nonzero" (any entry)."""
    grads = list(grads)
    if all(g is None for g in grads):
        return "none"
    return "nonzero" if any(bool(g.abs().sum() > 0) for g in grads if g is not None) else "zero"


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max |b|: two computations of one gradient differ by rounding only (a few 1e-16)."""
    return float((a - b).abs().max() / b.abs().max())
