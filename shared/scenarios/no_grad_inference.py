"""no_grad_inference: a validation pass under torch.no_grad, torch.inference_mode or .detach().

Shapes: B samples, D inputs, H hidden units, C classes. logits = tanh(x W1 + b1) W2 + b2;
outputs: logits [B, C], mean cross-entropy loss [], predictions [B] (int), correct [] (int)
and grad_recorded [] (int): 1 if the result carries an autograd record (torch: requires_grad
or a grad_fn; JAX: the value is a tracer of a differentiation), else 0. All three torch
idioms give the plain JAX forward's values bit for bit in the same dtype, and no record.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Porting, Scenario
from ..core.schema import Field

PARAMS = {"l1/kernel": ("D", "H"), "l1/bias": ("H",), "l2/kernel": ("H", "C"), "l2/bias": ("C",)}

SCHEMA = {
    "x": Field(("B", "D"), doc="validation inputs"),
    "labels": Field(("B",), kind="int", low=0, high="C", doc="class index in [0, C)"),
    **{f"params/{k}": Field(shape, doc="trained parameter, canonical layout") for k, shape in PARAMS.items()},
}


def build(rng: np.random.Generator, case: str) -> dict[str, np.ndarray]:
    sizes = {"B": 6, "D": 4, "H": 5, "C": 3}
    out = {"x": rng.normal(size=(sizes["B"], sizes["D"])), "labels": rng.integers(0, sizes["C"], size=sizes["B"])}
    for key, shape in PARAMS.items():
        out[f"params/{key}"] = rng.normal(size=tuple(sizes[d] for d in shape))
    return out


def oracle(fx, variant: str) -> dict[str, np.ndarray]:
    a = fx.float64()
    logits = np.tanh(a["x"] @ a["params/l1/kernel"] + a["params/l1/bias"]) @ a["params/l2/kernel"]
    logits = logits + a["params/l2/bias"]
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    predictions = np.argmax(logits, axis=1).astype(np.int64)
    return {
        "logits": logits,
        "loss": np.array(-np.mean(logp[np.arange(len(a["labels"])), a["labels"]])),
        "predictions": predictions,
        "correct": np.array(np.sum(predictions == a["labels"]), dtype=np.int64),
        "grad_recorded": np.array(0, dtype=np.int64),
    }


_PATTERN = (("logits", "nonzero"), ("loss", "nonzero"), ("grad_recorded", "zero"))

SPEC = Scenario(
    name="no_grad_inference",
    title="Validation without a graph: torch.no_grad, torch.inference_mode, .detach() vs a plain JAX forward",
    family="scenarios",
    order=12,
    step_loss=lambda o, a: o["loss"],
    claims=("C09", "C20"),
    source="A1 §4.2, A3 §2.2, §3.1",
    lesson=(
        "The three torch idioms give the same values and no graph on the result; they differ in what "
        "happens on the way (detach records, then cuts) and after (an inference tensor cannot enter "
        "autograd later). JAX records nothing unless jax.grad asks, so its validation is the plain forward."
    ),
    variants=("no_grad", "inference_mode", "detach"),
    schema=SCHEMA,
    build=build,
    oracle=oracle,
    pattern={v: _PATTERN for v in ("no_grad", "inference_mode", "detach")},
    porting=Porting(
        torch="with torch.no_grad(): logits = model(x)  — or torch.inference_mode(), or model(x).detach()",
        jax="logits = model(x)  (no context manager: nothing is recorded outside jax.grad / jax.vjp)",
        trap=(
            "inference_mode outputs raise 'Inference tensors cannot be saved for backward' if later used "
            "in a differentiated computation; no_grad outputs do not. detach builds the graph first "
            "(saved activations) and then drops it. None of this exists in JAX."
        ),
    ),
)
