"""gradient_reversal: custom backward passes, the gradient reversal layer (DANN) and a clip-gradient op.

Gradient flow: label loss -> label predictor -> features; domain loss -> domain classifier
-> R(h) -> features, where R is the identity forward and its backward is −λ·g (reversal),
g (no_reversal) or clip(g, lo, hi) (clipped): torch.autograd.Function subclasses.
Port note: each op is a torch.autograd.Function with forward(*args), setup_context(ctx,
inputs, output) and backward(ctx, g) returning one gradient per forward input (None for
λ, lo, hi); with setup_context (torch >= 2.0) it also runs under torch.func.grad. The JAX
twin is jax.custom_vjp + defvjp(fwd, bwd), whose bwd returns a tuple of cotangents, one per
primal. Neither is forward-differentiable as written (no jvp rule).
Shapes: B samples, D inputs, H features, C classes, O = 1 domain logit.
Reference: Ganin & Lempitsky 2015, arXiv:1409.7495; fungtion/DANN, models/functions.py (ReverseLayerF).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..shared.core.checks import check_same_shape, check_scalar, check_variant
from ._common import field, grads_or_zeros, numpy, scenario_run
from ._layout import load_params, params_of

__all__ = [
    "DANN",
    "build_model",
    "reverse_gradient",
    "clip_gradient",
    "domain_input",
    "dann_losses",
    "losses_and_grads",
    "run",
]


class DANN(nn.Module):
    """feature: x [B, D] -> h [B, H] (tanh); label: h -> logits [B, C]; domain: R(h) -> logit [B, O]."""

    def __init__(self, d: int, h: int, c: int, o: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.feature = nn.Linear(d, h, dtype=dtype)
        self.label = nn.Linear(h, c, dtype=dtype)
        self.domain = nn.Linear(h, o, dtype=dtype)


def build_model(fx) -> DANN:
    """A DANN loaded with the fixture's canonical parameters."""
    params = fx.under("params")
    dims = fx.dims
    return load_params(DANN(dims["D"], dims["H"], dims["C"], dims["O"], getattr(torch, fx.dtype)), params)


class _GradientReversal(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[1])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (lam,) = ctx.saved_tensors
        return -lam * grad, None  # GRAD-FLOW: gradient reversal: identity forward, −λ·g backward


def reverse_gradient(x: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """The gradient reversal layer: x [B, H] unchanged forward; backward −λ·g, no gradient for λ (0-d tensor)."""
    return _GradientReversal.apply(x, lam)


class _ClipGradient(torch.autograd.Function):
    @staticmethod
    def forward(lo: torch.Tensor, hi: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0], inputs[1])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        lo, hi = ctx.saved_tensors
        return None, None, grad.clamp(lo, hi)  # GRAD-FLOW: the cotangent is clipped elementwise to [lo, hi]


def clip_gradient(lo: torch.Tensor, hi: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x unchanged forward; backward clip(g, lo, hi) elementwise, no gradient for lo, hi (0-d tensors)."""
    return _ClipGradient.apply(lo, hi, x)


def domain_input(h: torch.Tensor, hyper: dict[str, torch.Tensor], variant: str) -> torch.Tensor:
    """R(h [B, H]) per variant: reverse_gradient(h, λ), h, or clip_gradient(lo, hi, h). Raises ValueError for an unknown variant or λ < 0."""
    check_variant("gradient_reversal", variant)
    if variant == "reversal":
        check_scalar("domain_input", "lam", hyper["lam"], 0.0)  # here, not in the op: it also runs under torch.func
        return reverse_gradient(h, hyper["lam"])
    if variant == "clipped":
        return clip_gradient(hyper["clip_lo"], hyper["clip_hi"], h)
    return h


def dann_losses(model: DANN, batch: dict[str, torch.Tensor], hyper: dict[str, torch.Tensor], variant: str):
    """(label loss [], domain loss [], h [B, H], R(h) [B, H]); label loss over source rows (domain 0) only.

    Raises ValueError on an unknown variant, or logits and targets of different shapes.
    Reference: Ganin & Lempitsky 2015, eq. 9-10.
    """
    h = torch.tanh(model.feature(batch["x"]))  # [B, H]
    source = 1.0 - batch["domains"]  # [B], 1 on source rows
    label = (F.cross_entropy(model.label(h), batch["labels"], reduction="none") * source).sum() / source.sum()
    reversed_h = domain_input(h, hyper, variant)
    logit = model.domain(reversed_h)[:, 0]  # [B]
    check_same_shape("dann_losses", domain_logit=logit.shape, domains=batch["domains"].shape)
    return label, F.binary_cross_entropy_with_logits(logit, batch["domains"]), h, reversed_h


def losses_and_grads(model: DANN, batch: dict, hyper: dict, names: tuple[str, ...], variant: str):
    """(label loss [], domain loss [], {loss: canonical parameter gradients}, d domain / d R(h) at the head [B, H],
    d domain / dh the features receive [B, H], {name: d domain / d hyper[name]} for `names`, which require grad)."""
    label, domain, h, reversed_h = dann_losses(model, batch, hyper, variant)
    params = dict(model.named_parameters())
    grads = {}
    for name, loss in (("label_loss", label), ("domain_loss", domain)):
        g = grads_or_zeros(loss, list(params.values()), retain_graph=True)
        grads[name] = params_of(model, dict(zip(params, g, strict=True)))
    received, head, *hyper_grads = grads_or_zeros(domain, [h, reversed_h, *(hyper[k] for k in names)])
    return label, domain, grads, head, received, dict(zip(names, hyper_grads, strict=True))


@scenario_run("gradient_reversal")
def run(fx, variant: str) -> dict[str, np.ndarray]:
    """Outputs: loss/{label,domain} []; grads/{label_loss,domain_loss}/<param>; feature_grads/{head,received}
    [B, H]; grads/hyper/<name> [] for the λ or the bounds the variant uses."""
    model = build_model(fx)
    batch = {k: field(fx, k) for k in ("x", "labels", "domains")}
    names = fx.spec.constants["hyper"][variant]  # the hyper-parameters the variant's op takes
    hyper = {k: field(fx, k, requires_grad=k in names) for k in ("lam", "clip_lo", "clip_hi")}
    label, domain, grads, head, received, hyper_grads = losses_and_grads(model, batch, hyper, tuple(names), variant)
    out = {"loss/label": numpy(label), "loss/domain": numpy(domain)}
    for name, g in grads.items():
        out.update({f"grads/{name}/{k}": v for k, v in g.items()})
    out.update({"feature_grads/head": numpy(head), "feature_grads/received": numpy(received)})
    out.update({f"grads/hyper/{k}": numpy(g) for k, g in hyper_grads.items()})
    return out
