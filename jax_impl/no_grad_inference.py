"""no_grad_inference: a validation pass as the plain JAX forward (or stop_gradient on its result).

Gradient flow: none. JAX records nothing unless jax.grad / jax.vjp traces the function, so
the torch.no_grad and torch.inference_mode variants are the plain forward here, and the
detach variant's stop_gradient is a no-op outside a differentiation. Values equal torch's.
Port note: there is no context manager to port and nothing like an inference tensor: a
validation result can enter a later jax.grad freely (as a constant). grad_recorded is 1
only for a tracer of a differentiation (the same forward inside jax.grad).
Shapes: B samples, D inputs, H hidden units, C classes.
Reference: JAX docs, "Automatic differentiation" (jax.grad, jax.lax.stop_gradient).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ..shared.core.checks import check_variant, check_x64
from ._common import MLP, StepCall, cross_entropy, field, load_params, numpy, scenario_run, scenario_step, step_of

__all__ = ["build_model", "validate", "grad_recorded", "step_calls", "make_step", "run"]


def build_model(fx) -> MLP:
    """An MLP classifier (logits [B, C] = l2(tanh(l1(x [B, D])))) loaded with the fixture's canonical parameters (nnx.Param leaves, as in training).

    Built with nnx.eval_shape: the random initialisation is never computed, the fixture supplies every leaf.
    Raises ValueError for a float64 fixture outside jax.enable_x64 (JAX would build float32 arrays).
    """
    check_x64("build_model", fx.dtype, jax.config.jax_enable_x64)
    params = fx.under("params")
    d, h, c = fx.dims["D"], fx.dims["H"], fx.dims["C"]
    return load_params(nnx.eval_shape(lambda: MLP(d, h, c, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


@nnx.jit(static_argnames="variant")
def validate(model: MLP, x: jax.Array, labels: jax.Array, variant: str):
    """Validation pass, jitted: (logits [B, C], loss []) without a graph on either.

    Raises ValueError for a variant other than "no_grad", "inference_mode", "detach".
    """
    check_variant("no_grad_inference", variant)
    if variant == "detach":
        logits = jax.lax.stop_gradient(model(x))  # GRAD-FLOW: cut the result from the graph
    else:
        logits = model(x)  # GRAD-FLOW: validation records no graph
    return logits, cross_entropy(logits, labels)


def grad_recorded(t: jax.Array) -> int:
    """1 if `t` is a tracer (it is being differentiated or transformed), else 0 (a concrete array)."""
    return int(isinstance(t, jax.core.Tracer))


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: the validation pass of a model built from the fixture (the loss second)."""
    model = build_model(fx)
    x, labels = field(fx, "x"), field(fx, "labels")
    return [StepCall(validate, (model,), (x, labels), {"variant": variant}, loss=(1,))]


@scenario_step("no_grad_inference")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
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
