"""Helpers shared by the torch scenarios; mirrored by jax_impl/_common.py."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
import torch

from shared.core.contracts import check_call, finish
from shared.core.fixtures import Fixture, require

__all__ = ["scenario_run", "scenario_step", "tensor", "numpy", "grads_or_zeros"]


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


def scenario_step(scenario: str) -> Callable:
    """Decorate `make_step(fx, variant)`: check the arguments, then build the step.

    `make_step` sets a scenario up once (model from the fixture, optimizer, inputs) and
    returns a zero-argument callable that performs exactly one step of what `run` trains or
    differentiates and returns that step's loss, a 0-d float32 torch.Tensor, before the step's
    update; every call takes one more step. The bench times it; tests/test_steps.py checks
    it against the oracle's `step_loss`. Torch steps are eager: every call runs forward, backward and the update; the loss
    comes back detached, so no step's graph outlives it.
    Raises ValueError unless fx is a float32 Fixture of `scenario` (float64 would need x64
    for the step's whole lifetime) and `variant` is registered.
    """

    def wrap(make_step: Callable) -> Callable:
        @functools.wraps(make_step)
        def checked(fx: Fixture, variant: str) -> Callable[[], torch.Tensor]:
            require(fx, scenario, "float32", f"{scenario}.make_step")
            fx.spec.check_variant(variant)
            return make_step(fx, variant)

        return checked

    return wrap


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
