"""Helpers shared by the torch scenarios; mirrored by jax_impl/_common.py."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
import torch

from shared.contracts import check_call, finish
from shared.fixtures import Fixture

__all__ = ["scenario_run", "check_variant", "tensor", "numpy", "grads_or_zeros"]


def scenario_run(scenario: str) -> Callable:
    """Decorate `run(fx, variant)`: check the arguments, return a flat dict of numpy arrays.

    Torch needs no dtype switch: tensors keep the fixture's dtype (the JAX twin
    enables x64 for float64 fixtures).
    """

    def wrap(run: Callable) -> Callable:
        @functools.wraps(run)
        def checked(fx: Fixture, variant: str) -> dict[str, np.ndarray]:
            check_call(scenario, fx, variant)
            return finish(scenario, variant, run(fx, variant))

        return checked

    return wrap


def check_variant(scenario: str, variant: str) -> str:
    """Return `variant` if `scenario` registers it, else raise ValueError listing the valid names.

    Public helpers that branch on `variant` call this first, so a typo'd name fails
    instead of falling into an else branch (run() checks it through scenario_run).
    """
    from shared.registry import get  # late: the registry imports the scenario records

    return get(scenario).check_variant(variant)


def tensor(fx: Fixture, key: str, requires_grad: bool = False) -> torch.Tensor:
    """A fixture field as a new torch tensor (own memory: fixture arrays are read-only)."""
    return torch.tensor(np.array(fx[key]), requires_grad=requires_grad)


def numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor as a numpy array, cut from the graph."""
    return t.detach().cpu().numpy()


def grads_or_zeros(loss: torch.Tensor, inputs: Sequence[torch.Tensor], **kwargs) -> list[torch.Tensor]:
    """torch.autograd.grad with "no path" mapped to explicit zeros (pitfall P11).

    torch reports an input the loss does not depend on as None (allow_unused=True)
    and refuses a loss with no graph at all; jax.grad returns zeros in both cases.
    This is the one place where the package maps one to the other, on purpose.
    Extra kwargs (create_graph, retain_graph) are passed to torch.autograd.grad.
    """
    if not loss.requires_grad:
        # the loss was computed entirely from stopped values: no graph, every gradient is zero
        return [torch.zeros_like(x) for x in inputs]
    grads = torch.autograd.grad(loss, list(inputs), allow_unused=True, **kwargs)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads, strict=False)]
