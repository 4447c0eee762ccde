"""lora: a low-rank adapter on a frozen base layer, trained with AdamW (weight decay on).

Gradient flow: loss -> the adapter A, B only; the base (l1's W, b and l2) has requires_grad
False: no .grad, so AdamW keeps no moment for it and never decays it (bit-identical after
training). With B = 0 at start no gradient reaches A at the first step.
Port note: `requires_grad_(False)` on the base becomes nnx.LoRA's nnx.LoRAParam leaves and
nnx.Optimizer(model, optax.adamw(...), wrt=nnx.LoRAParam) with nnx.DiffState(0, nnx.LoRAParam);
nnx.Param would match LoRAParam too (a subclass) and train the base (naive_wrt_param, the JAX
side only). nnx.LoRA has no α/r scale: it is a multiply here and there.
Shapes: B samples, D inputs, H hidden units, R adapter rank, O outputs.
Reference: Hu et al. 2021, arXiv:2106.09685; Hugging Face peft tuners/lora/layer.py (LoraLayer).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_variant
from ._common import StepCall, field, numpy, scenario_run, scenario_step, step_of
from ._layout import grads_of, load_params, params_of

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

ADAPTER = ("lora_a", "lora_b")


class _LoRA(nn.Module):
    """x [B, D] -> x A B [B, H], A [D, R], B [R, H]: torch's twin of nnx.LoRA (no base, no scale)."""

    def __init__(self, d: int, r: int, h: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.lora_a = nn.Parameter(torch.zeros(d, r, dtype=dtype))
        self.lora_b = nn.Parameter(torch.zeros(r, h, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.lora_a @ self.lora_b


class LoRALinear(nn.Module):
    """base(x) + scale·adapter(x) [B, H]: a linear layer with a low-rank adapter (peft's LoraLayer)."""

    def __init__(self, d: int, r: int, h: int, scale: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.base = nn.Linear(d, h, dtype=dtype)
        self.adapter = _LoRA(d, r, h, dtype)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.scale * self.adapter(x)


class Model(nn.Module):
    """pred [B, O] = l2(tanh(l1(x [B, D]))), l1 a LoRALinear."""

    def __init__(self, d: int, r: int, h: int, o: int, scale: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.l1 = LoRALinear(d, r, h, scale, dtype)
        self.l2 = nn.Linear(h, o, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.tanh(self.l1(x)))


def build_model(fx) -> Model:
    """A Model loaded with the fixture's canonical parameters, its base frozen.

    The adapter's A [D, R] and B [R, H] are plain tensors in the canonical layout (no transpose).
    """
    params = fx.under("params")
    d, r, h, o = (fx.dims[k] for k in "DRHO")
    model = Model(d, r, h, o, fx.scalar("lora_alpha") / r, getattr(torch, fx.dtype))
    load_params(model, {k: v for k, v in params.items() if "/adapter/" not in k})
    for name in ADAPTER:
        setattr(model.l1.adapter, name, nn.Parameter(field(fx, f"params/l1/adapter/{name}")))
    for module in (model.l1.base, model.l2):
        module.requires_grad_(False)  # GRAD-FLOW: the base is frozen: no gradient, no AdamW state, no weight decay
    return model


def make_optimizer(model: Model, fx, variant: str) -> torch.optim.AdamW:
    """AdamW over the parameters that require grad: the adapter (in both variants: torch has no filter to get wrong)."""
    check_variant("lora", variant)
    hyper = {k: fx.scalar(k) for k in ("eps", "weight_decay")}
    trainable = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        trainable, fx.scalar("lr"), betas=(fx.scalar("b1"), fx.scalar("b2")), **hyper
    )  # GRAD-FLOW: only the adapter is given to AdamW


def merged_kernel(layer: LoRALinear) -> torch.Tensor:
    """W + scale·A B [D, H] in the canonical layout: the adapter folded into the base (peft's merge)."""
    with torch.no_grad():
        return layer.base.weight.T + layer.scale * layer.adapter.lora_a @ layer.adapter.lora_b


def train_step(model: Model, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, variant: str):
    """One AdamW step on mean((pred − y)²); returns the loss before the step. `.grad` keeps the gradients.

    Raises ValueError unless pred and y are both [B, O].
    """
    check_variant("lora", variant)
    optimizer.zero_grad(set_to_none=True)
    pred = model(x)
    check_same_shape("train_step", pred=pred.shape, y=y.shape)
    loss = torch.mean((pred - y) ** 2)
    loss.backward()
    optimizer.step()
    return loss


def _params(model: Model) -> dict[str, np.ndarray]:
    return {
        **params_of(model),
        **{f"l1/adapter/{k}": numpy(getattr(model.l1.adapter, k)).copy() for k in ADAPTER},
    }  # a copy: AdamW writes in place


def step_calls(fx, variant: str) -> list[StepCall]:
    """make_step's calls: one AdamW train_step of the adapter of a model built from the fixture."""
    model = build_model(fx)
    optimizer = make_optimizer(model, fx, variant)
    x, y = field(fx, "x"), field(fx, "y")
    return [StepCall(train_step, (model, optimizer), (x, y), {"variant": variant}, loss=())]


@scenario_step("lora")
def make_step(fx, variant: str) -> Callable[[], torch.Tensor]:
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
    before = _params(model)
    for step in range(int(fx["steps"])):
        loss = train_step(model, optimizer, x, y, variant)
        if step == 0:
            adapter = {f"l1/adapter/{k}": numpy(getattr(model.l1.adapter, k).grad).copy() for k in ADAPTER}
            loss0, grads0 = numpy(loss), {**grads_of(model), **adapter}  # .grad None -> zeros (P11)
    after = _params(model)
    out = {"loss": loss0}
    out.update({f"grads/{k}": g for k, g in grads0.items()})
    out.update({f"params/{k}": v for k, v in after.items()})
    out.update({f"moved/{k}": after[k] - before[k] for k in after})
    out["merged/l1/kernel"] = numpy(merged_kernel(model.l1))
    return out
