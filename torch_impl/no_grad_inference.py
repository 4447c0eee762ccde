"""no_grad_inference: a validation pass under torch.no_grad, torch.inference_mode or .detach().

Gradient flow: none. no_grad and inference_mode record no graph at all; detach records the
forward's graph (activations saved for backward) and then cuts the result from it. All
three give values identical to the grad-mode forward, requires_grad False, grad_fn None.
Port note: JAX has no context manager for this: nothing is recorded unless jax.grad or
jax.vjp asks, so the validation pass is the plain forward. inference_mode also marks its
outputs as inference tensors, which later raise if autograd must save them.
Shapes: B samples, D inputs, H hidden units, C classes.
Reference: PyTorch docs, "Autograd mechanics: locally disabling gradient computation".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..shared.core.checks import check_rank, check_same_shape, check_values, check_variant
from ._common import numpy, scenario_run, scenario_step, tensor
from ._layout import load_params

__all__ = ["Classifier", "build_model", "cross_entropy", "validate", "grad_recorded", "make_step", "run"]


class Classifier(nn.Module):
    """logits [B, C] = l2(tanh(l1(x [B, D])))."""

    def __init__(self, d: int, h: int, c: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = nn.Linear(d, h, dtype=dtype)
        self.l2 = nn.Linear(h, c, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(x)))


def build_model(fx) -> Classifier:
    """A Classifier loaded with the fixture's canonical parameters (they require grad, as in training).

    Built as usual: torch's random initialisation is cheap; the fixture then overwrites every leaf.
    """
    params = {k.removeprefix("params/"): v for k, v in fx.items() if k.startswith("params/")}
    d, h, c = fx.dims["D"], fx.dims["H"], fx.dims["C"]
    return load_params(Classifier(d, h, c, getattr(torch, fx.dtype)), params)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean softmax cross-entropy of logits [B, C] against int labels [B].

    Raises ValueError unless logits is 2-D with the labels' batch size B and every label is in [0, C)
    (out of range, torch raises IndexError and optax silently gives a wrong loss).
    """
    check_rank("cross_entropy", "logits", tuple(logits.shape), "BC")
    check_same_shape("cross_entropy", logits_batch=tuple(logits.shape[:1]), labels=tuple(labels.shape))
    check_values("cross_entropy", "labels", labels, low=0, high=logits.shape[-1], high_open=True)
    return F.cross_entropy(logits, labels)


def validate(model: Classifier, x: torch.Tensor, labels: torch.Tensor, variant: str):
    """Validation pass: (logits [B, C], loss []) without a graph on either (the JAX twin is jitted).

    Raises ValueError for a variant other than "no_grad", "inference_mode", "detach".
    """
    check_variant("no_grad_inference", variant)
    if variant == "detach":
        logits = model(x).detach()  # GRAD-FLOW: cut the result from the graph
    else:
        mode = torch.inference_mode if variant == "inference_mode" else torch.no_grad
        with mode():  # GRAD-FLOW: validation records no graph
            logits = model(x)
    return logits, cross_entropy(logits, labels)


def grad_recorded(t: torch.Tensor) -> int:
    """1 if `t` carries an autograd record (requires_grad or a grad_fn), else 0."""
    return int(t.requires_grad or t.grad_fn is not None)


@scenario_step("no_grad_inference")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """The validation pass (validate: forward and loss, no gradient); returns the validation loss."""
    model = build_model(fx)
    x, labels = tensor(fx, "x"), tensor(fx, "labels")

    def step() -> torch.Tensor:
        _, loss = validate(model, x, labels, variant)
        return loss  # validate records no graph in any variant: nothing to detach

    return step


@scenario_run("no_grad_inference")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: logits [B, C], loss [], predictions [B] int64, correct [] int64, grad_recorded [] int64."""
    model = build_model(fx)
    logits, loss = validate(model, tensor(fx, "x"), tensor(fx, "labels"), variant)
    predictions = numpy(logits).argmax(axis=1)  # [B] int64
    return {
        "logits": numpy(logits),
        "loss": numpy(loss),
        "predictions": predictions.astype(np.int64),
        "correct": np.array(np.sum(predictions == fx["labels"]), dtype=np.int64),
        "grad_recorded": np.array(max(grad_recorded(logits), grad_recorded(loss)), dtype=np.int64),
    }
