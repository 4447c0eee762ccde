"""lora: a low-rank adapter (nnx.LoRA) on a frozen base layer, trained with AdamW (weight decay on).

Gradient flow: loss -> the adapter A, B only (nnx.DiffState over nnx.LoRAParam); the base gets
no gradient and no optimizer state (nnx.Optimizer(..., wrt=nnx.LoRAParam)), so AdamW's weight
decay never touches it (bit-identical after training). With B = 0 no gradient reaches A at first.
Port note: torch's `requires_grad_(False)` on the base becomes the nnx.LoRAParam filter, for the
optimizer and the gradient alike. naive_wrt_param passes nnx.Param: it matches nnx.LoRAParam too
(a subclass) and the "frozen" base trains. nnx.LoRA(d, r, h) computes x A B with no α/r scale
(flax 0.12.8): the scale is a multiply in LoRALinear, as in peft.
Shapes: B samples, D inputs, H hidden units, R adapter rank, O outputs.
Reference: Hu et al. 2021, arXiv:2106.09685; flax.nnx.LoRA, nnx.LoRAParam (flax/nnx/nn/lora.py).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ..shared.core.checks import check_same_shape, check_variant
from ._common import (
    StepCall,
    field,
    grads_of,
    load_params,
    numpy,
    params_of,
    scenario_run,
    scenario_step,
    step_of,
    transformation,
)

__all__ = [
    "LoRALinear",
    "Model",
    "build_model",
    "make_optimizer",
    "merged_kernel",
    "train_step",
    "step_calls",
    "make_step",
    "run",
]


class LoRALinear(nnx.Module):
    """base(x) + scale·adapter(x) [B, H]: a linear layer with a low-rank adapter (nnx.LoRA, lora_a [D, R], lora_b [R, H])."""

    def __init__(self, d: int, r: int, h: int, scale: float, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.base = nnx.Linear(d, h, param_dtype=dtype, rngs=rngs)
        self.adapter = nnx.LoRA(d, r, h, param_dtype=dtype, rngs=rngs)
        self.scale = scale

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.base(x) + self.scale * self.adapter(x)


class Model(nnx.Module):
    """pred [B, O] = l2(tanh(l1(x [B, D]))), l1 a LoRALinear."""

    def __init__(self, d: int, r: int, h: int, o: int, scale: float, dtype: jnp.dtype, rngs: nnx.Rngs) -> None:
        self.l1 = LoRALinear(d, r, h, scale, dtype, rngs)
        self.l2 = nnx.Linear(h, o, param_dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(jnp.tanh(self.l1(x)))


def build_model(fx) -> Model:
    """A Model loaded with the fixture's canonical parameters (the base is frozen by the filters, not the model).

    The adapter's A [D, R] and B [R, H] are nnx.LoRAParam leaves in the canonical layout.
    """
    params = fx.under("params")
    d, r, h, o = (fx.dims[k] for k in "DRHO")
    scale = fx.scalar("lora_alpha") / r
    return load_params(nnx.eval_shape(lambda: Model(d, r, h, o, scale, jnp.dtype(fx.dtype), nnx.Rngs(0))), params)


def make_optimizer(model: Model, fx, variant: str) -> nnx.Optimizer:
    """optax.adamw over the adapter (nnx.LoRAParam); naive_wrt_param: over every nnx.Param, the base too."""
    check_variant("lora", variant)
    trainable = nnx.Param if variant == "naive_wrt_param" else nnx.LoRAParam
    hyper = {k: fx.scalar(k) for k in ("eps", "weight_decay")}
    adamw = transformation(optax.adamw, fx.scalar("lr"), b1=fx.scalar("b1"), b2=fx.scalar("b2"), **hyper)
    return nnx.Optimizer(model, adamw, wrt=trainable)  # GRAD-FLOW: only the adapter is given to AdamW


def merged_kernel(layer: LoRALinear) -> jax.Array:
    """W + scale·A B [D, H] in the canonical layout: the adapter folded into the base (peft's merge)."""
    return layer.base.kernel[...] + layer.scale * layer.adapter.lora_a[...] @ layer.adapter.lora_b[...]


@nnx.jit(static_argnames="variant")
def train_step(model: Model, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array, variant: str):
    """One AdamW step on mean((pred − y)²); returns (loss before the step, gradient State).

    Raises ValueError unless pred and y are both [B, O].
    """
    check_variant("lora", variant)
    trainable = nnx.Param if variant == "naive_wrt_param" else nnx.LoRAParam
    diff = nnx.DiffState(0, trainable)  # GRAD-FLOW: the base is frozen: no gradient, no AdamW state, no weight decay

    def loss_fn(model: Model) -> jax.Array:
        pred = model(x)
        check_same_shape("train_step", pred=pred.shape, y=y.shape)
        return jnp.mean((pred - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn, argnums=diff)(model)
    optimizer.update(model, grads)
    return loss, grads


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one AdamW train_step of the adapter of a model built from the fixture."""
    model = build_model(fx)
    optimizer = make_optimizer(model, fx, variant)
    x, y = field(fx, "x"), field(fx, "y")
    return [StepCall(train_step, (model, optimizer), (x, y), {"variant": variant})]


@scenario_step("lora")
def make_step(fx, variant: str) -> Callable[[], jax.Array]:
    """One AdamW train_step of the adapter; returns the loss before the update."""
    return step_of(step_calls(fx, variant))


@scenario_run("lora")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss []; grads/<param> of step 1; params/<param> after `steps`; moved/<param> = after − before;
    merged/l1/kernel = W + s·A B after `steps`."""
    check_variant("lora", variant)
    model = build_model(fx)
    optimizer = make_optimizer(model, fx, variant)
    x, y = field(fx, "x"), field(fx, "y")
    before = params_of(model)
    for step in range(int(fx["steps"])):
        loss, grads = train_step(model, optimizer, x, y, variant)
        if step == 0:
            loss0, grads0 = numpy(loss), grads_of(grads, before)  # not differentiated -> zeros (P11)
    after = params_of(model)
    out = {"loss": loss0}
    out.update({f"grads/{k}": g for k, g in grads0.items()})
    out.update({f"params/{k}": v for k, v in after.items()})
    out.update({f"moved/{k}": after[k] - before[k] for k in after})
    out["merged/l1/kernel"] = numpy(merged_kernel(model.l1))
    return out
