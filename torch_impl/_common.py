"""Helpers shared by the torch scenarios; mirrored by jax_impl/_common.py."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..shared.core.checks import check_rank, check_same_shape, check_values
from ..shared.core.contracts import check_call, finish
from ..shared.core.fixtures import Fixture, require
from ..shared.core.schema import FLOAT_DTYPES

__all__ = [
    "numerics",
    "scenario_run",
    "scenario_step",
    "StepCall",
    "step_of",
    "field",
    "numpy",
    "grads_or_zeros",
    "cross_entropy",
    "MLP",
]

_BACKENDS = torch.backends
# the float32 precision of each operation (torch >= 2.9 API) that numerics pins to "ieee";
# torch's legacy switches write only these entries, so saving them restores everything
_FP32_PINNED = (
    _BACKENDS.cuda.matmul,
    _BACKENDS.cudnn.conv,
    _BACKENDS.cudnn.rnn,
    _BACKENDS.mkldnn.matmul,
    _BACKENDS.mkldnn.conv,
    _BACKENDS.mkldnn.rnn,
)


@contextlib.contextmanager
def numerics(dtype: str) -> Iterator[None]:
    """Compute at full float32 precision inside the block; the caller's settings are restored after.

    Pins float32 matmuls, convolutions and RNNs to IEEE float32 on CUDA (no TF32: cuBLAS
    and cuDNN) and on oneDNN (no bfloat16 passes), through both of torch's APIs (the
    legacy `set_float32_matmul_precision("highest")` / `cudnn.allow_tf32 = False` and the
    per-operation `fp32_precision`, which torch >= 2.9 requires to agree). The mirror of the
    JAX twin's x64 switch and "highest" matmul precision: torch needs no dtype switch
    (tensors keep the fixture's dtype), so `dtype` is only checked. Some 25 µs a call
    (a dozen flag reads and writes; the JAX twin's context managers take some 9 µs).
    Process-wide settings: not thread-safe (as torch's own flags). A caller whose two
    APIs already disagree (torch then refuses to read the legacy flags) gets only the
    per-operation settings pinned and restored.
    Raises ValueError for a dtype other than float32 / float64.
    Reference: PyTorch docs, "TensorFloat-32 (TF32) on Ampere (and later) devices".
    """
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"numerics: dtype expected one of {list(FLOAT_DTYPES)}, got {dtype!r}")
    saved = [setting.fp32_precision for setting in _FP32_PINNED]
    try:
        legacy = (torch.get_float32_matmul_precision(), _BACKENDS.cudnn.allow_tf32)
    except RuntimeError:  # the caller mixed the two APIs; torch refuses to read the legacy view
        legacy = None
    try:
        if legacy is not None:
            torch.set_float32_matmul_precision("highest")  # also sets cuda and mkldnn matmul to "ieee"
            _BACKENDS.cudnn.allow_tf32 = False
        for setting in _FP32_PINNED:
            setting.fp32_precision = "ieee"
        yield
    finally:
        if legacy is not None:
            torch.set_float32_matmul_precision(legacy[0])
            _BACKENDS.cudnn.allow_tf32 = legacy[1]
        for setting, value in zip(_FP32_PINNED, saved, strict=True):
            setting.fp32_precision = value


def scenario_run(scenario: str) -> Callable:
    """Decorate `run(fx, variant)`: check the arguments, return a flat dict of numpy arrays.

    The call runs inside numerics(fx.dtype): full float32, the caller's settings restored
    after; tensors keep the fixture's dtype (the JAX twin enables x64 for float64 fixtures).
    Every output (a tensor, a numpy array) becomes a numpy array.
    """

    def wrap(run: Callable) -> Callable:
        @functools.wraps(run)
        def checked(fx: Fixture, variant: str) -> dict[str, np.ndarray]:
            check_call(scenario, fx, variant)
            with numerics(fx.dtype):
                out = run(fx, variant)
                return finish(scenario, variant, {k: numpy(v) for k, v in out.items()})

        return checked

    return wrap


def scenario_step(scenario: str) -> Callable:
    """Decorate `make_step(fx, variant)`: check the arguments, then build the step.

    `make_step` sets a scenario up once (model from the fixture, optimizer, inputs) and
    returns a zero-argument callable that performs exactly one step of what `run` trains or
    differentiates and returns that step's loss, a 0-d float32 torch.Tensor, before the step's
    update; every call takes one more step. The bench times it; tests/test_steps.py checks
    it against the oracle's `step_loss`. Torch steps are eager: every call runs forward,
    backward and the update; the loss comes back detached, so no step's graph outlives it.
    Building and every call of the step run inside numerics("float32"), the caller's
    settings restored after each.
    Raises ValueError unless fx is a float32 Fixture of `scenario` (float64 would need x64
    for the step's whole lifetime) and `variant` is registered.
    """

    def wrap(make_step: Callable) -> Callable:
        @functools.wraps(make_step)
        def checked(fx: Fixture, variant: str) -> Callable[[], torch.Tensor]:
            require(fx, scenario, "float32", f"{scenario}.make_step")
            fx.spec.check_variant(variant)
            with numerics(fx.dtype):
                step = make_step(fx, variant)

            @functools.wraps(step)
            def scoped() -> torch.Tensor:
                with numerics(fx.dtype):
                    return step()

            return scoped

        return checked

    return wrap


class StepCall(NamedTuple):
    """One call of a scenario's training step: fn(*nodes, *args, **kwargs), its loss at `loss` in the result.

    nodes: the modules and optimizers the call reads and updates (the step's state); args: the
    tensors it takes; kwargs: settings that never change (the variant); loss: the index path of
    the loss in fn's result ((0,): its first item; (): the result itself). A lesson's
    `step_calls(fx, variant)` lists them; make_step runs them (step_of) and the JAX twin's bench
    tunes them (nnx.cached_partial, one jax.jit over nnx.split).
    """

    fn: Callable
    nodes: tuple = ()
    args: tuple = ()
    kwargs: Mapping[str, object] = MappingProxyType({})
    loss: tuple[int, ...] = (0,)

    def __call__(self) -> torch.Tensor:
        """Make the call; return its loss."""
        out = self.fn(*self.nodes, *self.args, **self.kwargs)
        for i in self.loss:
            out = out[i]
        return out


def step_of(calls: Sequence[StepCall]) -> Callable[[], torch.Tensor]:
    """make_step's step from its calls: each call in order; returns the sum of their losses, detached.

    Eager: every call runs forward, backward and the update; the loss comes back detached, so
    no step's graph outlives it. Raises ValueError for no calls.
    """
    if not calls:
        raise ValueError("step_of: calls expected at least one StepCall, got none")

    def step() -> torch.Tensor:
        losses = [call() for call in calls]
        return sum(losses[1:], losses[0]).detach()

    return step


def field(fx: Fixture, key: str, requires_grad: bool = False) -> torch.Tensor:
    """A fixture field as a new torch tensor of the same dtype (own memory: fixture arrays are read-only)."""
    return torch.tensor(np.array(fx[key]), requires_grad=requires_grad)


def numpy(x) -> np.ndarray:
    """A tensor (cut from the graph), numpy array or scalar as a numpy array; a bfloat16 / float16 tensor as
    float32 (numpy has no bfloat16: the float32 holds the same numbers exactly)."""
    if not isinstance(x, torch.Tensor):
        return np.asarray(x)
    t = x.detach().cpu()
    return (t.float() if t.dtype in (torch.bfloat16, torch.float16) else t).numpy()


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


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean softmax cross-entropy of logits [B, C] against int labels [B].

    Raises ValueError unless logits is 2-D with the labels' batch size B and every label is in [0, C)
    (out of range, torch raises IndexError and optax silently gives a wrong loss).
    """
    check_rank("cross_entropy", "logits", logits.shape, "BC")
    check_same_shape("cross_entropy", logits_batch=logits.shape[:1], labels=labels.shape)
    check_values("cross_entropy", "labels", labels, low=0, high=logits.shape[-1], high_open=True)
    return F.cross_entropy(logits, labels)


# -- networks the scenarios share (the lesson is in what each scenario does with them) ----------------


class MLP(nn.Module):
    """out [..., O] = l2(tanh(l1(x [..., D]))): two nn.Linear layers, parameters in the given dtype."""

    def __init__(self, d: int, h: int, o: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(d, h, dtype=dtype)
        self.l2 = nn.Linear(h, o, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(x)))
