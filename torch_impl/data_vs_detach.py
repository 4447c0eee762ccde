"""data_vs_detach: zeros written into an activation that autograd saved for backward.

Gradient flow: x -> out = σ(x) -> loss flows; σ's backward reads its saved output.
A write through `out.data` lands in that saved output unseen (gradient silently 0);
through `out.detach()` it bumps the shared version counter (backward raises); into
`out.detach().clone()` it touches a copy (gradient right).
Port note: JAX arrays are immutable: `.at[].set` returns a new array, so every
spelling is the safe one there. Porting JAX to torch, clone before an in-place write.
Shapes: N elements.
Reference: PyTorch docs, "Autograd mechanics: in-place operations with autograd"; Tensor.detach.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..shared.core.checks import check_same_shape
from ._common import StepCall, field, numpy, scenario_run, scenario_step, step_of

__all__ = ["write_zeros", "step", "step_calls", "make_step", "run"]

HOW = ("detach_clone", "data_inplace", "detach_inplace")


def write_zeros(out: torch.Tensor, how: str) -> torch.Tensor:
    """Zero a stopped handle on out [N] in place and return it [N].

    how: "detach_clone" (a copy), "data_inplace" (out.data: writes into out, no version
    bump), "detach_inplace" (out.detach(): writes into out, version bumped).
    Raises:
      ValueError: unknown `how`.
    """
    if how == "data_inplace":
        buf = out.data  # GRAD-FLOW: out.data: torch shares storage, no version bump; JAX: new array
    elif how == "detach_inplace":
        buf = out.detach()  # GRAD-FLOW: out.detach(): torch shares storage and version; JAX: new array
    elif how == "detach_clone":
        buf = out.detach().clone()  # GRAD-FLOW: out.detach().clone(): a snapshot with its own storage in both
    else:
        raise ValueError(f"write_zeros: how expected one of {list(HOW)}, got {how!r}")
    return buf.zero_()


def step(x: torch.Tensor, c: torch.Tensor, how: str) -> tuple[torch.Tensor | np.ndarray, ...]:
    """loss = Σ c·σ(x); write zeros via `how`; backward.

    Args: x [N] requiring grad, c [N]. Returns (loss [], dL/dx [N], out before the write [N] as a
    numpy copy, written [N], out after the write [N]).
    Raises:
      RuntimeError: how == "detach_inplace" ("... modified by an inplace operation").
      ValueError: c's shape differs from x's (no broadcasting in the loss).
    """
    check_same_shape("step", x=x.shape, c=c.shape)
    out = torch.sigmoid(x)  # saves its output for backward
    loss = (c * out).sum()
    before = numpy(out).copy()  # a record of the values, in its own memory
    written = write_zeros(out, how)
    (grad,) = torch.autograd.grad(loss, [x])
    return loss, grad, before, written, out


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one step on the fixture, the zero write spelled `variant` (the loss first)."""
    x = field(fx, "x", requires_grad=True)
    c = field(fx, "c")
    return [StepCall(step, (), (x, c), {"how": variant})]


@scenario_step("data_vs_detach")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """One step (σ forward, the zero write spelled `variant`, d loss / dx); returns the loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("data_vs_detach")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: out, written, out_after_write, grads/x [N]."""
    x = field(fx, "x", requires_grad=True)
    c = field(fx, "c")
    _, grad, before, written, after = step(x, c, variant)
    return {"out": before, "written": numpy(written), "out_after_write": numpy(after), "grads/x": numpy(grad)}
