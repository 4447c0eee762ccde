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

from ..shared.core.checks import check_variant
from ._common import MLP, StepCall, cross_entropy, field, numpy, scenario_run, scenario_step, step_of
from ._layout import load_params

__all__ = ["build_model", "validate", "grad_recorded", "step_calls", "make_step", "run"]


def build_model(fx) -> MLP:
    """An MLP classifier (logits [B, C] = l2(tanh(l1(x [B, D])))) loaded with the fixture's canonical parameters (they require grad, as in training).

    Built as usual: torch's random initialisation is cheap; the fixture then overwrites every leaf.
    """
    params = fx.under("params")
    d, h, c = fx.dims["D"], fx.dims["H"], fx.dims["C"]
    return load_params(MLP(d, h, c, getattr(torch, fx.dtype)), params)


def validate(model: MLP, x: torch.Tensor, labels: torch.Tensor, variant: str):
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


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: the validation pass of a model built from the fixture (the loss second)."""
    model = build_model(fx)
    x, labels = field(fx, "x"), field(fx, "labels")
    return [StepCall(validate, (model,), (x, labels), {"variant": variant}, loss=(1,))]


@scenario_step("no_grad_inference")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
    """The validation pass (validate: forward and loss, no gradient); returns the validation loss."""
    return step_of(step_calls(fx, variant))


@scenario_run("no_grad_inference")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: logits [B, C], loss [], predictions [B] int64, correct [] int64, grad_recorded [] int64."""
    model = build_model(fx)
    logits, loss = validate(model, field(fx, "x"), field(fx, "labels"), variant)
    predictions = numpy(logits).argmax(axis=1)  # [B] int64
    return {
        "logits": numpy(logits),
        "loss": numpy(loss),
        "predictions": predictions.astype(np.int64),
        "correct": np.array(np.sum(predictions == fx["labels"]), dtype=np.int64),
        "grad_recorded": np.array(max(grad_recorded(logits), grad_recorded(loss)), dtype=np.int64),
    }
