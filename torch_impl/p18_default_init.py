"""p18_default_init (pitfall P18): nn.Linear's default initialisation, as a map of the fixture's noise, then SGD.

Gradient flow: loss -> l1, l2 by plain SGD; only the starting weights are the lesson.
Port note: nn.Linear(fan_in, fan_out) initialises its weight with kaiming_uniform_(a=√5) =
U(−1/√fan_in, 1/√fan_in) and its bias with U(−1/√fan_in, 1/√fan_in); nnx.Linear uses
lecun_normal (std 1/√fan_in, √3 times wider) and a zero bias. Copy the weights, or give
nnx.Linear kernel_init=variance_scaling(1/3, "fan_in", "uniform") and a uniform bias_init.
The torch side is the reference in both variants (the naive mistake is the JAX side's).
Shapes: B samples, D inputs, H hidden units, O outputs.
Reference: PyTorch nn.Linear.reset_parameters; He et al. 2015, arXiv:1502.01852 (kaiming init).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from ..shared.core.checks import check_same_shape, check_variant
from ._common import MLP, field, numpy, scenario_run
from ._layout import load_params, params_of

__all__ = ["init_params", "build_model", "train_step", "train", "run"]


def init_params(fx, variant: str) -> dict[str, np.ndarray]:
    """torch's nn.Linear initialisation of every layer (canonical layout) applied to the fixture's U(−1, 1) noise.

    weight: kaiming_uniform_(a=√5), bound gain·sqrt(3/fan_in) with gain = calculate_gain("leaky_relu", √5);
    bias: U(±1/√fan_in). The same in both variants.
    """
    check_variant("p18_default_init", variant)
    gain = nn.init.calculate_gain("leaky_relu", math.sqrt(5))  # sqrt(2 / (1 + a²)) = sqrt(1/3)
    out = {}
    for name in ("l1", "l2"):
        fan_in = fx[f"uniform/{name}/kernel"].shape[0]
        out[f"{name}/kernel"] = gain * math.sqrt(3.0 / fan_in) * fx[f"uniform/{name}/kernel"]
        out[f"{name}/bias"] = fx[f"uniform/{name}/bias"] / math.sqrt(fan_in)
    return out


def build_model(fx, variant: str) -> MLP:
    """An MLP starting from init_params (the layout conversion is _layout's)."""
    check_variant("p18_default_init", variant)
    d, h, o = fx.dims["D"], fx.dims["H"], fx.dims["O"]
    return load_params(MLP(d, h, o, getattr(torch, fx.dtype)), init_params(fx, variant))


def train_step(model: MLP, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """One full-batch SGD step on mean((pred − y)²); returns the loss before it.

    Raises ValueError unless pred and y are both [B, O].
    """
    optimizer.zero_grad(set_to_none=True)
    pred = model(x)
    check_same_shape("train", pred=pred.shape, y=y.shape)
    loss = torch.mean((pred - y) ** 2)
    loss.backward()  # GRAD-FLOW: the same SGD on both sides: only the starting weights differ
    optimizer.step()
    return loss.detach()


def train(model: MLP, x: torch.Tensor, y: torch.Tensor, lr: float, steps: int) -> torch.Tensor:
    """`steps` full-batch SGD steps on mean((pred − y)²); returns the loss before each step [steps].

    Raises ValueError unless pred and y are both [B, O].
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    return torch.stack([train_step(model, optimizer, x, y) for _ in range(steps)])


@scenario_run("p18_default_init")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: init/<param> (the starting weights); losses [steps]; params/<param> after `steps`."""
    model = build_model(fx, variant)
    out = {f"init/{k}": v for k, v in params_of(model).items()}
    out["losses"] = numpy(train(model, field(fx, "x"), field(fx, "y"), fx.scalar("lr"), int(fx["steps"])))
    out.update({f"params/{k}": v for k, v in params_of(model).items()})
    return out
